"""Per-user metrics for finished cells that predate ``per-user.csv``.

A table's user-bootstrap interval needs every seed's ``per-user.csv``; runs made before the
file existed have none. Runs are deterministic (keyed draws, packing-invariant), so such a
cell is run again into ``<out>/.backfill/<name>`` with its own configuration; only if the
rerun reproduces every round of the committed ``rounds.csv`` (each column both files have, the
timings and the bytes left out: the wire form changed since, e.g. packed records) and its
best round does its ``per-user.csv`` join the cell's folder.
Nothing else of the cell changes. A rerun that does not reproduce is kept for inspection.

A reference row (centralized or local-only, :mod:`fedrec_lab.baselines`) is computed again
the same way; its ``per-user.csv`` joins the cell only if the recomputed validation and test
means equal the committed ones exactly.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

from fedrec_flwr.results import PER_USER_FILE, TIMING_COLUMNS, WIRE_COLUMNS
from fedrec_lab.experiments import cells as runner

WORK = ".backfill"


def needs_per_user(cell: runner.Cell, runs: Path) -> bool:
    """A finished cell without ``per-user.csv``."""
    folder = runs / cell.name
    return (folder / "summary.json").exists() and not (folder / PER_USER_FILE).exists()


def rounds_difference(committed: Path, rerun: Path) -> str:
    """'' if ``rerun`` holds the rounds of ``committed`` (the columns both have but the
    timings and the bytes), else the first difference."""
    with open(committed, newline="") as f:
        old = list(csv.DictReader(f))
    with open(rerun, newline="") as f:
        new = list(csv.DictReader(f))
    if len(old) != len(new):
        return f"{len(old)} rounds committed, {len(new)} rerun"
    if not old:
        return "no rounds"
    skipped = (*TIMING_COLUMNS, *WIRE_COLUMNS)
    columns = [c for c in old[0] if c in new[0] and c not in skipped]
    for before, after in zip(old, new, strict=True):
        for column in columns:
            if before[column] != after[column]:
                where = before.get("round", "?")
                return f"round {where}, {column}: {before[column]} vs {after[column]}"
    return ""


def metrics_difference(committed: dict, computed: dict) -> str:
    """'' if every validation and test mean the committed cell holds is equal in the
    computed one (which may hold more: metrics added since), else the first difference."""
    for split in ("val", "test"):
        old, new = committed.get(split, {}), computed.get(split, {})
        if not old:
            return f"no {split} metrics committed"
        for name in sorted(old):
            if old[name] != new.get(name):
                return f"{split} {name}: {old[name]} vs {new.get(name)}"
    return ""


def backfill_reference(cell: runner.Cell, runs: Path, args, extra: dict) -> str:
    """Compute a reference row again; add its ``per-user.csv`` if it reproduced."""
    folder = runs / cell.name
    committed = json.loads((folder / "summary.json").read_text())
    config = runner.reference_config(cell, args.data_dir, extra)
    row = runner.compute_reference(cell, config, args.rounds)
    difference = metrics_difference(committed, {"val": row.val, "test": row.test})
    if difference:
        return f"failed: the recomputed row does not reproduce the cell ({difference})"
    if row.per_user is None:  # a computed row has them
        return "failed: the recomputed row kept no per-user values"
    row.per_user.write(folder)
    return "per-user.csv added (the recomputed row reproduced its means)"


def backfill(cell: runner.Cell, runs: Path, args, extra: dict) -> str:
    """Rerun ``cell`` aside and add its ``per-user.csv`` if it reproduced; a status line."""
    if cell.row.kind == "reference":
        return backfill_reference(cell, runs, args, extra)
    work = runs.parent / WORK
    shutil.rmtree(work / cell.name, ignore_errors=True)
    config = runner.run_config(cell, work, args.data_dir, args.rounds, extra)
    state = runner.run_federated(config, args.nodes, args.flwr)
    rerun, folder = work / cell.name, runs / cell.name
    if state != "finished:completed":
        return f"failed: the rerun did not finish ({state[-300:]})"
    difference = rounds_difference(folder / "rounds.csv", rerun / "rounds.csv")
    best = [json.loads((f / "summary.json").read_text())["best_round"] for f in (folder, rerun)]
    if not difference and best[0] != best[1]:
        difference = f"best round {best[0]} committed, {best[1]} rerun"
    if difference:
        return f"failed: the rerun does not reproduce the cell ({difference}); kept in {rerun}"
    shutil.copy2(rerun / PER_USER_FILE, folder / PER_USER_FILE)
    shutil.rmtree(rerun)
    return "per-user.csv added (the rerun reproduced every round)"
