"""Fewer free hyperparameters (``bench/transfer_fewer_keys.py``): the studies of each arm,
their best settings as transfer cells, and the report comparing the arms."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from fedrec_lab.project import project_root
from fedrec_lab.transfer.cells import (
    DATA_KEYS,
    DATASETS,
    SOURCES,
    cached_cell,
    cell_config,
    finish,
    hits_of,
    run_config,
    setting_of,
)
from fedrec_lab.transfer.choice import summarise
from fedrec_lab.transfer.report import command_line as transfer_command_line
from fedrec_lab.transfer.report import signed_interval

#: Per method, the tuned keys the *fewer keys* arm holds, and their values: the method's
#: secondary keys at values that do not depend on the data (the default number of negatives,
#: the initial scale 0.1 of the FedRAP and FedNCF presets, PFedRec's default personal rows).
#: What is left to tune is ``lr`` and ``item-lr``. The slower methods' (FedRAP's loss weights,
#: FedNCF's and FedRecGEL's) are not measured.
HELD: dict[str, dict[str, Any]] = {
    "fedmf": {"init-std": 0.1, "num-negatives": 4},
    "pfedrec": {"num-negatives": 4, "keep-personal-rows": "tuned"},
    "fedrecon": {"init-std": 0.1, "num-negatives": 4},
}

#: The arms: their label, and the folder of their studies under ``--studies``.
ARMS = {"all": ("all keys", "full"), "fewer": ("fewer keys", "held")}

DATASET_NAMES = {"ml100k": "ml-100k", "lastfm2k": "lastfm-2k"}


def held_settings(method: str, arm: str) -> list[str]:
    """The ``key=value`` settings (TOML literals) an arm's studies hold."""
    if arm == "all":
        return []
    return [f"{key}={json.dumps(value)}" for key, value in HELD[method].items()]


def study_argv(method: str, source: str, arm: str, args: argparse.Namespace) -> list[str]:
    """``fedrec tune``'s arguments for one study (its output folder last)."""
    return [
        "--method", method, "--dataset", DATASET_NAMES[source], "--protocol", "strict",
        *held_settings(method, arm),
        "--trials", str(args.trials), "--rounds", str(args.study_rounds),
        "--patience", str(args.study_patience), "--seed", str(args.seed),
        "--out", str(Path(args.studies) / ARMS[arm][1]),
    ]  # fmt: skip


def run_study(method: str, source: str, arm: str, args: argparse.Namespace) -> dict[str, Any]:
    """A study (run, or resumed to ``--trials``), its report's record and its tuned keys."""
    argv = study_argv(method, source, arm, args)
    out = Path(argv[-1])
    name = f"{method}-{DATASET_NAMES[source]}-strict"
    record_path = out / f"{name}.json"
    finished = 0
    if record_path.is_file():
        counts = json.loads(record_path.read_text())["counts"]
        finished = counts["complete"] + counts["pruned"] + counts["stopped_at_budget"]
    if finished < args.trials:
        out.mkdir(parents=True, exist_ok=True)
        print(f"study {ARMS[arm][0]} {name}: running", flush=True)
        fedrec = shutil.which("fedrec") or "fedrec"
        with open(out / f"{name}.log", "a") as log:
            done = subprocess.run(
                [fedrec, "tune", *argv, "--data-dir", str(Path(args.data_dir).resolve())],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=project_root(),
            )
        if done.returncode:
            raise SystemExit(f"study {name} ({arm}) failed: see {out / name}.log")
    from fedrec_lab.presets import resolve

    record = json.loads(record_path.read_text())
    keys = resolve(out / f"{name}-tuned.toml")
    keys = {k: v for k, v in keys.items() if k not in DATA_KEYS}
    return {"record": record, "keys": keys, "tuned": out / f"{name}-tuned.toml"}


def arm_cell(method, arm, source, target, keys, args, cache: Path) -> dict[str, Any]:
    """The cell of an arm's setting tuned on ``source``, run on ``target`` (cached)."""
    name = f"{method}--{arm}-keys-{source}--on-{target}"
    path = cache / "cells" / f"{name}.json"
    runs = cache / "runs"
    config = cell_config(method, source, target, args, runs, keys=keys)
    config["run-name"] = name
    cell = cached_cell(path, config)
    if cell is None:
        print(f"{name}: running", flush=True)
        summary = run_config(name, config)
        users, hits = hits_of(runs / name)
        cell = finish(path, name, method, f"{arm}-{source}", target, summary, users, hits, "",
                      setting=setting_of(config))  # fmt: skip
    return {**cell, "candidate": source}


def arm_rows(cells: list[dict], knn: dict, seed: int) -> tuple[list[dict], list[dict]]:
    """One arm's rows (ratios to the arm's own tuned setting) and its leave-one-out scores."""
    summary = summarise(cells, knn, seed)
    return summary["rows"], summary["choices"]


