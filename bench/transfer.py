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
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fedrec_lab.experiments.cells import RUNNER
from fedrec_lab.project import conf_dir, project_root

METHODS = ("pfedrec", "fedmf", "fedrap", "fedncf", "fedrecon", "fedrecgel")
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
#: Keys that describe the data, not the method: taken from the target, never from a source.
DATA_KEYS = ("dataset", "synthetic-users", "synthetic-items", "synthetic-mean-degree")


def candidate_keys(method: str, candidate: str) -> dict[str, Any]:
    """The method keys of a candidate: the source preset's keys less the dataset's."""
    from fedrec_lab.presets import resolve

    keys = resolve(conf_dir() / f"{method}-{candidate}-strict.toml")
    return {k: v for k, v in keys.items() if k not in DATA_KEYS}


def cell_name(method: str, candidate: str, target: str) -> str:
    return f"{method}--{candidate}--on-{target}"


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
        **DATASETS[target]["keys"],
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
    from fedrec_lab.stats import read_per_user

    users, columns = read_per_user(run_dir)
    return users.tolist(), columns["test-hr@10"].tolist()


#: Run-config keys that may differ between a committed run and a cell of the same setting.
#: ``device``: a committed run made on a GPU stands for its cell (its float sums may differ
#: from a CPU run's in the last digits); the cell's ``run`` and the report name the device.
RUN_KEYS = ("data-dir", "results-dir", "run-name", "checkpoint-every", "node_data", "device")


def committed_run(config: dict[str, Any]) -> Path | None:
    """The committed run (``bench/results/runs/<preset>-seed<seed>``) of a cell whose setting is
    the target's own preset, run as the cell would be (same keys, no early stopping); else
    None. The runs are deterministic (``bench/regression.py`` checks them bit for bit)."""
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
    if path.exists():
        return json.loads(path.read_text())
    config = cell_config(method, candidate, target, args, cache / "runs")
    own = f"{method}-{target}-strict-seed{args.seed}"
    committed = committed_run({**config, "run-name": own}) if candidate == target else None
    if committed is not None:
        device = json.loads((committed / "config.json").read_text()).get("device", "cpu")
        source = committed.name + (f" (device {device})" if device != "cpu" else "")
        print(f"{name}: the committed run {source}", flush=True)
        summary = json.loads((committed / "summary.json").read_text())
        users, hits = hits_of(committed)
        return finish(path, name, method, candidate, target, summary, users, hits, source)
    runs = cache / "runs"
    print(f"{name}: running", flush=True)
    summary = run_config(name, config)
    users, hits = hits_of(runs / name)
    return finish(path, name, method, candidate, target, summary, users, hits, "")


def run_config(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """One run of a cell's config in a fresh process; its summary."""
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(config), "1"],
        capture_output=True,
        text=True,
        cwd=project_root(),
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


