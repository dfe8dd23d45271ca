"""One table from every finished run in ``bench/results/runs/``: preset family x dataset x
protocol, mean ± std over the seeds that exist (the number of seeds is a column), beside the
paper's numbers where there are some. Writes ``bench/results/table-all.md``::

    python bench/collect.py
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

from reproduce import PAPER

from fedrec_lab.experiments.cells import scrub_paths
from fedrec_lab.experiments.tables import REFERENCE_CODE

PROJECT = Path(__file__).resolve().parents[1]
NAME = re.compile(
    r"^(?P<family>.+)-(?P<short>ml100k|lastfm2k)-(?P<protocol>paper|strict)-seed(\d+)$"
)
DATASET = {"ml100k": "ml-100k", "lastfm2k": "lastfm-2k"}
METRICS = ("hr@10", "ndcg@10", "recall@20", "ndcg@20", "mrr")


def cell(values: list[float]) -> str:
    mean = 100 * statistics.mean(values)
    std = 100 * statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.2f} ± {std:.2f}" if len(values) > 1 else f"{mean:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default=str(PROJECT / "bench" / "results" / "runs"))
    parser.add_argument("--out", default=str(PROJECT / "bench" / "results" / "table-all.md"))
    args = parser.parse_args()
    scrub_paths(Path(args.runs))
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for summary_file in sorted(Path(args.runs).glob("*/summary.json")):
        match = NAME.match(summary_file.parent.name)
        # Reference rows (python -m fedrec_lab.experiments: popularity, itemknn, ...) have
        # no rounds.csv: they are tables of their own, not federated runs.
        if match and (summary_file.parent / "rounds.csv").exists():
            key = (match["protocol"], DATASET[match["short"]], match["family"])
            groups[key].append(json.loads(summary_file.read_text()))
    lines = [
        "| protocol | dataset | preset | seeds | test HR@10 | test NDCG@10 | paper (HR / NDCG) "
        "| reference code, our split, round on test (HR / NDCG) | best rounds | s/round |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (protocol, dataset, family), runs in sorted(groups.items()):
        paper = PAPER.get((family, dataset)) if protocol == "paper" else None
        code = REFERENCE_CODE.get((family, dataset)) if protocol == "paper" else None
        lines.append(
            f"| {protocol} | {dataset} | {family} | {len(runs)} "
            f"| {cell([r['test']['hr@10'] for r in runs])} "
            f"| {cell([r['test']['ndcg@10'] for r in runs])} "
            f"| {f'{paper[0]} / {paper[1]}' if paper else '-'} "
            f"| {f'{code[0]} / {code[1]}' if code else '-'} "
            f"| {', '.join(str(r['best_round']) for r in runs)} "
            f"| {statistics.median(r['seconds_per_round'] for r in runs):.2f} |"
        )
    lines += ["", "Strict protocol, all metrics (test, %):", ""]
    lines += ["| dataset | preset | seeds | " + " | ".join(METRICS) + " |"]
    lines += ["|---|---|---|" + "---|" * len(METRICS)]
    for (protocol, dataset, family), runs in sorted(groups.items()):
        if protocol == "strict":
            values = [cell([r["test"][m] for r in runs]) for m in METRICS]
            lines.append(f"| {dataset} | {family} | {len(runs)} | " + " | ".join(values) + " |")
    text = "\n".join(lines) + (
        "\n\nTest metrics (%) at the round with the best validation HR@10; mean ± std over the "
        "seeds listed (a single value: one seed). Paper: the published figure. Reference "
        "code: not a published figure, the authors' code run on our split with its own "
        "configuration, its best round picked on test. s/round: median over the runs, measured "
        "while other jobs shared the 2 cores. Every run's config.json, rounds.csv and "
        "summary.json are in runs/.\n"
    )
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
