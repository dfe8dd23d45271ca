"""Secure aggregation with dropouts: a Flower run of one SuperNode per user.

``flwr run`` on Flower's simulation engine (``fedrec_lab.launch.run``), one SuperNode per user
of a small synthetic dataset, ``fault-fraction`` of the nodes sent a train message crashing
at random every round (keyed by (seed, round, partition): the same nodes in both runs), with
and without ``secure-aggregation`` (the masks' self-mask shares on each node's neighbours
of the round's graph, ``fedrec_flwr/privacy/secagg_dropout.py``). Reports per round the
dropped nodes, the users aggregated and the validation HR@10 of both runs; the secure run
aggregates the survivors' exact sum when every round completes with the plain run's users
and metrics. Writes ``bench/results/privacy/secure-dropouts.md``::

    python bench/secure_dropouts.py --users 60 --rounds 10 --fault-fraction 0.1
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
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
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
        "secure-aggregation-keys": "seeded",
    }
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, secure in (("plain", False), ("secure", True)):
            keys = {**config, "run-name": name}
            if secure:
                keys["secure-aggregation"] = True
            else:
                keys.pop("secure-aggregation-keys")
            runs[name] = flower_run(keys, args.users, Path(tmp) / name)
    (plain_status, plain, plain_summary), (status, secure, summary) = runs["plain"], runs["secure"]
    lines = [
        f"One SuperNode per user ({args.users} users, {args.items} items, synthetic), "
        f"`flwr run` on Flower's simulation engine, PFedRec, {args.rounds} rounds, "
        f"`fault-fraction = {args.fault_fraction}` (crash); run status: plain `{plain_status}`, "
        f"secure `{status}`; void rounds: plain {plain_summary['void_rounds']}, secure "
        f"{summary['void_rounds']}.",
        "",
        "| round | nodes dropped | users aggregated (plain / secure) | val HR@10 plain | "
        "val HR@10 secure | train loss plain | train loss secure |",
        "|---|---|---|---|---|---|---|",
    ]
    worst = 0.0
    for p, s in zip(plain, secure, strict=True):
        worst = max(worst, abs(float(p["val-hr@10"] or 0) - float(s["val-hr@10"] or 0)))
        lines.append(
            f"| {p['round']} | {s['train-failures']} | {p['train-users']} / {s['train-users']} "
            f"| {p['val-hr@10']} | {s['val-hr@10']} | {p['train-loss']} | {s['train-loss']} |"
        )
    same = all(p["train-users"] == s["train-users"] for p, s in zip(plain, secure, strict=True))
    lines += [
        "",
        f"Every round aggregated the same users in both runs: {same}; the largest difference "
        f"of validation HR@10 in a round: {worst:.2e}; test HR@10 at the best validation "
        f"round: plain {plain_summary['test']['hr@10']:.4f}, secure "
        f"{summary['test']['hr@10']:.4f}.",
        "",
        "```",
        "python bench/secure_dropouts.py " + " ".join(sys.argv[1:]),
        "```",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if same and not summary["void_rounds"] else 1


if __name__ == "__main__":
    sys.exit(main())
