"""``<out>/<table>.png``: test HR@10 per method, with whiskers."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from fedrec_lab.experiments.report import NAMES, RowResult


def plot(results: list[RowResult], path: Path, title: str) -> None:
    """Bars of test HR@10 per method, one panel per (dataset, protocol); whiskers: the user
    bootstrap interval where per-user files exist, else the seed std; x: the paper value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: dict[tuple[str, str], list[RowResult]] = {}
    for r in results:
        if r.summaries:
            panels.setdefault((r.spec.dataset, r.spec.protocol), []).append(r)
    count = max(len(panels), 1)
    fig, axes = plt.subplots(1, count, figsize=(max(5, 0.5 * 14 * count), 4.5), squeeze=False)
    for ax, ((dataset, protocol), rows) in zip(axes[0], panels.items(), strict=False):
        means = [r.mean() for r in rows]
        errors = np.zeros((2, len(rows)))
        for j, r in enumerate(rows):
            ci = r.ci()
            values = r.values("hr@10")
            mean = means[j]
            if ci and mean is not None:
                errors[:, j] = [mean - ci[0], ci[1] - mean]
            elif len(values) > 1:
                errors[:, j] = statistics.stdev(values)
        x = np.arange(len(rows))
        colors = ["tab:blue" if r.spec.kind == "federated" else "tab:grey" for r in rows]
        ax.bar(x, means, yerr=errors, capsize=3, color=colors)
        for j, r in enumerate(rows):
            if r.spec.paper:
                ax.plot(j, r.spec.paper[0], "kx")
        ax.set_xticks(x, [r.spec.key for r in rows], rotation=60, ha="right", fontsize=7)
        ax.set(title=f"{NAMES.get(dataset, dataset)}, {protocol}", ylabel="test HR@10 (%)")
    if not panels:
        axes[0][0].text(0.5, 0.5, "no finished cell yet", ha="center")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
