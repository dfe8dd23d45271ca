"""The reference rows as a Markdown table and a JSON record."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data import user_dataset
from fedrec_flwr.data.prepared import PreparedData
from fedrec_flwr.data.registry import SyntheticKeys
from fedrec_flwr.evaluation import metric_names
from fedrec_lab.baselines.models import ALS_ITERATIONS
from fedrec_lab.baselines.rows import GRIDS, Row

LABELS = {
    "hr@10": "HR@10",
    "ndcg@10": "NDCG@10",
    "recall@20": "Recall@20",
    "ndcg@20": "NDCG@20",
    "mrr": "MRR",
}


def on_grid_edge(row: Row) -> list[str]:
    """The tuned values of ``row`` chosen at the smallest or largest value of their grid."""
    grid = GRIDS.get(row.name, {})
    return [
        key
        for key, value in row.chosen.items()
        if len(grid.get(key, [])) > 1 and value in (min(grid[key]), max(grid[key]))
    ]


def _pct(value: float) -> str:
    return f"{100 * value:.2f}"


def dataset_label(config: RunConfig) -> str:
    """The dataset's name; a user's file with its name and sha256."""
    if config.data.dataset != user_dataset.FILE_DATASET:
        return config.data.dataset
    sha256 = user_dataset.source_record(config).get("data-file-sha256", "")
    return f"file {Path(config.data.file.data_file).name} (sha256 {sha256[:16]})"


def shape_record(config: RunConfig) -> dict[str, int]:
    """A generated dataset's shape keys (``synthetic-users``, ...); empty for any other."""
    if config.data.dataset != "synthetic":
        return {}
    shape = config.group(SyntheticKeys)
    return {key.name: getattr(shape, key.field) for key in SyntheticKeys.keys}


def file_name(config: RunConfig) -> str:
    """The dataset part of the written files' names: a user's file is named after it, a
    generated dataset after its shape (two shapes in one folder never overwrite each other)."""
    if config.data.dataset == user_dataset.FILE_DATASET:
        return f"file-{Path(config.data.file.data_file).stem}"
    if config.data.dataset == "synthetic":
        users, items, degree = shape_record(config).values()
        return f"synthetic-{users}x{items}-d{degree}"
    return config.data.dataset


def markdown(config: RunConfig, prepared: PreparedData, rows: list[Row], command: str) -> str:
    metrics = metric_names(config.training.protocol)
    lines = [
        f"# Reference rows: {dataset_label(config)}, {config.training.protocol} protocol",
        "",
        "```bash",
        command,
        "```",
        "",
        f"{prepared.num_users:,} users evaluated x {prepared.num_items:,} items, "
        f"{prepared.num_train_rows:,} train rows; seed {config.training.seed}. Test metrics (%) "
        "of the setting with the best validation HR@10 (grids below; centralized rows see every "
        "user's train rows, they are ceilings, not federated methods). A value chosen at the "
        "edge of its grid is flagged: that row may be a lower bound of what the model can do.",
    ]
    if config.training.protocol == "paper":
        share = np.mean(
            [
                prepared.test_item[u] in set(prepared.train_positives(u).tolist())
                for u in range(prepared.num_users)
            ]
        )
        lines += [
            "",
            f"Paper protocol: 1 held-out item + 99 sampled negatives; the test item is also a "
            f"train item of {100 * share:.1f} % of the users (repeated rows are kept).",
        ]
    lines += [
        "",
        "| row | chosen on validation | val HR@10 | "
        + " | ".join(f"test {LABELS[m]}" for m in metrics)
        + " | seconds |",
        "|---|---|---|" + "---|" * len(metrics) + "---|",
    ]
    for row in rows:
        chosen = ", ".join(f"{k}={v}" for k, v in row.chosen.items()) or "-"
        edges = on_grid_edge(row)
        if edges:
            chosen += f" (edge of the grid: {', '.join(edges)})"
        lines.append(
            f"| {row.title} | {chosen} | {_pct(row.val['hr@10'])} | "
            + " | ".join(_pct(row.test[m]) for m in metrics)
            + f" | {row.seconds:.1f} |"
        )
    lines += ["", "Grids (validation HR@10, %):", ""]
    for row in rows:
        if row.grid:
            cells = "; ".join(
                ", ".join(f"{k}={v}" for k, v in c.items() if k != "val-hr@10")
                + f": {_pct(c['val-hr@10'])}"
                for c in row.grid
            )
            lines.append(f"- {row.title}: {cells}")
        elif row.note:
            lines.append(f"- {row.title}: {row.note}")
    lines += [
        "",
        "BPR-MF and ALS: `implicit` (CPU, one thread, random_state = seed), d = 32, ALS "
        f"{ALS_ITERATIONS} iterations. ItemKNN: cosine on the binary train matrix. EASE: "
        "closed form, exact. Local-only: the method's preset with the server's step set to "
        "zero (no federation), early-stopping-patience 10. See `fedrec_lab/baselines/`.",
    ]
    return "\n".join(lines) + "\n"


def write(folder: Path, config: RunConfig, prepared: PreparedData, rows: list[Row], command: str):
    """``baselines-<dataset>-<protocol>.md`` and ``.json`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"baselines-{file_name(config)}-{config.training.protocol}"
    record = {
        "dataset": config.data.dataset,
        **user_dataset.source_record(config),
        **shape_record(config),
        "protocol": config.training.protocol,
        "seed": config.training.seed,
        "command": command,
        "num_users": prepared.num_users,
        "num_items": prepared.num_items,
        "grids": {name: GRIDS[name] for name in GRIDS if any(r.name == name for r in rows)},
        "rows": [row.record() for row in rows],
    }
    stem.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(config, prepared, rows, command))
    return stem
