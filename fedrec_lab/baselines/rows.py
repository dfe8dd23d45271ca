"""The reference rows: each centralized model tuned on validation HR@10 over its grid, and the
local-only rows (a method's preset with the server's step set to zero)."""

from __future__ import annotations

import itertools
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data import user_dataset
from fedrec_flwr.data.prepared import PreparedData, prepare
from fedrec_lab.baselines.models import (
    ease_scores,
    implicit_scores,
    itemknn_scorer,
    knn_neighbours,
    matrix_scorer,
    train_matrix,
)
from fedrec_lab.baselines.scoring import PerUser, Scorer, evaluate_scores_per_user, popularity
from fedrec_lab.presets import resolve
from fedrec_lab.project import conf_dir

#: The tuning grids (validation HR@10 picks one cell of each).
GRIDS: dict[str, dict[str, list]] = {
    "itemknn": {"k": [5, 10, 20, 50, 100, 200, 500, 1000]},
    "ease": {"lambda": [1.0, 10.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 3000.0]},
    "bpr": {
        "learning_rate": [0.001, 0.0025, 0.005, 0.01, 0.02],
        "regularization": [0.01, 0.03],
        "iterations": [50, 200, 800],
    },
    "als": {
        "regularization": [0.1, 1.0, 10.0, 100.0, 1000.0],
        "alpha": [0.5, 2.0, 5.0, 20.0, 50.0, 200.0],
    },
}
LOCAL_ONLY_PATIENCE = 10
CENTRAL = ("popularity", "itemknn", "ease", "bpr", "als")
LOCAL = ("local-pfedrec", "local-fedmf")
ROWS = CENTRAL + LOCAL
NEEDS_IMPLICIT = ("bpr", "als")
TITLES = {
    "popularity": "popularity (centralized)",
    "itemknn": "ItemKNN, cosine (centralized)",
    "ease": "EASE (centralized)",
    "bpr": "BPR-MF d=32, implicit (centralized)",
    "als": "ALS d=32, implicit (centralized)",
    "local-pfedrec": "local-only PFedRec (no federation)",
    "local-fedmf": "local-only FedMF (no federation)",
}


