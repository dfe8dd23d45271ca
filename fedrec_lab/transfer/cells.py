"""The cells of the transfer study: their settings, their runs (or the committed run of the
same setting) and their records, cached per cell; the ItemKNN cell of each target."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fedrec_lab.child_process import child_env
from fedrec_lab.experiments.cells import RUNNER
from fedrec_lab.project import conf_dir, project_root

SOURCES = ("ml100k", "lastfm2k")  # datasets with tuned strict presets

#: The target datasets: the two real ones, and generated data of another shape (a small
#: catalogue, few items per user).
DATASETS: dict[str, dict[str, Any]] = {
    "ml100k": {"label": "ML-100K", "keys": {"dataset": "ml-100k"}},
    "lastfm2k": {"label": "Last.fm-2K", "keys": {"dataset": "lastfm-2k"}},
    "synthetic": {
        "label": "synthetic 1500 x 500, 15 per user",
        "keys": {
            "dataset": "synthetic",
            "synthetic-users": 1500,
            "synthetic-items": 500,
            "synthetic-mean-degree": 15,
        },
    },
}

#: The generated shapes the defaults are checked on (``bench/defaults.py``): small and dense
#: with a strong popularity head (the size of a public 1,336 x 2,071 ratings file, density
#: 1.3 %), sparse with a long tail of items, and large. Generated items have Zipf popularity
#: (exponent 1) and users power-law degrees (:mod:`fedrec_flwr.data.synthetic`).
SHAPES: dict[str, dict[str, Any]] = {
    "small-dense": {
        "label": "generated small-dense 1336 x 2071, 26 per user",
        "keys": {
            "dataset": "synthetic",
            "synthetic-users": 1336,
            "synthetic-items": 2071,
            "synthetic-mean-degree": 26,
        },
    },
    "long-tail": {
        "label": "generated sparse long-tail 4000 x 10000, 8 per user",
        "keys": {
            "dataset": "synthetic",
            "synthetic-users": 4000,
            "synthetic-items": 10000,
            "synthetic-mean-degree": 8,
        },
    },
    "large": {
        "label": "generated large 20000 x 5000, 30 per user",
        "keys": {
            "dataset": "synthetic",
            "synthetic-users": 20000,
            "synthetic-items": 5000,
            "synthetic-mean-degree": 30,
        },
    },
}

#: Every target a cell may run on.
TARGETS: dict[str, dict[str, Any]] = {**DATASETS, **SHAPES}

#: The candidate that stands for each method's ``conf/<method>-default.toml``.
DEFAULT = "default"

#: The per-user lists of a cell's record (users, their test HR@10 and NDCG@10 at the best
#: validation round; ``ndcg`` only in records made since it is kept): never in a report.
PER_USER = ("users", "hits", "ndcg")

#: What a cell's record keeps for the cache only, never for a report's rows: the per-user
#: values and the setting it was run with (:func:`cached_cell`).
CELL_ONLY = (*PER_USER, "setting")

#: Keys that describe the data, not the method: taken from the target, never from a source.
DATA_KEYS = ("dataset", "synthetic-users", "synthetic-items", "synthetic-mean-degree")


def tuned_methods() -> list[str]:
    """The registered methods with a strict preset tuned on every source dataset, in
    registry order: the methods the study scores."""
    from fedrec_flwr.methods import methods

    return [
        name
        for name in methods()
        if all((conf_dir() / f"{name}-{source}-strict.toml").is_file() for source in SOURCES)
    ]


def candidate_keys(method: str, candidate: str, folder: Path | None = None) -> dict[str, Any]:
    """The method keys of a candidate: the source preset's keys (``conf/<method>-default
    .toml`` for :data:`DEFAULT`; ``folder``: another presets folder than ``conf/``) less the
    dataset's."""
    from fedrec_lab.presets import resolve

    name = f"{method}-default" if candidate == DEFAULT else f"{method}-{candidate}-strict"
    keys = resolve((folder or conf_dir()) / f"{name}.toml")
    return {k: v for k, v in keys.items() if k not in DATA_KEYS}


def cell_name(method: str, candidate: str, target: str) -> str:
    return f"{method}--{candidate}--on-{target}"


def seed_cache(folder: str | Path, seed: int) -> Path:
    """The cache of finished cells and runs of one seed: ``folder`` for seed 0, else its
    ``seed<k>/`` subfolder. A cell's name holds no seed, so a cell cached under one seed
    must never stand for another's."""
    return Path(folder) if seed == 0 else Path(folder) / f"seed{seed}"


