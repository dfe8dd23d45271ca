"""The defaults on generated data no preset was tuned on: each method's
``conf/<method>-default.toml`` on a generated shape, against the centralized popularity,
ItemKNN and EASE rows of the same split (:mod:`fedrec_lab.transfer.defaults`).

A cell is (method, target): one run, the strict protocol, seed ``--seed``, at most
``--rounds`` rounds (no more than the preset sets), early stopping after ``--patience``
evaluated rounds without a better validation HR@10 (0: none), the test HR@10 of the best
validation round. Each finished cell is cached as ``<cache>/cells/<cell>.json``, so a stopped
run resumes where it stopped (a cell cached under other ``--rounds`` or ``--patience`` is
refused, as under another ``--eval-every``)::

    python bench/defaults.py --data-dir DIR --targets small-dense \
        --write bench/results/defaults-small-dense

``--seeds 0 1 2`` measures each seed (its cells in its own cache, :func:`seed_cache`) and
reports each row's mean over the seeds with intervals over users pooled over them
(:mod:`fedrec_lab.transfer.pooled`); one seed there is ``--seed`` alone. The centralized
rows are measured once, with the first seed: the generated data, its split and their
full-ranking test metrics do not depend on the seed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fedrec_lab.transfer import pooled
from fedrec_lab.transfer.cells import SHAPES, seed_cache
from fedrec_lab.transfer.defaults import CENTRAL, default_methods, markdown, measure, measure_cells
from fedrec_lab.transfer.report import command_line


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument(
        "--cache",
        default="fedrec-out/defaults",
        help="finished cells, runs (a seed k > 0: its seed<k>/ subfolder)",
    )
    parser.add_argument("--methods", nargs="+", default=default_methods())
    parser.add_argument("--targets", nargs="+", default=["small-dense"], choices=list(SHAPES))
    seeds = parser.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=int, default=0)
    seeds.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="several seeds: each row's mean over them, intervals pooled over their users",
    )
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--patience", type=int, default=0, help="0: no early stopping")
    parser.add_argument(
        "--eval-every",
        type=int,
        default=1,
        help="evaluate every N rounds and after the last (the best round is one of those)",
    )
    parser.add_argument(
        "--central",
        nargs="+",
        default=list(CENTRAL),
        choices=list(CENTRAL),
        help="the centralized rows (popularity and itemknn at least: the checks read them)",
    )
    parser.add_argument("--write", default=None, help="write <stem>.md and <stem>.json")
    args = parser.parse_args(argv)
    if args.seeds is not None and len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds {' '.join(map(str, args.seeds))}: give each seed once")
    if args.seeds is not None and len(args.seeds) == 1:
        args.seed, args.seeds = args.seeds[0], None
    command = command_line(argv, script="defaults.py")
    keys = ("rounds", "patience", "eval_every", "targets")
    if args.seeds is None:
        summary = measure(args, seed_cache(args.cache, args.seed))
        settings = {"seed": args.seed, **{k: getattr(args, k) for k in keys}}
        text = markdown(summary, command, settings)
    else:
        # the centralized rows do not depend on the seed: the first seed's stand for all
        per_seed, central = {}, None
        for seed in sorted(args.seeds):
            one = argparse.Namespace(**{**vars(args), "seed": seed})
            per_seed[seed], central = measure_cells(one, seed_cache(args.cache, seed), central)
        summary = pooled.pool(per_seed, central, seed=min(args.seeds))
        settings = {"seeds": sorted(args.seeds), **{k: getattr(args, k) for k in keys}}
        text = pooled.markdown(summary, command, settings)
    print(text)
    if args.write:
        stem = Path(args.write)
        stem.parent.mkdir(parents=True, exist_ok=True)
        stem.with_suffix(".md").write_text(text)
        record = {"command": command, "settings": settings, **summary}
        stem.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
