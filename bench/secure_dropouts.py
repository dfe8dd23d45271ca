"""Secure aggregation with dropouts: a Flower run of one SuperNode per user.

``flwr run`` on Flower's simulation engine (``fedrec_lab.launch.run``), one SuperNode per user
of a small synthetic dataset, ``fault-fraction`` of the nodes sent a train message crashing
at random every round (keyed by (seed, round, partition): the same nodes in every run), with
and without ``secure-aggregation`` (the masks' self-mask shares on each node's neighbours
of the round's graph, ``fedrec_flwr/privacy/secagg_dropout.py``), and with ``--bound``, a
run under ``secure-aggregation-bound`` (each user's report proven and verified by the
server and the helper, ``fedrec_flwr/server/bounded_rounds.py``; a bound no honest change
reaches leaves the plain run's sum). Reports per round the dropped nodes, the users
aggregated and the validation HR@10 of each run; a secure run aggregates the survivors'
exact sum when every round completes with the plain run's users and metrics. Writes
``bench/results/privacy/secure-dropouts.md``::

    python bench/secure_dropouts.py --users 60 --rounds 10 --fault-fraction 0.1
    python bench/secure_dropouts.py --users 50 --rounds 10 --fault-fraction 0.1 \
        --runs plain bounded --bound 1000 --out bench/results/privacy/secure-dropouts-bounded.md
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from pathlib import Path

from fedrec_lab.launch import COMPLETED, run

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "privacy" / "secure-dropouts.md"


def flower_run(config: dict, users: int, folder: Path) -> tuple[str, list[dict], dict]:
    """(status, rounds.csv rows, summary) of one ``flwr run`` with one SuperNode per user."""
    status, output = run({**config, "results-dir": str(folder)}, nodes=users, stream=False)
    run_dir = next(folder.glob("*/rounds.csv")).parent
    with open(run_dir / "rounds.csv") as f:
        rows = list(csv.DictReader(f))
    summary = json.loads((run_dir / "summary.json").read_text())
    if status not in (COMPLETED, "finished:completed-with-void-rounds"):
        print(output[-3000:], file=sys.stderr)
    return status, rows, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=60)
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--fault-fraction", type=float, default=0.1)
    parser.add_argument(
        "--bound", type=float, default=0.0, help="also a run with secure-aggregation-bound"
    )
    parser.add_argument("--max-rows", type=int, default=0, help="its secure-aggregation-max-rows")
    parser.add_argument(
        "--runs",
        nargs="+",
        choices=["plain", "secure", "bounded"],
        help="the runs, the first the others are compared with (default: plain and secure, "
        "and bounded with --bound)",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    names = args.runs or ["plain", "secure", *(["bounded"] if args.bound else [])]
    if "bounded" in names and not args.bound:
        parser.error("a bounded run needs --bound")
    config = {
        "dataset": "synthetic",
        "synthetic-users": args.users,
        "synthetic-items": args.items,
        "synthetic-mean-degree": 12,
        "method": "pfedrec",
        "item-lr": 8.0,
        "num-server-rounds": args.rounds,
        "fault-fraction": args.fault_fraction,
        "fault-mode": "crash",
        "checkpoint-every": 0,
    }
    secure = {"secure-aggregation": True, "secure-aggregation-keys": "seeded"}
    bounded = {"secure-aggregation-bound": args.bound, "secure-aggregation-max-rows": args.max_rows}
    variants = {"plain": {}, "secure": secure, "bounded": {**secure, **bounded}}
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            keys = {**config, **variants[name], "run-name": name}
            runs[name] = flower_run(keys, args.users, Path(tmp) / name)
    status = {name: run_[0] for name, run_ in runs.items()}
    rows = {name: run_[1] for name, run_ in runs.items()}
    summaries = {name: run_[2] for name, run_ in runs.items()}

    def each(what) -> str:
        return ", ".join(f"{name} {what(name)}" for name in names)

    bound = (
        f"; bounded: `secure-aggregation-bound = {args.bound:g}`, "
        f"`secure-aggregation-max-rows = {args.max_rows}`"
        if "bounded" in names
        else ""
    )
    lines = [
        f"One SuperNode per user ({args.users} users, {args.items} items, synthetic), "
        f"`flwr run` on Flower's simulation engine, PFedRec, {args.rounds} rounds, "
        f"`fault-fraction = {args.fault_fraction}` (crash){bound}; run status: "
        f"{each(lambda n: f'`{status[n]}`')}; void rounds: "
        f"{each(lambda n: summaries[n]['void_rounds'])}.",
        "",
        f"| round | nodes dropped | users aggregated ({' / '.join(names)}) | "
        + " | ".join(f"val HR@10 {name}" for name in names)
        + " | "
        + " | ".join(f"train loss {name}" for name in names)
        + " |",
        "|---|---|---|" + "---|" * (2 * len(names)),
    ]
    worst, same = 0.0, True
    for by_run in zip(*rows.values(), strict=True):
        first, last = by_run[0], by_run[-1]
        hr = [float(r["val-hr@10"] or 0) for r in by_run]
        worst = max(worst, *(abs(h - hr[0]) for h in hr))
        same = same and len({r["train-users"] for r in by_run}) == 1
        lines.append(
            f"| {first['round']} | {last['train-failures']} | "
            + " / ".join(r["train-users"] for r in by_run)
            + " | "
            + " | ".join(r["val-hr@10"] for r in by_run)
            + " | "
            + " | ".join(r["train-loss"] for r in by_run)
            + " |"
        )
    refused = sum(int(r["rejected-replies"]) for by_run in rows.values() for r in by_run)
    lines += [
        "",
        f"Every round aggregated the same users in {'both' if len(names) == 2 else 'all'} "
        f"runs: {same}; the largest difference of validation HR@10 in a round: {worst:.2e}"
        + (f"; replies refused: {refused}" if "bounded" in names else "")
        + "; test HR@10 at the best validation round: "
        + each(lambda n: f"{summaries[n]['test']['hr@10']:.4f}")
        + ".",
        "",
        "```",
        "python bench/secure_dropouts.py " + " ".join(sys.argv[1:]),
        "```",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    void = any(summary["void_rounds"] for summary in summaries.values())
    return 0 if same and not void and not refused else 1


if __name__ == "__main__":
    sys.exit(main())
