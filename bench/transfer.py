"""Settings that transfer: each method's presets scored on datasets they were not tuned on.

A *cell* is (method, candidate, target dataset). A candidate is a setting of a method's keys:
``<source>`` is the strict preset tuned on the source dataset (``conf/<method>-<source>-
strict.toml``) with its dataset keys replaced by the target's. Each cell is one run: the
strict protocol, seed ``--seed``, at most ``--rounds`` rounds, early stopping after
``--patience`` evaluated rounds without a better validation HR@10, the test HR@10 of the best
validation round. On each target the reference is the preset tuned on it (the candidate named
after the target); a target without a tuned preset (the generated dataset) takes the best
candidate measured on it, so its ratios are to the best measured, not to a tuned score.

``default``, per method, is chosen by leave-one-dataset-out: a candidate is scored by its
worst ratio (test HR@10 / reference) over the datasets it was not tuned on; the best worst
case wins. Intervals: 95 % user bootstrap (:mod:`fedrec_lab.stats`); the transferred-minus-
tuned differences are paired over the same users. ItemKNN (cosine, tuned on validation as
``python -m fedrec_lab.baselines`` does) is computed on the same split.

Each finished cell is cached as ``<cache>/cells/<cell>.json`` (its per-user test hits
included), so a stopped run resumes where it stopped::

    python bench/transfer.py --data-dir DIR --write bench/results/transfer
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fedrec_lab.transfer.cells import (
    DATASETS,
    SOURCES,
    itemknn_cell,
    run_cell,
    seed_cache,
    tuned_methods,
)
from fedrec_lab.transfer.choice import early_stopping, summarise
from fedrec_lab.transfer.report import command_line, markdown, settings, write_default_presets


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument(
        "--cache",
        default="fedrec-out/transfer",
        help="finished cells, runs (a seed k > 0: its seed<k>/ subfolder)",
    )
    parser.add_argument("--methods", nargs="+", default=tuned_methods())
    parser.add_argument("--targets", nargs="+", default=list(DATASETS))
    parser.add_argument("--candidates", nargs="+", default=list(SOURCES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--patience", type=int, default=0, help="0: no early stopping")
    parser.add_argument("--write", default=None, help="write <stem>.md and <stem>.json")
    parser.add_argument(
        "--presets",
        action="store_true",
        help="write conf/<method>-default.toml from the choice (a default that is a setting of "
        "its own is kept unless `default` is among --candidates)",
    )
    args = parser.parse_args(argv)
    unknown = [t for t in args.targets if t not in DATASETS]
    if unknown:
        parser.error(f"unknown target {unknown}; choose from {', '.join(DATASETS)}")
    cache = seed_cache(args.cache, args.seed)
    knn = {t: itemknn_cell(t, args, cache) for t in args.targets}
    cells = []
    for target in args.targets:
        for method in args.methods:
            for candidate in args.candidates:
                cells.append(run_cell(method, candidate, target, args, cache))
    summary = summarise(cells, knn, args.seed)
    summary["early_stopping"] = early_stopping(args.methods, args.seed)
    text = markdown(summary, command_line(argv), vars(args))
    print(text)
    if args.write:
        stem = Path(args.write)
        stem.parent.mkdir(parents=True, exist_ok=True)
        stem.with_suffix(".md").write_text(text)
        record = {"command": command_line(argv), "settings": settings(args), **summary}
        stem.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    if args.presets:
        for path in write_default_presets(summary, command_line(argv), args.patience):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
