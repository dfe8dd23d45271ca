"""``fedrec baselines`` (or ``python -m fedrec_lab.baselines``): compute the reference rows.

They are printed and written to ``<out>/baselines-<dataset>-<protocol>.md/json``; without
``--out``, ``./fedrec-out/baselines`` (:mod:`fedrec_lab.scratch`).
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data import user_dataset
from fedrec_flwr.data.prepared import check_prepared, prepare
from fedrec_flwr.data.registry import DATASETS
from fedrec_flwr.schema import Key
from fedrec_lab import progress
from fedrec_lab.baselines.report import markdown, write
from fedrec_lab.baselines.rows import NEEDS_IMPLICIT, ROWS, implicit_available, reference_rows
from fedrec_lab.scratch import HelpFormatter, add_data_dir, add_out, scratch_out, wrote


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Reference rows (centralized models tuned on validation, local-only "
        "training) on the split and evaluation code of the federated methods.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--protocol", default="strict")
    add_data_dir(parser)
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the paper negatives and models"
    )
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=None, help="default: all")
    parser.add_argument(
        "--local-rounds", type=int, default=None, help="rounds of the local-only rows (preset's)"
    )
    add_out(parser, "baselines", "baselines-<dataset>-<protocol>.md/json")
    for key in dataset_keys():  # --dataset file (docs/own-data.md), --dataset synthetic
        parser.add_argument(f"--{key.name}", type=key.type, help=f"(default: {key.default!r})")
    progress.add_switch(parser)
    return parser


def dataset_keys() -> tuple[Key, ...]:
    """The run-config keys of the datasets that have their own (``file``: the file and how
    to read it; ``synthetic``: its shape), in the registry's order."""
    return tuple(
        key for spec in DATASETS.values() if spec.config_keys for key in spec.config_keys.keys
    )


def own_file_keys(args: argparse.Namespace) -> dict[str, object]:
    """The ``--<key>`` options of a dataset's own keys given on the command line."""
    return {
        key.name: getattr(args, key.field)
        for key in dataset_keys()
        if getattr(args, key.field) is not None
    }


def check_arguments(
    argv: list[str] | None, data: bool = True
) -> tuple[argparse.Namespace, RunConfig]:
    """The arguments and the run configuration of ``main``, checked (SystemExit with the
    reason if not); with ``data``, a user's file read and split too."""
    args = parser().parse_args(argv)
    own_file = own_file_keys(args)
    try:
        config = RunConfig.from_mapping(
            {
                "dataset": args.dataset,
                "protocol": args.protocol,
                "data-dir": args.data_dir,
                "seed": args.seed,
                **own_file,
            }
        )
        if data and config.data.dataset == user_dataset.FILE_DATASET:
            check_prepared(config)  # splits it (its card is logged), or says what is wrong
    except ValueError as error:  # a bad key or a bad file: the message says what to do
        sys.exit(f"error: {error}")
    return args, config


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args, config = check_arguments(argv)
    rows = tuple(args.rows or ROWS)
    if not implicit_available():
        missing = [r for r in rows if r in NEEDS_IMPLICIT]
        if args.rows and missing:
            sys.exit(f"rows {missing} need the implicit library: pip install -e '.[baselines]'")
        if missing:
            print(
                f"implicit is not installed: rows {missing} skipped (pip install -e '.[baselines]')"
            )
        rows = tuple(r for r in rows if r not in NEEDS_IMPLICIT)
    prepared = prepare(config)
    results = []
    with progress.bar(len(rows), "baselines", unit="row", enabled=args.progress) as bar:
        for row in rows:  # one at a time, as reference_rows computes them
            bar.set_postfix_str(row)
            results += reference_rows(config, (row,), args.local_rounds)
            bar.update()
    command = " ".join(
        [
            "python -m fedrec_lab.baselines",
            f"--dataset {args.dataset}",
            f"--protocol {args.protocol}",
        ]
        + (["--data-dir DIR"] if args.data_dir else [])
        + [f"--{key} {shlex.quote(str(value))}" for key, value in own_file_keys(args).items()]
        + ([f"--seed {args.seed}"] if args.seed else [])
        + ([f"--rows {' '.join(args.rows)}"] if args.rows else [])
        + ([f"--local-rounds {args.local_rounds}"] if args.local_rounds else [])
        + ([f"--out {args.out}"] if args.out != scratch_out("baselines") else [])
    )
    print(markdown(config, prepared, results, command))
    wrote(Path(f"{write(Path(args.out), config, prepared, results, command)}.md"), "baselines")
