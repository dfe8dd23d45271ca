"""Does the PLGC ablation's round budget decide its comparisons? Each committed cell of a
``plgc-ablation-<protocol>`` table, read again from its ``rounds.csv`` as if it had stopped
after fewer rounds: its best validation round among the first N (the first of ties, as the
runner picks it) and that round's test HR@10, for each N of :data:`HORIZONS`.

The report sets each comparison of the table (the base with PLGC against the base without it,
each part switched off against PLGC whole) at every horizon: the difference of the seed means,
so that a difference still growing or changing sign at the last horizon shows, and how many of
its cells reach their best validation round at the very last round.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from fedrec_lab.analysis.state import rounds
from fedrec_lab.experiments.cells import Cell, RowSpec
from fedrec_lab.experiments.report import NAMES
from fedrec_lab.experiments.tables import (
    ABLATION_ROUNDS,
    plgc_ablation_against,
    plgc_ablation_rows,
)

#: The horizons read (rounds); the last is the table's.
HORIZONS = (10, 20, 25, ABLATION_ROUNDS)
SEEDS = (0, 1, 2)


def best_within(rows: list[dict[str, str]], horizon: int) -> dict[str, str]:
    """The round with the highest validation HR@10 among the first ``horizon`` (the first of
    ties)."""
    first = [r for r in rows if int(r["round"]) <= horizon and r["val-hr@10"] != ""]
    if not first:
        raise ValueError(f"no validated round among the first {horizon}")
    return max(first, key=lambda r: float(r["val-hr@10"]))


def cell_record(folder: Path) -> dict[str, object]:
    """One finished cell: its test HR@10 (%) at each horizon and whether its best round is its
    last. The full horizon must give the run's own best round and test HR@10."""
    summary = json.loads((folder / "summary.json").read_text())
    table = rounds(folder / "rounds.csv")
    best = {h: best_within(table, h) for h in HORIZONS}
    full = best[HORIZONS[-1]]
    if int(full["round"]) != summary["best_round"] or float(full["test-hr@10"]) != float(
        summary["test"]["hr@10"]
    ):
        raise ValueError(f"{folder}: rounds.csv's best round is not summary.json's")
    return {
        "test": {h: 100 * float(best[h]["test-hr@10"]) for h in HORIZONS},
        "last": summary["best_round"] == summary["rounds"],
    }


def finished(runs: Path, row: RowSpec) -> dict[int, dict[str, object]]:
    """The row's finished cells, by seed."""
    out = {}
    for seed in SEEDS:
        folder = runs / Cell(row, seed).name
        if (folder / "summary.json").exists():
            out[seed] = cell_record(folder)
    return out


def comparisons(runs: Path, protocol: str, datasets: tuple[str, ...]) -> list[dict]:
    """Each comparison of the table whose two rows share finished seeds."""
    specs = plgc_ablation_rows(protocol, datasets)
    by_key = {(s.dataset, s.key): s for s in specs}
    cells = {(s.dataset, s.key): finished(runs, s) for s in specs}
    out = []
    for spec in specs:
        against = plgc_ablation_against(spec)
        if against is None:
            continue
        a, b = (
            cells[(spec.dataset, spec.key)],
            cells[(spec.dataset, by_key[(spec.dataset, against)].key)],
        )
        seeds = sorted(set(a) & set(b))
        if not seeds:
            continue
        out.append(
            {
                "dataset": spec.dataset,
                "method": spec.key,
                "against": against,
                "seeds": len(seeds),
                "last": sum(bool(c[s]["last"]) for c in (a, b) for s in seeds),
                "cells": 2 * len(seeds),
                "difference": {
                    h: statistics.mean(a[s]["test"][h] for s in seeds)  # type: ignore[index]
                    - statistics.mean(b[s]["test"][h] for s in seeds)  # type: ignore[index]
                    for h in HORIZONS
                },
            }
        )
    return out


def flips(record: dict) -> bool:
    """The sign of the difference at the table's horizon is not the one at the horizon
    before it."""
    d = record["difference"]
    return (d[HORIZONS[-2]] > 0) != (d[HORIZONS[-1]] > 0)


def moved_by(record: dict) -> float:
    """How far the difference moves between the last two horizons (points)."""
    d = record["difference"]
    return abs(d[HORIZONS[-1]] - d[HORIZONS[-2]])


def markdown(records: list[dict], protocol: str, command: str) -> str:
    heads = " | ".join(f"{h} rounds" for h in HORIZONS)
    lines = [
        f"# PLGC's ablation ({protocol}) at fewer rounds: the same cells, stopped earlier",
        "",
        "```bash",
        command,
        "```",
        "",
        f"| dataset | method | against | seeds | cells best at round {ABLATION_ROUNDS} | {heads} |",
        "|---|---|---|---|---|" + "---|" * len(HORIZONS),
    ]
    for r in records:
        diffs = " | ".join(f"{r['difference'][h]:+.2f}" for h in HORIZONS)
        lines.append(
            f"| {NAMES[r['dataset']]} | {r['method']} | {r['against']} | {r['seeds']} | "
            f"{r['last']} of {r['cells']} | {diffs} |"
        )
    changed = [r for r in records if flips(r)]
    moved = max(records, key=moved_by)
    last = sum(r["last"] for r in records)
    total = sum(r["cells"] for r in records)
    named = ", ".join(f"{NAMES[r['dataset']]} {r['method']}" for r in changed)
    lines += [
        "",
        "Each column: test HR@10 (points) of the row minus the row it is compared with, seed "
        "means, each cell read at its best validation round among the first N rounds of its "
        f"`rounds.csv` (N = {ABLATION_ROUNDS}: the table's figures). `cells best at round "
        f"{ABLATION_ROUNDS}`: of the two rows' cells, those whose best validation round is "
        "their last (a cell counted once per comparison it is in).",
        "",
        f"{last} of {total} cells counted here peak at the last round. Between "
        f"{HORIZONS[-2]} and {HORIZONS[-1]} rounds {len(changed)} of {len(records)} "
        "differences change sign" + (f" ({named})" if named else "") + "; the largest move is "
        f"{moved_by(moved):.2f} points ({NAMES[moved['dataset']]} {moved['method']}).",
        "",
    ]
    return "\n".join(lines)


def write(runs: Path, out: Path, protocol: str, datasets: tuple[str, ...], command: str) -> Path:
    records = comparisons(runs, protocol, datasets)
    if not records:
        raise SystemExit(f"no finished comparison of plgc-ablation-{protocol} under {runs}")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"plgc-ablation-{protocol}-horizons.md"
    path.write_text(markdown(records, protocol, command))
    return path
