"""Does scaling the local learning rate by the data's statistics make a preset transfer better?

A strict preset tuned on a source dataset, run on a target dataset (a transfer cell of
``bench/transfer.py``), against the same preset with its local learning rate ``lr`` scaled by
the ratio of mean train rows per user, source over target. The idea: a user's local epoch
takes about ``rows / batch-size`` steps of the mean loss, so this ratio keeps the movement of a
user's parameters in a round about the same on data with more or fewer rows per user. (The
server's ``item-lr`` is already scaled by the number of items, ``item-lr-scaling =
"num-items"``, in every preset.)

The unscaled cells are ``bench/transfer.py``'s (read from its cache, or run); the scaled ones
are cached beside them as ``<cache>/cells/<method>--<source>-lr-scaled--on-<target>.json``,
so a stopped run resumes. Intervals: paired 95 % user bootstrap of scaled minus unscaled
(:func:`fedrec_lab.stats.paired_difference`)::

    python bench/transfer_scaling.py --data-dir DIR --write bench/results/transfer-lr-scaling
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np

from fedrec_lab.project import project_root
from fedrec_lab.transfer import cells
from fedrec_lab.transfer.report import signed_interval


def mean_train_rows(target: str, args: argparse.Namespace) -> float:
    """Mean train rows per user of a target's strict split (seed ``args.seed``)."""
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.data.prepared import prepare

    config = RunConfig.from_mapping(
        {
            **cells.DATASETS[target]["keys"],
            "protocol": "strict",
            "seed": args.seed,
            "data-dir": str(Path(args.data_dir).resolve()),
        }
    )
    data = prepare(config)
    return data.num_train_rows / data.num_users


def scaled_cell(
    method: str, source: str, target: str, factor: float, args: argparse.Namespace, cache: Path
) -> dict[str, Any]:
    """The transfer cell (method, source preset, target) with ``lr`` times ``factor``."""
    name = f"{method}--{source}-lr-scaled--on-{target}"
    path = cache / "cells" / f"{name}.json"
    runs = cache / "runs"
    config = cells.cell_config(method, source, target, args, runs)
    config["lr"] = float(config["lr"]) * factor
    config["run-name"] = name
    cached = cells.cached_cell(path, config)
    if cached is not None:
        return cached
    print(f"{name}: running (lr {config['lr']:.4g})", flush=True)
    summary = cells.run_config(name, config)
    users, hits = cells.hits_of(runs / name)
    return cells.finish(
        path,
        name,
        method,
        f"{source}-lr-scaled",
        target,
        summary,
        users,
        hits,
        "",
        setting=cells.setting_of(config),
    )


def table(rows: list[dict], args: argparse.Namespace) -> str:
    label = {k: v["label"] for k, v in cells.DATASETS.items()}
    command = "python bench/transfer_scaling.py --data-dir DIR" + (
        f" --write {shlex.quote(args.write)}" if args.write else ""
    )
    lines = [
        "# Transferred presets with the local learning rate scaled by rows per user",
        "",
        f"```bash\n{command}\n```",
        "",
        f"Strict protocol, seed {args.seed}, {args.rounds} rounds, every round evaluated, "
        + ("no early stopping" if not args.patience else f"early stopping after {args.patience}")
        + "; test HR@10 (%) at the best validation round. A source's strict preset runs on a "
        "target it was not tuned on, as it is (the cell of `bench/transfer.py`) and with `lr` "
        "times (mean train rows per user on the source) / (on the target). Difference: scaled "
        "minus as-is, paired over the same users, 95 % bootstrap interval.",
        "",
        "| method | tuned on | run on | rows per user (source / target) | lr as is | lr scaled "
        "| test HR@10 as is | test HR@10 scaled | scaled minus as is [95 % CI] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d = r["difference"]
        lines.append(
            f"| {r['method']} | {label[r['source']]} | {label[r['target']]} "
            f"| {r['rows_source']:.1f} / {r['rows_target']:.1f} | {r['lr']:.4g} "
            f"| {r['lr_scaled']:.4g} | {100 * r['as_is']:.2f} | {100 * r['scaled']:.2f} "
            f"| {signed_interval(d)} |"
        )
    better = sum(r["difference"]["low"] > 0 for r in rows)
    worse = sum(r["difference"]["high"] < 0 for r in rows)
    lines += [
        "",
        f"Of {len(rows)} transfers, scaling is better with an interval above zero in {better}, "
        f"worse with an interval below zero in {worse}, and within the noise in "
        f"{len(rows) - better - worse}.",
        "",
    ]
    return "\n".join(lines)


#: The methods the committed report measured (bench/results/transfer-lr-scaling.md).
SCALED_METHODS = ("pfedrec", "fedmf", "fedrap")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--cache", default="fedrec-out/transfer", help="bench/transfer.py's cache")
    parser.add_argument("--methods", nargs="+", default=list(SCALED_METHODS))
    parser.add_argument("--targets", nargs="+", default=list(cells.DATASETS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--patience", type=int, default=0, help="0: no early stopping")
    parser.add_argument("--write", default=None, help="write <stem>.md and <stem>.json")
    args = parser.parse_args(argv)
    cache = cells.seed_cache(args.cache, args.seed)
    rows_per_user = {t: mean_train_rows(t, args) for t in cells.DATASETS}
    rows = []
    for method in args.methods:
        for source in cells.SOURCES:
            for target in args.targets:
                if target == source:
                    continue
                factor = rows_per_user[source] / rows_per_user[target]
                as_is = cells.run_cell(method, source, target, args, cache)
                scaled = scaled_cell(method, source, target, factor, args, cache)
                lr = float(cells.candidate_keys(method, source)["lr"])
                rows.append(
                    {
                        "method": method,
                        "source": source,
                        "target": target,
                        "rows_source": rows_per_user[source],
                        "rows_target": rows_per_user[target],
                        "lr": lr,
                        "lr_scaled": lr * factor,
                        "as_is": as_is["test_hr10"],
                        "scaled": scaled["test_hr10"],
                        "best_rounds": [as_is["best_round"], scaled["best_round"]],
                        "difference": paired(scaled, as_is, args.seed),
                    }
                )
    text = table(rows, args)
    print(text)
    if args.write:
        stem = (
            project_root() / args.write if not Path(args.write).is_absolute() else Path(args.write)
        )
        stem.with_suffix(".md").write_text(text)
        stem.with_suffix(".json").write_text(json.dumps({"rows": rows}, indent=1) + "\n")


def paired(a: dict, b: dict, seed: int) -> dict[str, float]:
    from fedrec_lab.stats import paired_difference

    return paired_difference(
        np.asarray(a["users"]),
        np.asarray(a["hits"]),
        np.asarray(b["users"]),
        np.asarray(b["hits"]),
        seed=seed,
    )


if __name__ == "__main__":
    main()
