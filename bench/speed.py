"""Seconds per round of PFedRec on MovieLens-100K, engine by engine.

Scenarios (each one run, medians over its rounds; run them in one go on a quiet machine and
compare ratios, not absolute numbers, across machines):

- ``inprocess``: the ServerApp and ClientApp in one process (LocalGrid), all users on 1 node;
  ``inprocess-N``: the same with N nodes (``inprocess-943``: one user per node);
- ``flwr-N-W``: ``flwr run`` on Flower's Ray engine, N SuperNodes, W Ray workers;
- ``faithful``: ``flwr run`` with one SuperNode per user (943), a few rounds.

    python bench/speed.py --data-dir ../shared/datasets --rounds 100
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.server_app import run_federation
from fedrec_lab.launch import PROJECT, merged_run_config, run
from fedrec_lab.local_grid import LocalGrid


def round_seconds(run_dir: Path) -> list[float]:
    """Duration of each round from ``rounds.csv`` (first round: from the start of the loop)."""
    with open(run_dir / "rounds.csv") as f:
        elapsed = [float(r["seconds"]) for r in csv.DictReader(f)]
    return [b - a for a, b in zip([0.0, *elapsed[:-1]], elapsed, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--protocol", default="paper")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--faithful-rounds", type=int, default=5)
    parser.add_argument(
        "--scenarios", nargs="+", default=["inprocess", "flwr-2-1", "flwr-2-2", "faithful"]
    )
    parser.add_argument("--out", default=str(PROJECT / "bench" / "results"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fedrec-speed-"))
    base = merged_run_config(
        PROJECT / "conf" / f"pfedrec-ml100k-{args.protocol}.toml",
        [f"data-dir='{Path(args.data_dir).resolve()}'", f"results-dir='{work}'"],
    )

    lines = [
        "| scenario | nodes | Ray workers | rounds | median s/round | total s (incl. start) |"
        " test HR@10 |",
        "|---|---|---|---|---|---|---|",
    ]
    for scenario in args.scenarios:
        faithful = scenario in ("faithful", "inprocess-943")
        rounds = args.faithful_rounds if faithful else args.rounds
        config = {**base, "num-server-rounds": rounds, "run-name": scenario}
        started = time.time()
        if scenario.startswith("inprocess"):
            nodes, workers = int(scenario.partition("-")[2] or 1), 0
            grid = LocalGrid(client_app, config, nodes)
            run_federation(grid, RunConfig.from_mapping(config))
        else:
            if scenario == "faithful":
                nodes, workers = 943, 1
            else:
                _, n, w = scenario.split("-")
                nodes, workers = int(n), int(w)
            federation = [f"client-resources-num-cpus={max(1, 2 // workers)}"]
            status, _ = run(config, nodes=nodes, federation=federation, stream=False)
            if status != "finished:completed":
                raise SystemExit(f"{scenario}: {status}")
        total = time.time() - started
        summary = json.loads((work / scenario / "summary.json").read_text())
        per_round = statistics.median(round_seconds(work / scenario))
        lines.append(
            f"| {scenario} | {nodes} | {workers or 'none (in-process)'} | {rounds} "
            f"| {per_round:.2f} | {total:.0f} | {100 * summary['test']['hr@10']:.2f} |"
        )
        print(lines[-1], flush=True)
    table = "\n".join(lines) + (
        f"\n\nPFedRec, ML-100K, {args.protocol} protocol, reference hyperparameters, all "
        "943 users every round, evaluation every round; one run per scenario.\n"
    )
    (out / f"speed-{args.protocol}.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
