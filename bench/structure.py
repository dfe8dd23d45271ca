"""What the accuracy table does not show, from every finished run in ``bench/results/runs/``:
training stability (best validation round, final minus best validation HR@10), dimensional
collapse (effective rank of the global item table and of a seeded sample of users' personal
rows, at the best validation round and at the last one), the density of the global table and
the traffic per round. Mean over the seeds that exist. Writes
``bench/results/table-structure.md``::

    cd bench && python structure.py

Stability rule: the best validation round is not among the first 10 and the
last validation HR@10 is within 3 points of the best; the ``stable`` column counts the seeds
that meet it.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

from collect import DATASET, NAME

PROJECT = Path(__file__).resolve().parents[1]


def run_figures(run: Path) -> dict[str, float]:
    """Stability, effective ranks, density and traffic of one run."""
    summary = json.loads((run / "summary.json").read_text())
    with (run / "rounds.csv").open() as handle:
        rounds = [row for row in csv.DictReader(handle) if row.get("val-hr@10")]
    best = max(rounds, key=lambda row: float(row["val-hr@10"]))  # first best, as the runner
    last = rounds[-1]
    rounds_run = summary["rounds"]
    figures = {
        "best_round": int(best["round"]),
        "drop": 100 * (float(last["val-hr@10"]) - float(best["val-hr@10"])),
        "stable": float(
            int(best["round"]) > 10 and float(best["val-hr@10"]) - float(last["val-hr@10"]) <= 0.03
        ),
        "mb_down": summary["bytes_down"] / rounds_run / 1e6,
        "mb_up": summary["bytes_up"] / rounds_run / 1e6,
    }
    for column in ("erank-global", "erank-personal", "c-density"):
        if last.get(column):
            figures[f"{column}@best"] = float(best[column])
            figures[f"{column}@last"] = float(last[column])
    return figures


def mean(runs: list[dict[str, float]], key: str, digits: int = 1) -> str:
    values = [run[key] for run in runs if key in run]
    if not values:
        return "-"
    return f"{statistics.mean(values):.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default=str(PROJECT / "bench" / "results" / "runs"))
    parser.add_argument("--out", default=str(PROJECT / "bench" / "results" / "table-structure.md"))
    args = parser.parse_args()
    groups: dict[tuple[str, str, str], list[dict[str, float]]] = defaultdict(list)
    for summary_file in sorted(Path(args.runs).glob("*/summary.json")):
        match = NAME.match(summary_file.parent.name)
        if match and (summary_file.parent / "rounds.csv").exists():  # not reference rows
            key = (match["protocol"], DATASET[match["short"]], match["family"])
            groups[key].append(run_figures(summary_file.parent))
    lines = [
        "| protocol | dataset | preset | seeds | stable | best val rounds | last − best val "
        "HR@10 | erank global (best / last) | erank personal (best / last) | density of C "
        "(last) | MB down / up per round |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (protocol, dataset, family), runs in sorted(groups.items()):
        rounds = ", ".join(str(int(run["best_round"])) for run in runs)
        lines.append(
            f"| {protocol} | {dataset} | {family} | {len(runs)} "
            f"| {int(sum(run['stable'] for run in runs))}/{len(runs)} | {rounds} "
            f"| {mean(runs, 'drop', 2)} "
            f"| {mean(runs, 'erank-global@best')} / {mean(runs, 'erank-global@last')} "
            f"| {mean(runs, 'erank-personal@best')} / {mean(runs, 'erank-personal@last')} "
            f"| {mean(runs, 'c-density@last', 3)} "
            f"| {mean(runs, 'mb_down', 2)} / {mean(runs, 'mb_up', 2)} |"
        )
    text = "\n".join(lines) + (
        "\n\nMeans over the seeds listed. Effective rank: exp of the entropy of the normalised "
        "singular values (at most the embedding dimension, 32); 'personal' is over a seeded "
        "sample of 100 users' personal rows (the rows their scores read). '-': the run's "
        "rounds.csv has no such column (runs made before it existed, or a method without "
        "personal rows). Density of C: share of global item rows that are not exactly zero. "
        "Traffic: all messages of a round, train and evaluation, both directions.\n"
    )
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
