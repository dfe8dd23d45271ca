"""Resuming a stopped or crashed run: ``resume = "<run-dir>"`` (or ``fedrec --resume``).

The run continues in its own folder from its last committed checkpoint
(:mod:`fedrec_flwr.server.checkpoint`), once its configuration is checked: every key must have the
value the run was started with (``config.json``), except the :data:`OPERATIONAL_KEYS`, which
do not change what is computed; the nodes' data must be the data it started on. What differs
is refused, naming the keys. A run without a committed checkpoint starts again at round 1 in
the same folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedrec_flwr import atomic
from fedrec_flwr.config import RunConfig
from fedrec_flwr.results import INCOMPLETE

FOLDER, LATEST, SERVER = "checkpoint", "latest.json", "server.npz"
#: Run-config keys that do not change what a run computes: they may differ between a run and
#: its resumption, and are left out of the tags of checkpoints and node states.
OPERATIONAL_KEYS = frozenset(
    {
        "results-dir",
        "run-name",
        "data-dir",  # the data is checked itself: sizes, split and node data fingerprints
        "resume",
        "checkpoint-every",
        "keep-best-state",
        "torch-threads",
        "node-wait-timeout",
        "round-timeout",
        "max-in-flight",
    }
)


class CheckpointError(RuntimeError):
    """A run cannot be resumed (other configuration, data or nodes) or its checkpoint is bad."""


def fingerprinted_config(config: RunConfig) -> dict[str, Any]:
    """The run-config keys that change what a run computes, and their values."""
    return {k: v for k, v in config.to_mapping().items() if k not in OPERATIONAL_KEYS}


def differing_keys(stored: dict[str, Any], given: dict[str, Any]) -> list[str]:
    """``key: stored -> given`` for every key whose value differs (a missing one counts),
    except a key the stored side lacks that is given at its default: one declared after the
    run started, whose default computes what the run computed."""
    defaults = {key.name: key.default for key in RunConfig.declared_keys()}
    return [
        f"{k}: {stored.get(k, '(absent)')!r} -> {given.get(k, '(absent)')!r}"
        for k in sorted(set(stored) | set(given))
        if stored.get(k) != given.get(k)
        and not (k not in stored and k in defaults and given.get(k) == defaults[k])
    ]


def resume_dir(config: RunConfig) -> Path:
    """The run folder ``resume`` names, once checked: it exists, has not finished, and was
    started with the same configuration but for the operational keys."""
    run_dir = Path(config.outputs.resume).expanduser().resolve()
    if not (run_dir / "config.json").exists():
        raise CheckpointError(
            f"resume='{config.outputs.resume}': no run folder with a config.json there"
        )
    if not (run_dir / INCOMPLETE).exists():
        raise CheckpointError(
            f"resume='{config.outputs.resume}': that run finished (no {INCOMPLETE} marker): "
            "nothing to resume"
        )
    stored = json.loads((run_dir / "config.json").read_text())
    stored = {k: stored[k] for k in RunConfig.key_names() if k in stored}
    started = RunConfig.from_mapping({**stored, "resume": ""})
    changed = differing_keys(fingerprinted_config(started), fingerprinted_config(config))
    if changed:
        raise CheckpointError(
            f"resume='{config.outputs.resume}': the run was started with another configuration; "
            f"differing keys (started -> given): {'; '.join(changed)}. Resume with its values "
            f"(`fedrec --resume {run_dir}` reads them from its config.json)."
        )
    return run_dir


@dataclass
class Resumed:
    """A run being resumed: its folder, its ``config.json`` and its last checkpoint."""

    run_dir: Path
    stored: dict[str, Any]  # its config.json
    round: int = 0  # of the checkpoint (0: none committed)
    run_key: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def load(cls, config: RunConfig) -> Resumed:
        """The run ``config.outputs.resume`` names, checked, with its checkpoint (if any)."""
        run_dir = resume_dir(config)
        resumed = cls(run_dir, json.loads((run_dir / "config.json").read_text()))
        latest = run_dir / FOLDER / LATEST
        if not latest.exists():
            return resumed
        pointer = json.loads(latest.read_text())
        try:
            meta, arrays = atomic.load_tagged(run_dir / FOLDER / pointer["server"])
        except ValueError as error:
            raise CheckpointError(f"resume: {error}") from error
        if (meta["round"], meta["run-key"]) != (pointer["round"], pointer["run-key"]):
            raise CheckpointError(f"{latest} and {pointer['server']} disagree: bad checkpoint")
        changed = differing_keys(meta["config"], fingerprinted_config(config))
        if changed:
            raise CheckpointError(f"resume: the checkpoint's configuration differs: {changed}")
        resumed.round, resumed.run_key = meta["round"], meta["run-key"]
        resumed.meta, resumed.arrays = meta, arrays
        return resumed

    def extra(self) -> dict[str, Any]:
        """What its ``config.json`` holds besides the run configuration."""
        keys = set(RunConfig.key_names())
        return {k: v for k, v in self.stored.items() if k not in keys}

    def rows(self) -> list[dict[str, Any]]:
        """The results rows up to the checkpoint; ``rounds.csv`` is cut back to them."""
        path = self.run_dir / "rounds.csv"
        if self.round:
            atomic.write_text(path, self.meta["rounds-csv"])
            return list(self.meta["rows"])
        with open(path, newline="") as f:  # no checkpoint: the header only
            atomic.write_text(path, f.readline())
        return []

    def check_data(self, num_users: int, num_items: int, fingerprint: str | None) -> None:
        """The nodes must hold the data the run started on (sizes and, when recorded, the
        split's fingerprint)."""
        stored = self.stored
        was = (stored.get("num_users"), stored.get("num_items"))
        if was[0] is not None and was != (num_users, num_items):
            raise CheckpointError(
                f"resume: the run had {was[0]} users x {was[1]} items, the nodes now hold "
                f"{num_users} x {num_items}"
            )
        was_fingerprint = stored.get("data_fingerprint")
        if was_fingerprint and fingerprint and was_fingerprint != fingerprint:
            raise CheckpointError(
                f"resume: the nodes' data (split {fingerprint[:12]}) is not the data the run "
                f"started on (split {was_fingerprint[:12]})"
            )


def resume_run_config(run_dir: str | Path) -> tuple[dict[str, Any], int | None]:
    """For ``fedrec --resume``: the run configuration of a run folder with ``resume`` set,
    and the number of nodes its checkpoint needs (None without a checkpoint)."""
    run_dir = Path(run_dir).expanduser().resolve()
    stored_file = run_dir / "config.json"
    if not stored_file.exists():
        raise CheckpointError(f"--resume {run_dir}: no run folder with a config.json there")
    stored = json.loads(stored_file.read_text())
    config = {k: stored[k] for k in RunConfig.key_names() if k in stored}
    config["resume"] = str(run_dir)
    latest = run_dir / FOLDER / LATEST
    nodes = json.loads(latest.read_text()).get("num-partitions") if latest.exists() else None
    return config, nodes