def finish(path, name, method, candidate, target, summary, users, hits, source) -> dict:
    """The record of a finished cell, checked against its summary and cached."""
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
    }
    if not np.isclose(np.mean(hits), record["test_hr10"]):
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
    path = cache / "cells" / f"itemknn--on-{target}.json"
    if path.exists():
        return json.loads(path.read_text())
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.data.prepared import prepare
    from fedrec_lab.baselines.rows import central_row

    config = RunConfig.from_mapping(
        {
            **DATASETS[target]["keys"],
            "protocol": "strict",
            "seed": args.seed,
            "data-dir": str(Path(args.data_dir).resolve()),
        }
    )
    row = central_row("itemknn", config, prepare(config))
    column = row.per_user.names.index("test-hr@10")
    record = {
        "method": "itemknn",
        "candidate": f"k={row.chosen.get('k')}",
        "target": target,
        "test_hr10": row.test["hr@10"],
        "test_ndcg10": row.test["ndcg@10"],
        "users": row.per_user.users.tolist(),
        "hits": row.per_user.values[:, column].tolist(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    print(f"itemknn on {target}: test HR@10 {100 * record['test_hr10']:.2f}", flush=True)
    return record


# --- the table and the choice (plain functions of the cells: tests/lab/test_transfer.py) ---


def pct(value: float) -> str:
    return f"{100 * value:.2f}"


def interval(low: float, high: float) -> str:
    return f"[{100 * low:.2f}, {100 * high:.2f}]"


def signed_interval(d: dict[str, float]) -> str:
    return f"{100 * d['mean']:+.2f} [{100 * d['low']:+.2f}, {100 * d['high']:+.2f}]"


def reference_cell(cells: list[dict], method: str, target: str) -> tuple[dict, bool]:
    """The reference of a method on a target: the preset tuned on it (True), else the best
    candidate measured there (False)."""
    mine = [c for c in cells if c["method"] == method and c["target"] == target]
    own = [c for c in mine if c["candidate"] == target]
    if own:
        return own[0], True
    return max(mine, key=lambda c: c["test_hr10"]), False


def choose(rows: list[dict], method: str) -> dict[str, Any]:
    """Leave-one-dataset-out: each candidate's worst ratio to the reference over the targets
    it was not tuned on; the best worst case (ties: the higher mean ratio) is the default."""
    scores = []
    for candidate in sorted({r["candidate"] for r in rows if r["method"] == method}):
        held = [
            r
            for r in rows
            if r["method"] == method and r["candidate"] == candidate and r["target"] != candidate
        ]
        if not held:
            continue
        ratios = [r["ratio"] for r in held]
        scores.append(
            {
                "candidate": candidate,
                "worst_ratio": min(ratios),
                "mean_ratio": float(np.mean(ratios)),
                "held_out": [r["target"] for r in held],
            }
        )
    if not scores:
        raise ValueError(f"{method}: no candidate was scored on a dataset it was not tuned on")
    best = max(scores, key=lambda s: (s["worst_ratio"], s["mean_ratio"]))
    return {"method": method, "default": best["candidate"], "candidates": scores}


def summarise(cells: list[dict], knn: dict[str, dict], seed: int = 0) -> dict[str, Any]:
    """Every cell with its interval, its ratio and paired difference to the reference; the
    ItemKNN rows; the default chosen per method and how it compares with ItemKNN."""
    from fedrec_lab.stats import bootstrap_ci, paired_difference

    def arrays(cell):
        return np.asarray(cell["users"]), np.asarray(cell["hits"], dtype=np.float64)

    rows = []
    for cell in cells:
        ref, tuned = reference_cell(cells, cell["method"], cell["target"])
        low, high = bootstrap_ci(arrays(cell)[1], seed=seed)
        row = {k: v for k, v in cell.items() if k not in ("users", "hits")}
        row.update(
            ci=[low, high],
            reference=ref["candidate"],
            reference_tuned=tuned,
            ratio=cell["test_hr10"] / ref["test_hr10"] if ref["test_hr10"] else float("nan"),
            vs_reference=paired_difference(*arrays(cell), *arrays(ref), seed=seed),
            vs_itemknn=paired_difference(*arrays(cell), *arrays(knn[cell["target"]]), seed=seed),
        )
        rows.append(row)
    baselines = {}
    for target, cell in knn.items():
        low, high = bootstrap_ci(arrays(cell)[1], seed=seed)
        baselines[target] = {
            **{k: v for k, v in cell.items() if k not in ("users", "hits")},
            "ci": [low, high],
        }
    methods = list(dict.fromkeys(r["method"] for r in rows))
    return {"rows": rows, "itemknn": baselines, "choices": [choose(rows, m) for m in methods]}


def markdown(summary: dict[str, Any], command: str, settings: dict[str, Any]) -> str:
    """The report: the transfer table, the leave-one-dataset-out choice, defaults vs ItemKNN."""
    label = {k: v["label"] for k, v in DATASETS.items()}
    rows, knn = summary["rows"], summary["itemknn"]
    out = [
        "# Settings that transfer: presets scored on datasets they were not tuned on",
        "",
        "```bash",
        command,
        "```",
        "",
        f"Strict protocol, seed {settings['seed']}, {settings['rounds']} rounds, "
        + (
            f"early stopping after {settings['patience']} evaluated rounds without a better "
            "validation HR@10"
            if settings["patience"]
            else "every round evaluated, no early stopping"
        )
        + "; test HR@10 (%) at the best validation round. A setting is a strict preset's "
        "method keys with the target's dataset keys. Intervals: 95 % bootstrap over users; "
        "differences paired over the same users. The reference on a dataset is the preset tuned "
        "on it; on the generated data, which has no tuned preset, the best setting measured "
        'there (marked *best measured*). Generated data: `dataset = "synthetic"`, '
        + ", ".join(
            f"`{k} = {v}`" for k, v in DATASETS["synthetic"]["keys"].items() if k != "dataset"
        )
        + "."
        + "".join(
            f" The cell {row['method']} on {label[row['target']]} is the committed run "
            f"`{row['run']}`."
            for row in rows
            if "(device " in (row.get("run") or "")
        ),
        "",
        "| method | dataset | setting | test HR@10 | 95 % CI (users) | minus reference, points "
        "[95 % CI] | ratio to reference | best round / rounds run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    order = list(label)
    for row in sorted(
        rows,
        key=lambda r: (r["method"], order.index(r["target"]), r["candidate"] != r["target"]),
    ):
        own = row["candidate"] == row["target"]
        setting = f"tuned on {label[row['candidate']]}" + (" (own)" if own else "")
        if row["candidate"] == row["reference"] and not row["reference_tuned"]:
            setting += " (best measured)"
        diff = "-" if row["candidate"] == row["reference"] else signed_interval(row["vs_reference"])
        out.append(
            f"| {row['method']} | {label[row['target']]} | {setting} | {pct(row['test_hr10'])} "
            f"| {interval(*row['ci'])} | {diff} | {row['ratio']:.3f} "
            f"| {row['best_round']} / {row['rounds']} |"
        )
    for target, cell in knn.items():
        out.append(
            f"| ItemKNN, cosine (centralized, {cell['candidate']}) | {label[target]} | tuned on "
            f"its validation | {pct(cell['test_hr10'])} | {interval(*cell['ci'])} | - | - | - |"
        )
    out += [
        "",
        "Leave-one-dataset-out: a setting tuned on one dataset is scored on the others "
        "(held out); its worst ratio to the reference there decides. The chosen one is "
        "`conf/<method>-default.toml`.",
        "",
        "| method | setting | held-out datasets | worst ratio | mean ratio | default |",
        "|---|---|---|---|---|---|",
    ]
    for choice in summary["choices"]:
        for cand in choice["candidates"]:
            out.append(
                f"| {choice['method']} | tuned on {label[cand['candidate']]} "
                f"| {', '.join(label[t] for t in cand['held_out'])} | {cand['worst_ratio']:.3f} "
                f"| {cand['mean_ratio']:.3f} "
                f"| {'yes' if cand['candidate'] == choice['default'] else ''} |"
            )
    out += [
        "",
        "Each method's default against ItemKNN on the same users (test HR@10 points, the "
        "default minus ItemKNN; *own* where the default was tuned on that dataset):",
        "",
        "| dataset | method | default | test HR@10 | ItemKNN | minus ItemKNN [95 % CI] |",
        "|---|---|---|---|---|---|",
    ]
    for target in knn:
        for choice in summary["choices"]:
            match = [
                r
                for r in rows
                if r["method"] == choice["method"]
                and r["target"] == target
                and r["candidate"] == choice["default"]
            ]
            for row in match:
                own = " (own)" if row["candidate"] == target else ""
                out.append(
                    f"| {label[target]} | {row['method']} | tuned on "
                    f"{label[row['candidate']]}{own} | {pct(row['test_hr10'])} "
                    f"| {pct(knn[target]['test_hr10'])} | {signed_interval(row['vs_itemknn'])} |"
                )
    out += [
        "",
        "The best default on each dataset, and the best default tuned on another dataset "
        "(transferred), against ItemKNN:",
        "",
        "| dataset | best default | test HR@10 | minus ItemKNN [95 % CI] "
        "| best transferred default "
        "| test HR@10 | minus ItemKNN [95 % CI] |",
        "|---|---|---|---|---|---|---|",
    ]
    chosen = {(c["method"], c["default"]) for c in summary["choices"]}
    for target in knn:
        defaults = [
            r for r in rows if (r["method"], r["candidate"]) in chosen and r["target"] == target
        ]
        moved = [r for r in defaults if r["candidate"] != target]
        line = [label[target]]
        for group in (defaults, moved):
            if group:
                best = max(group, key=lambda r: r["test_hr10"])
                line += [
                    f"{best['method']} (tuned on {label[best['candidate']]})",
                    pct(best["test_hr10"]),
                    signed_interval(best["vs_itemknn"]),
                ]
            else:
                line += ["-", "-", "-"]
        out.append("| " + " | ".join(line) + " |")
    if summary.get("early_stopping"):
        out += early_stopping_markdown(summary["early_stopping"])
    return "\n".join(out) + "\n"


#: Patiences whose effect on the tuned presets the report shows.
PATIENCES = (10, 20, 30)


def early_stopped(val: list[float], patience: int) -> tuple[int, int]:
    """(rounds run, best round) of a run whose validation HR@10 per round is ``val`` under
    ``early-stopping-patience`` (fedrec_flwr/server/stopping.py: strictly better resets)."""
    best, best_round, since = -1.0, 0, 0
    for index, value in enumerate(val, start=1):
        if value > best:
            best, best_round, since = value, index, 0
        else:
            since += 1
            if patience and since >= patience:
                return index, best_round
    return len(val), best_round


def early_stopping(methods: list[str], seed: int) -> list[dict[str, Any]]:
    """Each tuned strict preset's committed run (every round evaluated, no early stopping) and
    where early stopping would have ended it: a stopped run is the same run cut short."""
    import csv

    out = []
    for method in methods:
        for source in SOURCES:
            run = project_root() / "bench/results/runs" / f"{method}-{source}-strict-seed{seed}"
            if not (run / "rounds.csv").is_file():
                continue
            with open(run / "rounds.csv") as f:
                rows = list(csv.DictReader(f))
            val = [float(r["val-hr@10"]) for r in rows]
            test = [float(r["test-hr@10"]) for r in rows]
            row = {"method": method, "dataset": source, "run": run.name, "patience": {}}
            for patience in (0, *PATIENCES):
                stop, best = early_stopped(val, patience)
                row["patience"][str(patience)] = {
                    "rounds": stop,
                    "best_round": best,
                    "test_hr10": test[best - 1],
                }
            out.append(row)
    return out


def early_stopping_markdown(rows: list[dict[str, Any]]) -> list[str]:
    label = {k: v["label"] for k, v in DATASETS.items()}
    head = " | ".join(f"patience {p}" for p in PATIENCES)
    out = [
        "",
        "Early stopping as a default: each tuned preset's committed run (`bench/results/runs/`, "
        "100 rounds, every round evaluated), and where `early-stopping-patience` would have "
        "ended it (a stopped run is that run cut short). Test HR@10 (best round / rounds run):",
        "",
        f"| method | dataset | no early stopping | {head} |",
        "|---|---|---|" + "---|" * len(PATIENCES),
    ]
    for row in rows:
        cells = [
            f"{pct(c['test_hr10'])} ({c['best_round']} / {c['rounds']})"
            for c in row["patience"].values()
        ]
        out.append(f"| {row['method']} | {label[row['dataset']]} | {' | '.join(cells)} |")
    return out


def write_default_presets(summary: dict[str, Any], command: str, patience: int) -> list[Path]:
    """``conf/<method>-default.toml``: the chosen setting's method keys, no dataset key, and
    early stopping as measured."""
    written = []
    label = {k: v["label"] for k, v in DATASETS.items()}
    for choice in summary["choices"]:
        method, source = choice["method"], choice["default"]
        keys = candidate_keys(method, source)
        worst = next(c for c in choice["candidates"] if c["candidate"] == source)
        lines = [
            f"# {method}: the default setting, chosen to transfer across datasets (not the best "
            "on one).",
            f"# The method keys of conf/{method}-{source}-strict.toml (tuned on "
            f"{label[source]}): by leave-one-dataset-out",
            "# over ML-100K, Last.fm-2K and generated data, the setting whose worst test HR@10 "
            "ratio to the reference",
            f"# on the held-out datasets is highest ({worst['worst_ratio']:.3f}).",
            "# Table: bench/results/transfer.md (docs/own-data.md, 'Settings that transfer'):",
            f"# {command}",
            f"# Early stopping after {patience} evaluated rounds without a better validation "
            "HR@10, as "
            "measured."
            if patience
            else "# No early stopping, as measured (patience 10 or 20 ends some of these runs at "
            "an early peak: the report).",
            '# Add your data\'s keys (dataset = ..., or dataset = "file" and data-file = ...):',
            f"# fedrec run conf/{method}-default.toml dataset='lastfm-2k'",
        ]
        if patience:
            keys["early-stopping-patience"] = patience
        lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
        path = conf_dir() / f"{method}-default.toml"
        path.write_text("\n".join(lines) + "\n")
        written.append(path)
    return written


def command_line(
    argv: list[str],
    script: str = "transfer.py",
    hidden: tuple[str, ...] = ("--data-dir", "--cache"),
) -> str:
    """The command as a report shows it: the folders of ``hidden`` options by name (DIR for
    the data folder, CACHE for ``--cache``, ...), never this machine's paths."""
    shown = []
    skip = False
    for i, item in enumerate(argv):
        if skip:
            skip = False
            continue
        if item in hidden:
            shown += [item, "DIR" if item == "--data-dir" else item[2:].upper()]
            skip = i + 1 < len(argv)
            continue
        shown.append(item)
    return f"python bench/{script} " + shlex.join(shown)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--cache", default="fedrec-out/transfer", help="finished cells, runs")
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--targets", nargs="+", default=list(DATASETS))
    parser.add_argument("--candidates", nargs="+", default=list(SOURCES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--patience", type=int, default=0, help="0: no early stopping")
    parser.add_argument("--write", default=None, help="write <stem>.md and <stem>.json")
    parser.add_argument("--presets", action="store_true", help="write conf/<method>-default.toml")
    args = parser.parse_args(argv)
    unknown = [t for t in args.targets if t not in DATASETS]
    if unknown:
        parser.error(f"unknown target {unknown}; choose from {', '.join(DATASETS)}")
    cache = Path(args.cache)
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


def settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "seed": args.seed,
        "rounds": args.rounds,
        "patience": args.patience,
        "protocol": "strict",
        "datasets": {t: DATASETS[t]["keys"] for t in args.targets},
    }


if __name__ == "__main__":
    raise SystemExit(main())
