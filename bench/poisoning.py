"""Poisoning: malicious clients promoting target items against the server's defences.

PFedRec on ML-100K under ``strict`` (``conf/pfedrec-ml100k-strict.toml``), a few rounds, run
in the faithful mode (each user its own contributor) without Flower: one node runtime trains
every user of a round as one batch, each user's upload is captured on its own
(:data:`fedrec_flwr.privacy.uploads.OBSERVERS`) and the server model
(:meth:`fedrec_flwr.server.model.ServerModel.apply`, the strategy's update) aggregates them
as one reply per user. For each seed: the clean run, then for each malicious share the
``promote`` attack without defence and under each defence. Writes ``--out`` (the table:
mean ± std over the seeds where there are several) and beside it ``<out>.json`` (every run's
evaluated rounds, and the commands), after each run; a run already in the JSON (same name
and seed) is kept, not run again, so a stopped command resumes and more seeds extend it;
``--merge`` joins the JSON files of commands run side by side (same settings) into ``--out``::

    FEDREC_DATA_DIR=../shared/datasets python bench/poisoning.py --rounds 30 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from fedrec_flwr.aggregation import RowUpload
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node import malicious
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.partition import participants
from fedrec_flwr.privacy import uploads
from fedrec_flwr.server.model import ServerModel
from fedrec_lab.presets import resolve

ROOT = Path(__file__).resolve().parent.parent
PRESET = ROOT / "conf" / "pfedrec-ml100k-strict.toml"
OUT = ROOT / "bench" / "results" / "poisoning.md"


def defences(bound: float) -> dict[str, dict]:
    """The server defences compared (run-config overrides)."""
    return {
        "none": {},
        f"row-update-bound {bound:g}": {"row-update-bound": bound},
        "trimmed-mean": {"robust-aggregation": "trimmed-mean"},
        "median": {"robust-aggregation": "median"},
    }


class PerUser:
    """Observer keeping each user's upload of the round (items, rows)."""

    def __init__(self) -> None:
        self.rows: list[tuple[np.ndarray, np.ndarray]] = []

    def __call__(self, user, server_round, items, rows, sent) -> None:
        self.rows.append((items.copy(), np.asarray(rows, dtype=np.float32).copy()))


def run(config: RunConfig, eval_every: int, targets: int) -> list[dict]:
    """The faithful-mode federation; each evaluated round's test HR@10 and the ER@10 of the
    ``targets`` target items (those an attack of this seed would promote)."""
    prepared = prepare(config)
    runtime = NodeRuntime(config, prepared, 0, 1)
    runtime.protocol.target_items = malicious.target_items(prepared, config.training.seed, targets)
    if layout(runtime.method).shared_dense:
        raise SystemExit("this bench aggregates item rows only: pick a method without dense")
    state = runtime.initial_state()
    model = ServerModel.initial(config, runtime.method, prepared.num_items)
    observer = PerUser()
    uploads.OBSERVERS.append(observer)
    history = []
    try:
        for server_round in range(1, config.training.num_server_rounds + 1):
            observer.rows.clear()
            state, _ = train_round(runtime, model, state, server_round)
            model.apply(
                [
                    RowUpload(items, rows, np.ones(len(items), np.int64), 1)
                    for items, rows in observer.rows
                ]
            )
            if evaluates(config, server_round, eval_every):
                history.append(evaluation(runtime, state, model, server_round))
    finally:
        uploads.OBSERVERS.remove(observer)
    return history


def train_round(runtime: NodeRuntime, model: ServerModel, state, server_round: int):
    """(the users' state after ``server_round``, the table they trained on as float64): the
    round's participants trained on ``model``'s table, as one node runtime does."""
    config, num_users = runtime.config, runtime.prepared.num_users
    users = participants(
        config.training.seed, server_round, num_users, config.training.fraction_train
    )
    runtime.train_request(server_round)
    model.start_round()
    table = model.table.astype(np.float64)
    _, state = runtime.train(state, server_round, users, None, model.table, model.dense)
    return state, table


def evaluates(config: RunConfig, server_round: int, eval_every: int) -> bool:
    """Whether the run evaluates after ``server_round``: every ``eval_every`` rounds and the
    last."""
    return server_round % eval_every == 0 or server_round == config.training.num_server_rounds


def evaluation(runtime: NodeRuntime, state, model: ServerModel, server_round: int) -> dict:
    """Every user's mean validation and test HR@10 and ER@10 (the share of users whose top
    10 holds a target item) after ``server_round``."""
    sums = runtime.evaluate(state, None, model.evaluation_table(), model.dense)
    n = sums["num-users"]
    return {
        "round": server_round,
        "val-hr@10": sums["val-hr@10"] / n,
        "test-hr@10": sums["test-hr@10"] / n,
        "er@10": sums.get("target-exposed", 0.0) / n,
    }


#: The settings every run of one result file shares (a JSON of other settings is refused).
SETTINGS = ("rounds", "eval_every", "scale", "bound", "targets")


def value(values: list[float]) -> str:
    """A percentage: the value (one seed) or 'mean ± std' over seeds."""
    if len(values) == 1:
        return f"{100 * values[0]:.2f}"
    return f"{100 * statistics.mean(values):.2f} ± {100 * statistics.stdev(values):.2f}"


