"""The SAM table's plot: SAM minus no SAM per measured row, with the paired intervals, and
the per-round generalization gap of the pairs whose runs recorded it (``eval-loss``)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np

from fedrec_lab.analysis.cells import SamCell

#: A row without an interval on a measure: drawn as nothing.
NO_INTERVAL = {"mean": float("nan"), "low": float("nan"), "high": float("nan")}


def _gap_curves(runs: Path, r: dict[str, Any]) -> dict[bool, list]:
    """Mean over the row's seeds of the per-round gap (``rounds.csv``), where both sides
    recorded it."""
    from fedrec_lab.analysis.state import rounds

    curves: dict[bool, list] = {}
    for sam in (False, True):
        series = []
        for seed in r["seeds"]:
            cell = SamCell(r["method"], sam, r["dataset"], r["protocol"], seed)
            path = runs / cell.name / "rounds.csv"
            if path.exists():
                table = rounds(path)
                if table and table[0].get("gap", ""):
                    series.append([float(x["gap"]) if x["gap"] else np.nan for x in table])
        if series:
            width = min(len(s) for s in series)
            curves[sam] = list(np.nanmean([s[:width] for s in series], axis=0))
    return curves if len(curves) == 2 else {}


def plot(rows: list[dict[str, Any]], runs: Path, path: Path) -> None:
    """SAM minus no SAM per row (HR@10, gap, top eigenvalue as a ratio) and the per-round
    gap of the pairs that recorded it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if r["seeds"]]
    curves = {id(r): _gap_curves(runs, r) for r in done}
    with_curves = [r for r in done if curves[id(r)]]
    width = 4 if with_curves else 3
    fig, axes = plt.subplots(1, width, figsize=(4 * width, 0.32 * max(len(done), 6) + 1.5))
    labels = [f"{r['method']} {r['dataset']} {r['protocol']}" for r in done]
    y = np.arange(len(done))
    panels = (
        ("hr@10", "test HR@10, SAM - without (points)", False),
        ("gap", "gap, SAM - without (% of without)", True),
        ("mean_lambda_max", "top eigenvalue, SAM - without (% of without)", True),
    )
    for ax, (key, title, relative) in zip(axes[:3], panels, strict=True):
        scale = [100 / abs(statistics.mean(r[key]["without"])) if relative else 1.0 for r in done]
        # a row without an interval here (no per-user values) is a gap in the panel
        d = [r[key].get("difference") or NO_INTERVAL for r in done]
        mean = np.array([x["mean"] * k for x, k in zip(d, scale, strict=True)])
        low = np.array([x["low"] * k for x, k in zip(d, scale, strict=True)])
        high = np.array([x["high"] * k for x, k in zip(d, scale, strict=True)])
        ax.errorbar(mean, y, xerr=[mean - low, high - mean], fmt="o", capsize=3)
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_yticks(y, labels if ax is axes[0] else [""] * len(done), fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.invert_yaxis()
    if with_curves:
        ax = axes[3]
        for r in with_curves:
            for sam, style in ((False, "--"), (True, "-")):
                label = f"{r['method']} {r['dataset']} {r['protocol']}{' SAM' if sam else ''}"
                values = curves[id(r)][sam]
                ax.plot(range(1, len(values) + 1), values, style, label=label)
        ax.set_title("gap per round, mean over the row's seeds", fontsize=9)
        ax.set_xlabel("round")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
