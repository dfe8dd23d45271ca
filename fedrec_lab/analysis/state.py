"""A run's model at its best validation round, as the analyses read it.

A run made with ``keep-best-state = true`` holds it in ``<run-dir>/best-state/``
(:mod:`fedrec_flwr.server.checkpoint`). Any other finished run can be *replayed* to its best
round: runs are deterministic (every draw keyed by seed, user and round; metrics independent
of the packing), so the run's own configuration with ``num-server-rounds`` = its best round,
evaluation only there, ``keep-best-state`` and ``eval-loss`` trains the same model. The
replay runs in a work folder and is checked: its validation and test metrics and its train
loss at that round must equal the committed run's (:func:`replay_difference`; a run made on
another device, e.g. CUDA, may differ in the last digits, and the analyses say so).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedrec_flwr import atomic
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import PreparedData, prepare
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.node.state import NodeState
from fedrec_flwr.server.checkpoint import BEST_FOLDER, BEST_POINTER

#: Columns a replay must reproduce at the best round (timings, bytes and diagnostics of the
#: rows a node keeps are left out: the replay keeps every tuned row, ``eval-loss``).
CHECKED = ("train-loss", "val-", "test-")


@dataclass
class BestState:
    """The model every user evaluated with at a run's best validation round."""

    run_dir: Path  # the folder holding best-state/ (the run's, or its replay's)
    config: RunConfig
    prepared: PreparedData
    round: int
    arrays: dict[str, np.ndarray]  # eval-table, table, dense/<name>
    nodes: list[tuple[NodeRuntime, NodeState]]  # by partition

    @property
    def eval_table(self) -> np.ndarray:
        return self.arrays["eval-table"]

    @property
    def dense(self) -> dict[str, np.ndarray]:
        prefix = "dense/"
        return {k[len(prefix) :]: v for k, v in self.arrays.items() if k.startswith(prefix)}

    def node_of(self, user: int) -> tuple[NodeRuntime, NodeState, int]:
        """(runtime, state, position) of a global user id."""
        runtime, state = self.nodes[user % len(self.nodes)]
        return runtime, state, int(runtime.positions_of(np.array([user]))[0])


def has_state(folder: Path) -> bool:
    """Does ``folder`` hold a finished run with its best state?"""
    folder = Path(folder)
    return (folder / BEST_FOLDER / BEST_POINTER).exists() and (folder / "summary.json").exists()


def run_config(run_dir: Path, data_dir: str | Path | None = None, **changes: Any) -> dict:
    """A finished run's run config (``config.json`` without the recorded extras), with
    ``data-dir`` (if given) and ``changes``. A run made on CUDA is read on the CPU where
    this PyTorch sees no GPU (a replay there may differ in the last digits, and
    :func:`replay_difference` says by how much)."""
    recorded = json.loads((Path(run_dir) / "config.json").read_text())
    config = {k: recorded[k] for k in RunConfig.key_names() if k in recorded}
    if str(config.get("device", "cpu")).startswith("cuda") and not torch.cuda.is_available():
        config["device"] = "cpu"
    if data_dir:
        config["data-dir"] = str(Path(data_dir).resolve())
    config.update(changes)
    return config


def load_best_state(run_dir: Path, data_dir: str | Path | None = None) -> BestState:
    """``<run_dir>/best-state/`` with the run's configuration and data."""
    run_dir = Path(run_dir)
    folder = run_dir / BEST_FOLDER
    if not (folder / BEST_POINTER).exists():
        raise FileNotFoundError(
            f"{run_dir} has no {BEST_FOLDER}/ (run it with keep-best-state = true, or replay "
            "it: fedrec analyze replay RUN_DIR)"
        )
    pointer = json.loads((folder / BEST_POINTER).read_text())
    config = RunConfig.from_mapping(run_config(run_dir, data_dir, resume=""))
    prepared = prepare(config)
    meta, arrays = atomic.load_tagged(folder / "server.npz")
    if meta["round"] != pointer["round"]:
        raise ValueError(
            f"{folder}: server.npz is of round {meta['round']}, {BEST_POINTER} "
            f"names round {pointer['round']}"
        )
    nodes = []
    count = int(pointer["num-partitions"])
    for partition in range(count):
        tag, state = atomic.load_tagged(folder / pointer["nodes"] / f"partition-{partition}.npz")
        if tag["after-round"] != pointer["round"] or tag["partition-id"] != partition:
            raise ValueError(f"{folder}: partition {partition}'s state is not of the best round")
        runtime = NodeRuntime(config, prepared, partition, count)
        nodes.append((runtime, NodeState.from_arrays(state)))
    return BestState(run_dir, config, prepared, int(pointer["round"]), arrays, nodes)


def best_round(run_dir: Path) -> int:
    return int(json.loads((Path(run_dir) / "summary.json").read_text())["best_round"])


def rounds(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def replay_difference(run_dir: Path, replay_dir: Path) -> dict[str, Any]:
    """How the replay's best round compares with the run's: ``metrics_equal`` (every
    validation and test metric the same text), ``max_abs`` (the largest difference over those
    and the train loss) and ``first`` (its column)."""
    target, old, new = _best_rows(run_dir, replay_dir)
    columns = [c for c in old if c.startswith(CHECKED) and c in new and old[c] != ""]
    worst, where = 0.0, ""
    for column in columns:
        gap = abs(float(old[column]) - float(new[column]))
        if gap > worst or (math.isnan(gap) and not where):
            worst, where = gap, column
    metrics = [c for c in columns if c.startswith(("val-", "test-"))]
    return {
        "round": target,
        "metrics_equal": all(old[c] == new[c] for c in metrics),
        "max_abs": worst,
        "first": where,
    }


def replay_column_equal(run_dir: Path, replay_dir: Path, column: str) -> bool:
    """Whether the replay's ``column`` at the best round is the run's, to the last digit."""
    _, old, new = _best_rows(run_dir, replay_dir)
    return old.get(column, "") != "" and old[column] == new.get(column)


def _best_rows(run_dir: Path, replay_dir: Path) -> tuple[int, dict[str, str], dict[str, str]]:
    """(the run's best round, its ``rounds.csv`` row, the replay's last row: that round)."""
    target = best_round(run_dir)
    (old,) = [r for r in rounds(Path(run_dir) / "rounds.csv") if int(r["round"]) == target]
    return target, old, rounds(Path(replay_dir) / "rounds.csv")[-1]


def replay(
    run_dir: Path, work: Path, data_dir: str | Path | None = None, nodes: int | None = None
) -> Path:
    """Replay a finished run to its best round into ``work/<run name>`` (once: a replay
    with a best state there is reused); the replay's run folder."""
    from fedrec_lab.experiments.cells import run_federated

    run_dir = Path(run_dir)
    name = run_dir.name
    folder = Path(work) / name
    if has_state(folder):
        return folder
    target = best_round(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    config = run_config(
        run_dir,
        data_dir,
        **{
            "num-server-rounds": target,
            "eval-every": target,
            "eval-users": 0,
            "early-stopping-patience": 0,
            "keep-best-state": True,
            "eval-loss": True,
            "checkpoint-every": 0,
            "resume": "",
            "results-dir": str(Path(work).resolve()),
            "run-name": name,
        },
    )
    if folder.exists():  # an unfinished replay: start again
        import shutil

        shutil.rmtree(folder)
    status = run_federated(config, nodes or int(summary.get("num_nodes", 1)), use_flwr=False)
    if status != "finished:completed":
        raise RuntimeError(f"the replay of {run_dir} did not finish: {status}")
    return folder


def to_tensor(value: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.asarray(value, np.float32)).to(device)