def cell_config(
    method: str,
    candidate: str,
    target: str,
    args: argparse.Namespace,
    runs: Path,
    keys: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The run config of a cell (its method's reference defaults filled in); ``keys``: the
    candidate's method keys where they come from elsewhere than its strict preset."""
    from fedrec_flwr.config import with_reference_defaults

    config = {
        **(candidate_keys(method, candidate) if keys is None else keys),
        **TARGETS[target]["keys"],
        "protocol": "strict",
        "seed": args.seed,
        "num-server-rounds": args.rounds,
        "early-stopping-patience": args.patience,
        "checkpoint-every": 0,
        "data-dir": str(Path(args.data_dir).resolve()),
        "results-dir": str(runs),
        "run-name": cell_name(method, candidate, target),
    }
    return with_reference_defaults(config)


def hits_of(run_dir: Path) -> tuple[list[int], list[float]]:
    """Users and their test HR@10 at the best validation round (``per-user.csv``)."""
    users, hits, _ = per_user_of(run_dir)
    return users, hits


def per_user_of(run_dir: Path) -> tuple[list[int], list[float], list[float]]:
    """Users, their test HR@10 and their test NDCG@10 at the best validation round
    (``per-user.csv``)."""
    from fedrec_lab.stats import read_per_user

    users, columns = read_per_user(run_dir)
    return users.tolist(), columns["test-hr@10"].tolist(), columns["test-ndcg@10"].tolist()


#: Run-config keys that may differ between a committed run and a cell of the same setting.
#: ``device``: a committed run made on a GPU stands for its cell (its float sums may differ
#: from a CPU run's in the last digits); the cell's ``run`` and the report name the device.
RUN_KEYS = ("data-dir", "results-dir", "run-name", "checkpoint-every", "node_data", "device")


def committed_run(config: dict[str, Any]) -> Path | None:
    """The committed run (``bench/results/runs/<preset>-seed<seed>``) of a cell whose setting is
    the target's own preset, run as the cell would be (same keys, no early stopping); else
    None. The runs are deterministic within one environment (``bench/regression.py``); NeuMF's
    differ in float order elsewhere (``bench/results/regression-100-rounds.md``)."""
    run = project_root() / "bench" / "results" / "runs" / f"{config['run-name']}"
    if not (run / "config.json").is_file() or not (run / "per-user.csv").is_file():
        return None
    from fedrec_flwr.config import RunConfig

    committed = json.loads((run / "config.json").read_text())
    config = RunConfig.from_mapping(config).to_mapping()
    # keys added since the run was recorded are at their defaults there (bench/regression.py)
    keys = {k for k in committed if k in config and k not in RUN_KEYS}
    return run if all(committed.get(k) == config.get(k) for k in keys) else None


def run_cell(method: str, candidate: str, target: str, args, cache: Path) -> dict[str, Any]:
    """One cell: its cached record, the committed run of the same setting, or a run (in a
    fresh process) and its record."""
    name = cell_name(method, candidate, target)
    path = cache / "cells" / f"{name}.json"
    config = cell_config(method, candidate, target, args, cache / "runs")
    cached = cached_cell(path, config)
    if cached is not None:
        return cached
    own = f"{method}-{target}-strict-seed{args.seed}"
    committed = committed_run({**config, "run-name": own}) if candidate == target else None
    if committed is not None:
        device = json.loads((committed / "config.json").read_text()).get("device", "cpu")
        source = committed.name + (f" (device {device})" if device != "cpu" else "")
        print(f"{name}: the committed run {source}", flush=True)
        summary = json.loads((committed / "summary.json").read_text())
        users, hits = hits_of(committed)
        return finish(path, name, method, candidate, target, summary, users, hits, source,
                      setting=setting_of(config))  # fmt: skip
    runs = cache / "runs"
    print(f"{name}: running", flush=True)
    summary = run_config(name, config)
    users, hits = hits_of(runs / name)
    return finish(
        path, name, method, candidate, target, summary, users, hits, "", setting=setting_of(config)
    )


def setting_of(config: dict[str, Any]) -> dict[str, Any]:
    """What a cell measures: its run config resolved (every key, its default filled in), less
    where it runs and writes (:data:`RUN_KEYS`), as JSON reads it back."""
    from fedrec_flwr.config import RunConfig

    resolved = RunConfig.from_mapping(config).to_mapping()
    kept = {k: v for k, v in resolved.items() if k not in RUN_KEYS}
    return json.loads(json.dumps(kept, default=str))


def cached_cell(path: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The record cached at ``path`` (None: none), if it was run with ``config``'s setting. A
    cell's name holds its method, source and target, not the keys behind them: a preset
    changed since the cell ran (a new default, a retuned preset) would otherwise hand back the
    old setting's figures. A key the record lacks (added since) is at its default there."""
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    recorded = record.get("setting")
    if recorded is None:
        print(
            f"{path}: cached without its setting (an older cache), so not checked against "
            "the presets; delete it to run it again",
            file=sys.stderr,
            flush=True,
        )
        return record
    now = setting_of(config)
    changed = [k for k in recorded if k in now and recorded[k] != now[k]]
    if changed:
        shown = ", ".join(f"{k} = {recorded[k]!r} there, {now[k]!r} now" for k in changed[:4])
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        raise SystemExit(
            f"{path} was run with another setting ({shown}{more}): the preset changed since? "
            "Give another --cache, or delete the cell to run it again."
        )
    return record


def run_config(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """One run of a cell's config in a fresh process; its summary."""
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(config), "1"],
        capture_output=True,
        text=True,
        cwd=project_root(),
        env=child_env(),
    )
    summary = next(
        (
            json.loads(line[len("SUMMARY ") :])
            for line in done.stdout.splitlines()
            if line.startswith("SUMMARY ")
        ),
        None,
    )
    if done.returncode or summary is None:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    return summary


def finish(
    path,
    name,
    method,
    candidate,
    target,
    summary,
    users,
    hits,
    source,
    limits=None,
    ndcg=None,
    setting=None,
):
    """The record of a finished cell, checked against its summary and cached; ``limits``:
    the settings that bound its run (kept in the record); ``ndcg``: the users' test
    NDCG@10, kept when given; ``setting``: what it measures (:func:`setting_of`), which
    :func:`cached_cell` checks a later read against."""
    record = {
        "method": method,
        "candidate": candidate,
        "target": target,
        "best_round": summary["best_round"],
        "rounds": summary["rounds"],
        "val_hr10": summary["val"]["hr@10"],
        "test_hr10": summary["test"]["hr@10"],
        "test_ndcg10": summary["test"]["ndcg@10"],
        "seconds": summary.get("seconds"),
        "run": source,
        "users": users,
        "hits": hits,
        **({} if ndcg is None else {"ndcg": ndcg}),
        **(limits or {}),
        **({} if setting is None else {"setting": setting}),
    }
    if not np.isclose(np.mean(hits), record["test_hr10"]) or (
        ndcg is not None and not np.isclose(np.mean(ndcg), record["test_ndcg10"])
    ):
        raise SystemExit(f"{name}: per-user.csv does not match summary.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    print(
        f"{name}: test HR@10 {100 * record['test_hr10']:.2f} (best round "
        f"{record['best_round']} of {record['rounds']}, {record['seconds']} s)",
        flush=True,
    )
    return record


def itemknn_cell(target: str, args, cache: Path) -> dict[str, Any]:
    """ItemKNN (cosine, k tuned on validation HR@10) on the target's split, cached."""
    return central_cell("itemknn", target, args, cache)


def central_cell(name: str, target: str, args, cache: Path) -> dict[str, Any]:
    """A centralized row of :mod:`fedrec_lab.baselines` (``popularity``, ``itemknn``,
    ``ease``: its grid tuned on validation HR@10) on the target's split, cached."""
    path = cache / "cells" / f"{name}--on-{target}.json"
    if path.exists():
        return json.loads(path.read_text())
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.data.prepared import prepare
    from fedrec_lab.baselines.rows import central_row

    config = RunConfig.from_mapping(
        {
            **TARGETS[target]["keys"],
            "protocol": "strict",
            "seed": args.seed,
            "data-dir": str(Path(args.data_dir).resolve()),
        }
    )
    row = central_row(name, config, prepare(config))
    per_user = row.per_user
    if per_user is None:
        raise RuntimeError(f"the {name} row kept no per-user values")
    column = per_user.names.index("test-hr@10")
    ndcg = per_user.names.index("test-ndcg@10")
    record = {
        "method": name,
        "candidate": ", ".join(f"{k}={v}" for k, v in row.chosen.items()),
        "target": target,
        "test_hr10": row.test["hr@10"],
        "test_ndcg10": row.test["ndcg@10"],
        "users": per_user.users.tolist(),
        "hits": per_user.values[:, column].tolist(),
        "ndcg": per_user.values[:, ndcg].tolist(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    print(f"{name} on {target}: test HR@10 {100 * record['test_hr10']:.2f}", flush=True)
    return record