@dataclass
class Row:
    """One reference row: the setting chosen on validation and its metrics (and, where it
    was computed in this process, each user's)."""

    name: str
    title: str
    chosen: dict[str, Any]
    val: dict[str, float]
    test: dict[str, float]
    seconds: float
    grid: list[dict[str, Any]] = field(default_factory=list)  # every cell's val HR@10
    note: str = ""
    per_user: PerUser | None = field(default=None, repr=False, compare=False)

    def record(self) -> dict[str, Any]:
        """The row as JSON data (the per-user values stay out: they go to ``per-user.csv``)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "per_user"}


def tune(
    name: str,
    config: RunConfig,
    prepared: PreparedData,
    grid: dict[str, list],
    make_scorer: Callable[..., Scorer],
) -> Row:
    """Evaluate every cell of ``grid``; keep the first with the best validation HR@10."""
    started = time.perf_counter()
    keys = list(grid)
    cells, best = [], None
    for values in itertools.product(*(grid[k] for k in keys)):
        params = dict(zip(keys, values, strict=True))
        metrics, per_user = evaluate_scores_per_user(config, prepared, make_scorer(**params))
        cells.append({**params, "val-hr@10": metrics["val"]["hr@10"]})
        if best is None or metrics["val"]["hr@10"] > best[1]["val"]["hr@10"]:
            best = (params, metrics, per_user)
        logging.getLogger(__name__).info(
            "%s %s: val HR@10 %.4f", name, params, cells[-1]["val-hr@10"]
        )
    if best is None:
        raise ValueError(f"{name}: an empty grid has no cell to evaluate")
    params, metrics, per_user = best
    return Row(
        name,
        TITLES[name],
        params,
        metrics["val"],
        metrics["test"],
        round(time.perf_counter() - started, 1),
        cells,
        per_user=per_user,
    )


def central_row(name: str, config: RunConfig, prepared: PreparedData) -> Row:
    """One centralized row, tuned on validation HR@10 over ``GRIDS[name]``."""
    if name == "popularity":
        started = time.perf_counter()
        metrics, per_user = popularity(config)
        seconds = round(time.perf_counter() - started, 1)
        return Row(
            name, TITLES[name], {}, metrics["val"], metrics["test"], seconds, per_user=per_user
        )
    train = train_matrix(prepared)
    if name == "itemknn":
        ids, sims = knn_neighbours(train, max(GRIDS[name]["k"]))
        return tune(
            name, config, prepared, GRIDS[name], lambda k: itemknn_scorer(train, ids, sims, k)
        )
    if name == "ease":
        return tune(
            name,
            config,
            prepared,
            GRIDS[name],
            lambda **p: matrix_scorer(ease_scores(train, p["lambda"])),
        )
    if name in NEEDS_IMPLICIT:
        return tune(
            name,
            config,
            prepared,
            GRIDS[name],
            lambda **p: matrix_scorer(implicit_scores(train, name, config.training.seed, **p)),
        )
    raise ValueError(f"unknown reference row '{name}'; choose from {', '.join(ROWS)}")


def method_preset(method: str, config: RunConfig) -> Path:
    """The project's preset of ``method`` for ``config``'s dataset and protocol."""
    return (
        conf_dir()
        / f"{method}-{config.data.dataset.replace('-', '')}-{config.training.protocol}.toml"
    )


def local_only_config(config: RunConfig, method: str, rounds: int | None = None) -> RunConfig:
    """The method's preset for this dataset and protocol (defaults if there is none) with the
    server's step set to zero: no federation."""
    preset = method_preset(method, config)
    mapping = resolve(preset) if preset.exists() else {"method": method}
    keep: tuple[str, ...] = ("dataset", "protocol", "data_dir", "seed", "synthetic_users")
    keep += ("synthetic_items",)
    keep += ("synthetic_mean_degree", "torch_threads", "device")
    keep += tuple(key.replace("-", "_") for key in user_dataset.KEYS)  # a user's file
    base, fields = RunConfig.from_mapping(mapping), config.fields()
    return base.replace(
        **{k: fields[k] for k in keep},
        num_server_rounds=rounds or base.training.num_server_rounds,
        server_optimizer="sgd-momentum",
        server_lr=0.0,
        server_momentum=0.0,
        early_stopping_patience=LOCAL_ONLY_PATIENCE,
        eval_every=1,
    )


def local_row(name: str, config: RunConfig, rounds: int | None = None) -> Row:
    """A local-only row: the method's preset with the server never updating (in-process)."""
    from fedrec_flwr.client_app import app as client_app
    from fedrec_flwr.server_app import run_federation
    from fedrec_lab.local_grid import LocalGrid

    method = name.removeprefix("local-")
    run = local_only_config(config, method, rounds)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        run = run.replace(results_dir=folder, run_name="local-only")
        grid = LocalGrid(client_app, run.to_mapping(), num_nodes=1)
        summary = run_federation(grid, run)
        per_user = PerUser.read(Path(folder) / "local-only")
    seconds = round(time.perf_counter() - started, 1)
    preset = method_preset(method, config)
    note = (
        f"{'conf/' + preset.name if preset.exists() else 'defaults'} with server-optimizer "
        f"sgd-momentum, server-lr 0 (the table never moves); best round {summary['best_round']}"
        f" of {summary['rounds']} run"
    )
    return Row(
        name,
        TITLES[name],
        {"best_round": summary["best_round"], "rounds_run": summary["rounds"]},
        summary["val"],
        summary["test"],
        seconds,
        note=note,
        per_user=per_user,
    )


def reference_rows(
    config: RunConfig, rows: tuple[str, ...] = ROWS, local_rounds: int | None = None
) -> list[Row]:
    """Every requested row, in order."""
    prepared = prepare(config)
    out = []
    for name in rows:
        if name in LOCAL:
            out.append(local_row(name, config, local_rounds))
        else:
            out.append(central_row(name, config, prepared))
    return out


def implicit_available() -> bool:
    try:
        import implicit  # noqa: F401
    except ImportError:
        return False
    return True