def row(name: str, runs: list[dict]) -> str:
    """The table line of one run over its seeds (``runs``: its records, one per seed)."""
    best, last, peak = [], [], []
    for run in runs:
        history = run["history"]
        best.append(max(history, key=lambda h: (h["val-hr@10"], -h["round"])))
        last.append(history[-1])
        peak.append(max(h["er@10"] for h in history))
    cells = [
        name,
        ",".join(str(run["seed"]) for run in runs),
        ",".join(str(b["round"]) for b in best),
        value([b["test-hr@10"] for b in best]),
        value([b["er@10"] for b in best]),
        value([h["test-hr@10"] for h in last]),
        value([h["er@10"] for h in last]),
        value(peak),
        f"{statistics.median(run['seconds'] for run in runs):.0f}",
    ]
    return "| " + " | ".join(cells) + " |"


def table(record: dict, names: list[str]) -> str:
    """The Markdown report of a result file's runs, in the order of ``names``."""
    settings = record["settings"]
    seeds = sorted({run["seed"] for run in record["runs"]})
    by_name: dict[str, list[dict]] = {}
    for run in sorted(record["runs"], key=lambda r: r["seed"]):
        by_name.setdefault(run["name"], []).append(run)
    order = [n for n in names if n in by_name] + [n for n in by_name if n not in names]
    commands = record["commands"]
    lines = [
        "# Poisoning: item promotion against the server's defences",
        "",
        f"PFedRec, ML-100K, strict (`{PRESET.relative_to(ROOT)}`), "
        f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}, "
        f"{settings['rounds']} rounds, faithful mode (one contributor per user), `promote` with "
        f"malicious-scale {settings['scale']:g} and {settings['targets']} target item(s). "
        "HR@10 is the test HR@10 in %, ER@10 the share (%) of users whose top 10 holds a "
        "target item, at the round of best validation HR@10 (evaluated every "
        f"{settings['eval_every']} rounds), at the last round, and the most over the run; "
        "mean ± std over the seeds a row lists (s: the median seconds of a run).",
        "",
        "| run | seeds | best round | HR@10 | ER@10 | last HR@10 | last ER@10 | max ER@10 | s |",
        "|---|---|---|---|---|---|---|---|---|",
        *(row(name, by_name[name]) for name in order),
        "",
        f"Command{'s' if len(commands) > 1 else ''}: "
        + ", ".join(f"`FEDREC_DATA_DIR=../shared/datasets {c}`" for c in commands),
        "",
    ]
    return "\n".join(lines)


def write(path: Path, text: str) -> None:
    """Write ``text`` whole (a stopped command leaves the previous file, not half of one)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--seed", type=int, help="one seed (the same as --seeds SEED)")
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--fractions", default="0.01,0.05")
    parser.add_argument("--scale", type=float, default=10.0, help="malicious-scale of promote")
    parser.add_argument("--bound", type=float, default=1.0, help="row-update-bound")
    parser.add_argument("--targets", type=int, default=1, help="malicious-target-items")
    parser.add_argument("--out", type=Path, default=OUT, help="the Markdown table written")
    parser.add_argument("--merge", type=Path, nargs="+", help="only join these JSON files")
    args = parser.parse_args()
    seeds = [args.seed] if args.seed is not None else args.seeds
    settings = {key: getattr(args, key) for key in SETTINGS}
    results = args.out.with_suffix(".json")
    record = {"settings": settings, "commands": [], "runs": []}
    for path in args.merge or ([results] if results.exists() else []):
        found = json.loads(path.read_text())
        if found["settings"] != settings:
            raise SystemExit(
                f"{path} holds runs of {found['settings']}, not {settings}: run with "
                "those settings, or give another --out"
            )
        twice = {(r["name"], r["seed"]) for r in record["runs"]}
        twice &= {(r["name"], r["seed"]) for r in found["runs"]}
        if twice:
            raise SystemExit(f"--merge: {sorted(twice)} in more than one file; merge each once")
        record["runs"] += found["runs"]
        record["commands"] += [c for c in found["commands"] if c not in record["commands"]]
    command = " ".join(["python bench/poisoning.py", *sys.argv[1:]])
    if not args.merge and command not in record["commands"]:
        record["commands"].append(command)
    attack = {
        "malicious-attack": "promote",
        "malicious-scale": args.scale,
        "malicious-target-items": args.targets,
    }
    runs = [("clean (no malicious user)", {})] + [
        (f"{100 * float(f):g} % malicious, {d}", {**attack, "malicious-fraction": float(f), **o})
        for f in args.fractions.split(",")
        for d, o in defences(args.bound).items()
    ]
    names = [name for name, _ in runs]
    done = {(run["name"], run["seed"]) for run in record["runs"]}
    for seed in [] if args.merge else seeds:
        base = {**resolve(PRESET), "num-server-rounds": args.rounds, "seed": seed}
        for name, overrides in runs:
            if (name, seed) in done:
                print(f"kept: {name}, seed {seed} (in {results.name})", flush=True)
                continue
            start = time.time()
            config = RunConfig.from_mapping({**base, **overrides})
            history = run(config, args.eval_every, args.targets)
            seconds = time.time() - start
            record["runs"].append(
                {"name": name, "seed": seed, "history": history, "seconds": seconds}
            )
            write(results, json.dumps(record, indent=1) + "\n")
            write(args.out, table(record, names))
            print(row(name, record["runs"][-1:]), flush=True)
    write(results, json.dumps(record, indent=1) + "\n")
    write(args.out, table(record, names))
    print(f"wrote {args.out} and {results.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
