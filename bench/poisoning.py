"""Poisoning: malicious clients promoting target items against the server's defences.

PFedRec on ML-100K under ``strict`` (``conf/pfedrec-ml100k-strict.toml``), one seed, a few
rounds, run in the faithful mode (each user its own contributor) without Flower: one node
runtime trains every user of a round as one batch, each user's upload is captured on its own
(:data:`fedrec_flwr.privacy.uploads.OBSERVERS`) and the server model
(:meth:`fedrec_flwr.server.model.ServerModel.apply`, the strategy's update) aggregates them
as one reply per user. The clean run, then for each malicious share the ``promote`` attack
without defence and under each defence. Writes ``bench/results/poisoning.md``::

    FEDREC_DATA_DIR=../shared/datasets python bench/poisoning.py --rounds 30 --seed 0
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from fedrec_flwr.aggregation import RowUpload
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
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
    runtime.protocol.target_items = malicious.target_items(prepared, config.seed, targets)
    if runtime.method.shared_dense_names():
        raise SystemExit("this bench aggregates item rows only: pick a method without dense")
    state = runtime.initial_state()
    model = ServerModel.initial(config, runtime.method, prepared.num_items)
    observer = PerUser()
    uploads.OBSERVERS.append(observer)
    history = []
    try:
        for server_round in range(1, config.num_server_rounds + 1):
            users = participants(
                config.seed, server_round, prepared.num_users, config.fraction_train
            )
            runtime.train_request(server_round)
            model.start_round()
            observer.rows.clear()
            _, state = runtime.train(state, server_round, users, None, model.table, model.dense)
            model.apply(
                [
                    RowUpload(items, rows, np.ones(len(items), np.int64), 1)
                    for items, rows in observer.rows
                ]
            )
            if server_round % eval_every and server_round != config.num_server_rounds:
                continue
            sums = runtime.evaluate(state, None, model.evaluation_table(), model.dense)
            n = sums["num-users"]
            history.append(
                {
                    "round": server_round,
                    "val-hr@10": sums["val-hr@10"] / n,
                    "test-hr@10": sums["test-hr@10"] / n,
                    "er@10": sums.get("target-exposed", 0.0) / n,
                }
            )
    finally:
        uploads.OBSERVERS.remove(observer)
    return history


def row(name: str, history: list[dict], seconds: float) -> str:
    best = max(history, key=lambda h: (h["val-hr@10"], -h["round"]))
    last = history[-1]
    return (
        f"| {name} | {best['round']} | {100 * best['test-hr@10']:.2f} | "
        f"{100 * best['er@10']:.2f} | {100 * last['test-hr@10']:.2f} | "
        f"{100 * last['er@10']:.2f} | {100 * max(h['er@10'] for h in history):.2f} | "
        f"{seconds:.0f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--fractions", default="0.01,0.05")
    parser.add_argument("--scale", type=float, default=10.0, help="malicious-scale of promote")
    parser.add_argument("--bound", type=float, default=1.0, help="row-update-bound")
    parser.add_argument("--targets", type=int, default=1, help="malicious-target-items")
    parser.add_argument("--out", type=Path, default=OUT, help="the Markdown table written")
    args = parser.parse_args()
    base = {**resolve(PRESET), "num-server-rounds": args.rounds, "seed": args.seed}
    attack = {
        "malicious-attack": "promote",
        "malicious-scale": args.scale,
        "malicious-target-items": args.targets,
    }
    lines = [
        "# Poisoning: item promotion against the server's defences",
        "",
        f"PFedRec, ML-100K, strict (`{PRESET.relative_to(ROOT)}`), seed {args.seed}, "
        f"{args.rounds} rounds, faithful mode (one contributor per user), `promote` with "
        f"malicious-scale {args.scale:g} and {args.targets} target item(s). HR@10 is the test "
        "HR@10 in %, ER@10 the share (%) of users whose top 10 holds a target item, at the "
        "round of best validation HR@10 (evaluated every "
        f"{args.eval_every} rounds), at the last round, and the most over the run.",
        "",
        "| run | best round | HR@10 | ER@10 | last HR@10 | last ER@10 | max ER@10 | s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, overrides in [("clean (no malicious user)", {})] + [
        (f"{100 * float(f):g} % malicious, {d}", {**attack, "malicious-fraction": float(f), **o})
        for f in args.fractions.split(",")
        for d, o in defences(args.bound).items()
    ]:
        start = time.time()
        history = run(RunConfig.from_mapping({**base, **overrides}), args.eval_every, args.targets)
        lines.append(row(name, history, time.time() - start))
        print(lines[-1], flush=True)
    command = " ".join(["python bench/poisoning.py", *sys.argv[1:]])
    lines += ["", f"Command: `FEDREC_DATA_DIR=../shared/datasets {command}`", ""]
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
