"""Fewer free hyperparameters: do settings tuned over fewer keys transfer better?

For each method and each source dataset, two ``fedrec tune`` studies with the same budget
(strict, seed 0, ``--trials`` finished trials of at most ``--study-rounds`` rounds, early
stopping and Optuna's median pruner as the command's defaults): one over the method's whole
search space (*all keys*), one over its two learning rates alone, the method's other tuned
keys held at fixed values by ``key=value`` settings (*fewer keys*, :data:`HELD`). Each study's
best setting then runs as a transfer cell of ``bench/transfer.py`` on every dataset, its own
included: ``--rounds`` rounds, no early stopping, the test HR@10 of the best validation round.

Within an arm, a setting's ratio on a dataset is to the same arm's setting tuned on that
dataset (on the generated data, which no study tunes on, to the arm's best measured there),
and leave-one-dataset-out scores each setting by its worst ratio over the datasets it was not
tuned on (``fedrec_lab.transfer.choice.choose``). Across arms, fewer minus all keys is
paired over the same users (95 % user bootstrap). The committed presets' cells
(``bench/transfer.py``'s, from its cache) stand beside them for reference. The studies resume
from their journals and the cells from the cache, so the same command picks up where a
stopped run ended::

    python bench/transfer_fewer_keys.py --data-dir DIR --write bench/results/transfer-fewer-keys
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from fedrec_lab.project import project_root
from fedrec_lab.transfer.cells import DATASETS, SOURCES, itemknn_cell, run_cell, seed_cache
from fedrec_lab.transfer.fewer_keys import (
    ARMS,
    HELD,
    arm_cell,
    assemble,
    command_line,
    markdown,
    run_study,
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--cache", default="fedrec-out/transfer", help="bench/transfer.py's cache")
    parser.add_argument("--studies", default="fedrec-out/fewer-keys", help="the studies' folder")
    parser.add_argument("--methods", nargs="+", default=list(HELD), choices=list(HELD))
    parser.add_argument("--trials", type=int, default=32, help="finished trials per study")
    parser.add_argument("--study-rounds", type=int, default=60)
    parser.add_argument("--study-patience", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=100, help="rounds of every cell")
    parser.add_argument("--patience", type=int, default=0, help="cells: 0, no early stopping")
    parser.add_argument(
        "--write", default=None, help="write <stem>.md, <stem>.json and <stem>/studies/*/*.json"
    )
    parser.add_argument(
        "--arms", nargs="+", default=list(ARMS), choices=list(ARMS),
        help="run only these arms' studies and cells (two processes at once); the report "
        "needs both",
    )  # fmt: skip
    args = parser.parse_args(argv)
    cache = seed_cache(args.cache, args.seed)
    targets = list(DATASETS)
    knn = {t: itemknn_cell(t, args, cache) for t in targets}
    studies, by_arm, presets = [], {arm: [] for arm in ARMS}, []
    for method in args.methods:
        for arm in args.arms:
            for source in SOURCES:
                study = run_study(method, source, arm, args)
                best = study["record"]["best"]
                studies.append({
                    "method": method, "arm": arm, "source": source,
                    "counts": study["record"]["counts"], "params": best["params"],
                    "val_hr10": best["val_hr@10"], "tuned": study["tuned"],
                })  # fmt: skip
                for target in targets:
                    by_arm[arm].append(
                        arm_cell(method, arm, source, target, study["keys"], args, cache)
                    )
        for source in SOURCES:
            presets += [run_cell(method, source, t, args, cache) for t in targets]
    if set(args.arms) != set(ARMS):
        print(f"done: the {' and '.join(args.arms)} arm's studies and cells; the report needs both")
        return 0
    report = assemble(by_arm, presets, knn, args.methods, args.seed)
    report["studies"] = studies
    text = markdown(report, command_line(argv), args)
    print(text)
    if args.write:
        stem = Path(args.write)
        if not stem.is_absolute():
            stem = project_root() / stem
        stem.parent.mkdir(parents=True, exist_ok=True)
        stem.with_suffix(".md").write_text(text)
        folder = stem.parent / stem.name / "studies"
        for s in studies:
            arm_folder = folder / ARMS[s["arm"]][1]
            arm_folder.mkdir(parents=True, exist_ok=True)
            tuned = Path(s.pop("tuned"))  # the study's record: command, space, every trial
            shutil.copy(tuned.with_name(tuned.name.replace("-tuned.toml", ".json")), arm_folder)
        record = {"command": command_line(argv), "held": HELD, **report}
        stem.with_suffix(".json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
