"""``fedrec analyze fedrap``: FedRAP's two poster claims against committed runs.

1. **The sparse global table cuts communication.** Per round, the share of ``C``'s rows that
   are not all zero (``c-density``) and the bytes a round sends up, against PFedRec's on the
   same dataset and protocol (``bytes-up``: the same row width and users), from the runs'
   ``rounds.csv``.
2. **The regulariser as written diverges.** The paper's difference term,
   ``- lambda ||D_u - C||_F^2`` (``fedrap-distance = "squared"``, runs ``fedrap+squared-*``),
   against the bounded form the presets use (``fedrap-*``): train loss and validation HR@10
   per round, the best round, and the round the run stopped diverged (every update NaN or
   inf).

Writes ``<out>/fedrap-claims.md``, ``.json`` and ``.png``.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from fedrec_lab.analysis.state import rounds

DATASETS = (("ml-100k", "ml100k"), ("lastfm-2k", "lastfm2k"))
PROTOCOLS = ("paper", "strict")
SEEDS = (0, 1, 2)
MARKS = (1, 10, 50, 100)


def _series(runs: Path, family: str, short: str, protocol: str, column: str) -> list[list]:
    """Each seed's column per round (None where empty), seeds whose run exists."""
    out = []
    for seed in SEEDS:
        path = runs / f"{family}-{short}-{protocol}-seed{seed}" / "rounds.csv"
        if path.exists():
            out.append([float(r[column]) if r[column] else None for r in rounds(path)])
    return out


def _mean_at(series: list[list], index: int) -> float | None:
    values = [s[index] for s in series if index < len(s) and s[index] is not None]
    return statistics.mean(values) if values else None


def traffic(runs: Path) -> list[dict[str, Any]]:
    rows = []
    for dataset, short in DATASETS:
        for protocol in PROTOCOLS:
            density = _series(runs, "fedrap", short, protocol, "c-density")
            up = _series(runs, "fedrap", short, protocol, "bytes-up")
            base = _series(runs, "pfedrec", short, protocol, "bytes-up")
            down = _series(runs, "fedrap", short, protocol, "bytes-down")
            base_down = _series(runs, "pfedrec", short, protocol, "bytes-down")
            if not density or not base:
                continue
            ratio = [
                a / b
                for seed_a, seed_b in zip(up, base, strict=False)
                for a, b in zip(seed_a, seed_b, strict=False)
                if a is not None and b
            ]
            rows.append(
                {
                    "dataset": dataset,
                    "protocol": protocol,
                    "seeds": len(density),
                    "density": {r: _mean_at(density, r - 1) for r in MARKS},
                    "mb_up_fedrap": statistics.mean(v for s in up for v in s if v) / 1e6,
                    "mb_up_pfedrec": statistics.mean(v for s in base for v in s if v) / 1e6,
                    "saved": 1 - statistics.mean(ratio),
                    "mb_down_fedrap": statistics.mean(v for s in down for v in s if v) / 1e6,
                    "mb_down_pfedrec": statistics.mean(v for s in base_down for v in s if v) / 1e6,
                    "density_curve": [_mean_at(density, i) for i in range(len(density[0]))],
                    "ratio_curve": [
                        _mean_at(
                            [
                                [a / b for a, b in zip(x, y, strict=False) if a and b]
                                for x, y in zip(up, base, strict=False)
                            ],
                            i,
                        )
                        for i in range(len(up[0]))
                    ],
                }
            )
    return rows


