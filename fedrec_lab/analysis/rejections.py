"""The SAM table's runs in which a node's reply was left out, from each run's rounds.

A reply holding NaN or inf (a node whose users' training diverged) or otherwise malformed is
rejected, and a node may fail or time out; the round goes on with the other nodes' replies
(``rejected-replies``, ``train-failures`` and ``eval-failures`` in ``rounds.csv``: the columns
of :data:`fedrec_flwr.results.LEFT_OUT_COLUMNS`, those of a run's ``partial_rounds``). From
then on such a run may train and evaluate only some of its users, and its best round is
chosen over validation figures of different user sets: it measures neither the method nor
the users its twin measures. The table leaves such a seed out of its row (both sides),
names it under the table, and takes the next seed after the row's seeds in its place where
that seed's records exist (``sam-table --seeds 3`` makes them).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from fedrec_flwr.results import LEFT_OUT_COLUMNS


def first_partial_round(run_dir: Path) -> int | None:
    """The first round of a run with a node's reply left out, or None (also for a run
    whose ``rounds.csv`` predates the columns, or that has no ``rounds.csv``)."""
    rounds_file = Path(run_dir) / "rounds.csv"
    if not rounds_file.exists():
        return None
    with rounds_file.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if any(float(row.get(column) or 0) > 0 for column in LEFT_OUT_COLUMNS):
                return int(row["round"])
    return None


def seeds(left_out: list[dict[str, Any]]) -> set[int]:
    """The seeds of a row's left-out runs (its ``left_out``)."""
    return {e["seed"] for e in left_out}


def text(left_out: list[dict[str, Any]]) -> str:
    """A row's left-out runs: ``seed 2 with SAM (from round 19)``, joined by ``, ``."""
    return ", ".join(
        f"seed {e['seed']} {e['side']} SAM (from round {e['round']})" for e in left_out
    )


def lines(rows: list[dict[str, Any]], names: dict[str, str]) -> list[str]:
    """The note on the rows with a seed left out for a node's reply left out (empty when
    none)."""
    flagged = [r for r in rows if r.get("left_out")]
    if not flagged:
        return []
    which = "; ".join(
        f"{r['method']} {names[r['dataset']]} {r['protocol']} ({text(r['left_out'])})"
        for r in flagged
    )
    return [
        "",
        f"Seeds left out, a node's reply left out: {which}. The server rejects a reply that "
        "holds NaN or inf (that node's users' training diverged), and a node may fail or time "
        "out; the round goes on with the other nodes', so from that round such a run trains "
        "and evaluates part of its users only (`rejected-replies`, `train-failures` and "
        "`eval-failures` in the run's `rounds.csv`). The row pairs its other seeds, and the "
        "next seed after them takes a left-out seed's place where its records exist.",
    ]