def assemble(
    by_arm: dict[str, list[dict]], presets: list[dict], knn: dict, methods: list[str], seed: int
) -> dict[str, Any]:
    """Per (method, source, target): each arm's row (its ratio to the same arm's reference)
    and fewer minus all keys, paired over the users; per arm, the leave-one-out scores."""
    rows = {"presets": arm_rows(presets, knn, seed)}
    rows.update({arm: arm_rows(cells, knn, seed) for arm, cells in by_arm.items()})

    def find(arm: str, key: tuple) -> dict | None:
        return next((r for r in rows[arm][0] if (r["method"], r["candidate"], r["target"])
                     == key), None)  # fmt: skip

    def raw(arm: str, key: tuple) -> dict:
        return next(c for c in by_arm[arm] if (c["method"], c["candidate"], c["target"]) == key)

    cells = []
    for method in methods:
        for source in SOURCES:
            for target in DATASETS:
                key = (method, source, target)
                cells.append({
                    "method": method, "source": source, "target": target,
                    **{arm: find(arm, key) for arm in ("presets", *ARMS)},
                    "fewer_minus_all": paired(raw("fewer", key), raw("all", key), seed),
                })  # fmt: skip
    choices = [
        {**choice, "arm": label}
        for arm, label in (("presets", "presets"), *((a, ARMS[a][0]) for a in ARMS))
        for choice in rows[arm][1]
    ]
    return {"methods": methods, "cells": cells, "choices": choices}


def paired(a: dict, b: dict, seed: int) -> dict[str, float]:
    from fedrec_lab.stats import paired_difference

    return paired_difference(np.asarray(a["users"]), np.asarray(a["hits"]),
                             np.asarray(b["users"]), np.asarray(b["hits"]), seed=seed)  # fmt: skip


def shown(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def markdown(report: dict[str, Any], command: str, args: argparse.Namespace) -> str:
    label = {k: v["label"] for k, v in DATASETS.items()}
    study = " ".join(study_argv("METHOD", "ml100k", "all", args)[6:-2])
    lines = [
        "# Fewer free hyperparameters: settings tuned over fewer keys, moved to other data",
        "",
        f"```bash\n{command}\n```",
        "",
        "Two `fedrec tune` studies per method and source dataset, with the same budget "
        f"(`fedrec tune --method METHOD --dataset SOURCE --protocol strict {study}`): "
        "over the method's whole search space (*all keys*), and over `lr` and `item-lr` "
        "alone with the other tuned keys held (*fewer keys*). Each study's best setting then "
        f"runs on every dataset: strict, seed {args.seed}, {args.rounds} rounds, every round "
        "evaluated, no early stopping; test HR@10 (%) at the best validation round. A ratio "
        "is to the same arm's setting tuned on that dataset (generated data: the arm's best "
        "measured there). *Presets*: the committed strict presets' cells of "
        "`bench/transfer.py`. Differences: paired over the same users, 95 % bootstrap.",
        "",
        "Held in the *fewer keys* studies: "
        + "; ".join(
            f"{m}: " + ", ".join(f"`{k} = {json.dumps(v)}`" for k, v in HELD[m].items())
            for m in report["methods"]
        )
        + ".",
        "",
        "**The studies' best settings.**",
        "",
        "| method | arm | tuned on | trials (complete / pruned) | validation HR@10 | setting |",
        "|---|---|---|---|---|---|",
    ]
    for s in report["studies"]:
        c = s["counts"]
        setting = ", ".join(f"`{k}` {shown(v)}" for k, v in s["params"].items())
        lines.append(
            f"| {s['method']} | {ARMS[s['arm']][0]} | {label[s['source']]} "
            f"| {c['complete']} / {c['pruned'] + c['stopped_at_budget']} "
            f"| {100 * s['val_hr10']:.2f} | {setting} |"
        )
    lines += [
        "",
        "**On every dataset.**",
        "",
        "| method | tuned on | run on | presets | all keys | fewer keys "
        "| fewer minus all keys [95 % CI] |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["cells"]:
        own = " (own)" if r["source"] == r["target"] else ""
        lines.append(
            f"| {r['method']} | {label[r['source']]} | {label[r['target']]}{own} "
            f"| {scored(r['presets'])} | {scored(r['all'])} | {scored(r['fewer'])} "
            f"| {signed_interval(r['fewer_minus_all'])} |"
        )
    lines += [
        "",
        "Test HR@10 (ratio to the arm's reference on that dataset).",
        "",
        "**Leave-one-dataset-out.**",
        "",
        "| method | arm | tuned on | worst held-out ratio | mean held-out ratio |",
        "|---|---|---|---|---|",
    ]
    for c in report["choices"]:
        for s in c["candidates"]:
            lines.append(
                f"| {c['method']} | {c['arm']} | {label[s['candidate']]} "
                f"| {s['worst_ratio']:.3f} | {s['mean_ratio']:.3f} |"
            )
    held_out = [r for r in report["cells"] if r["source"] != r["target"]]
    home = [r for r in report["cells"] if r["source"] == r["target"]]
    lines += ["", f"Of {len(held_out)} transfers (a setting on a dataset it was not tuned on), "
              f"{counted(held_out)}. On the {len(home)} datasets the settings were tuned on, "
              f"{counted(home)}.", ""]  # fmt: skip
    return "\n".join(lines)


def scored(row: dict | None) -> str:
    """Test HR@10 and the ratio to the arm's reference; - where the arm has no such cell."""
    return "-" if row is None else f"{100 * row['test_hr10']:.2f} ({row['ratio']:.3f})"


def counted(rows: list[dict]) -> str:
    """How many fewer-minus-all differences lie above, below and around zero."""
    above = sum(r["fewer_minus_all"]["low"] > 0 for r in rows)
    below = sum(r["fewer_minus_all"]["high"] < 0 for r in rows)
    return (
        f"the fewer-keys setting is above the all-keys one with an interval above zero in "
        f"{above}, below it with an interval below zero in {below}, and within the noise in "
        f"{len(rows) - above - below}"
    )


def command_line(argv: list[str]) -> str:
    hidden = ("--data-dir", "--cache", "--studies")
    return transfer_command_line(argv, "transfer_fewer_keys.py", hidden)