def divergence(runs: Path) -> list[dict[str, Any]]:
    rows = []
    for dataset, short in DATASETS:
        for protocol in PROTOCOLS:
            for family, form in (
                ("fedrap+squared", "squared (the paper's)"),
                ("fedrap", "bounded (our presets)"),
            ):
                for seed in SEEDS:
                    folder = runs / f"{family}-{short}-{protocol}-seed{seed}"
                    if not (folder / "summary.json").exists():
                        continue
                    summary = json.loads((folder / "summary.json").read_text())
                    table = rounds(folder / "rounds.csv")
                    loss = [float(r["train-loss"]) if r["train-loss"] else None for r in table]
                    val = [float(r["val-hr@10"]) if r["val-hr@10"] else None for r in table]
                    rows.append(
                        {
                            "dataset": dataset,
                            "protocol": protocol,
                            "distance": form,
                            "seed": seed,
                            "rounds": summary["rounds"],
                            "best_round": summary["best_round"],
                            "best_val_hr": 100 * summary["val"]["hr@10"],
                            "test_hr": 100 * summary["test"]["hr@10"],
                            "diverged_round": summary.get("diverged_round"),
                            "loss": loss,
                            "val": val,
                        }
                    )
    return rows


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(traffic_rows: list[dict], divergence_rows: list[dict], command: str) -> str:
    lines = [
        "# FedRAP's claims: a sparse global table, and its regulariser as written",
        "",
        "```bash",
        command,
        "```",
        "",
        "Share of the global table's rows that are not all zero (mean over the seeds) at rounds "
        + ", ".join(map(str, MARKS))
        + ", and the bytes a round sends up against PFedRec's (same dataset, protocol, users "
        "and row width):",
        "",
        "| dataset | protocol | seeds | "
        + " | ".join(f"density, round {r}" for r in MARKS)
        + " | MB down / up per round, FedRAP | MB down / up per round, PFedRec | bytes up "
        "saved |",
        "|---|---|---|" + "---|" * (len(MARKS) + 3),
    ]
    for r in traffic_rows:
        marks = " | ".join(_fmt(r["density"][m]) for m in MARKS)
        lines.append(
            f"| {r['dataset']} | {r['protocol']} | {r['seeds']} | {marks} "
            f"| {r['mb_down_fedrap']:.2f} / {r['mb_up_fedrap']:.2f} "
            f"| {r['mb_down_pfedrec']:.2f} / {r['mb_up_pfedrec']:.2f} | {100 * r['saved']:.1f} % |"
        )
    lines += [
        "",
        "The regulariser: the paper's `- lambda ||D_u - C||_F^2` (`fedrap-distance = "
        '"squared"`) against the bounded form of our presets, each run\'s best validation '
        "round, its validation and test HR@10 there (%), its train loss at rounds 1, 5, 10 "
        "and 30 and at its last round, and the round it stopped diverged (every update NaN "
        "or inf):",
        "",
        "| dataset | protocol | distance | seed | rounds run | best round | val HR@10 | test "
        "HR@10 | train loss, rounds 1 / 5 / 10 / 30 | last train loss | diverged at |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in divergence_rows:
        if "squared" not in r["distance"] and not any(
            "squared" in x["distance"]
            and x["dataset"] == r["dataset"]
            and x["protocol"] == r["protocol"]
            for x in divergence_rows
        ):
            continue
        finite = [v for v in r["loss"] if v is not None]
        at = [r["loss"][i] if i < len(r["loss"]) else None for i in (0, 4, 9, 29)]
        losses = " / ".join(_fmt(v, 4) for v in at)
        lines.append(
            f"| {r['dataset']} | {r['protocol']} | {r['distance']} | {r['seed']} "
            f"| {r['rounds']} | {r['best_round']} | {r['best_val_hr']:.2f} | {r['test_hr']:.2f} "
            f"| {losses} | {_fmt(finite[-1] if finite else None, 4)} "
            f"| {r['diverged_round'] or '-'} |"
        )
    return "\n".join(lines) + "\n"


def plot(traffic_rows: list[dict], divergence_rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for r in traffic_rows:
        label = f"{r['dataset']} {r['protocol']}"
        axes[0].plot(range(1, len(r["density_curve"]) + 1), r["density_curve"], label=label)
    axes[0].set_title("FedRAP: share of non-zero rows of C", fontsize=9)
    axes[0].set_xlabel("round")
    axes[0].legend(fontsize=7)
    for r in divergence_rows:
        if r["dataset"] != "ml-100k":
            continue
        squared = "squared" in r["distance"]
        style = dict(
            color="C3" if squared else "C0",
            alpha=0.7,
            lw=1,
            ls="-" if r["protocol"] == "paper" else "--",
        )
        seed_label = f"{r['distance']}, {r['protocol']}" if r["seed"] == 0 else None
        loss = [v if v is not None else np.nan for v in r["loss"]][:30]
        val = [100 * v if v is not None else np.nan for v in r["val"]][:30]
        axes[1].plot(range(1, len(loss) + 1), loss, label=seed_label, **style)
        axes[2].plot(range(1, len(val) + 1), val, **style)
    axes[1].set_yscale("log")
    axes[1].set_title("ML-100K: train loss (first 30 rounds)", fontsize=9)
    axes[1].set_xlabel("round")
    axes[1].legend(fontsize=7)
    axes[2].set_title("ML-100K: validation HR@10 (%)", fontsize=9)
    axes[2].set_xlabel("round")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(runs: Path, out: Path, command: str) -> Path:
    traffic_rows, divergence_rows = traffic(runs), divergence(runs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fedrap-claims.md").write_text(markdown(traffic_rows, divergence_rows, command))
    record = {"traffic": traffic_rows, "divergence": divergence_rows}
    (out / "fedrap-claims.json").write_text(json.dumps(record) + "\n")
    plot(traffic_rows, divergence_rows, out / "fedrap-claims.png")
    return out / "fedrap-claims.md"
