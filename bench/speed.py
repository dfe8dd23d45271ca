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
import contextlib
import csv
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import torch

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


def machine() -> str:
    """The conditions of the measurement: date, commit, processor, cores, versions."""
    model = "unknown processor"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=PROJECT, capture_output=True, text=True)
        return done.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " with uncommitted changes"
    return (
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC at commit {commit or 'unknown'} on "
        f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, torch "
        f"{torch.__version__}, flwr {version('flwr')}."
    )


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
        [f"data-dir={Path(args.data_dir).resolve()}", f"results-dir={work}"],
    )

    lines = [
        "| scenario | nodes | Ray workers | rounds | median s/round | total s (incl. start) |"
        " test HR@10 | load before / after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scenario in args.scenarios:
        faithful = scenario in ("faithful", "inprocess-943")
        rounds = args.faithful_rounds if faithful else args.rounds
        config = {**base, "num-server-rounds": rounds, "run-name": scenario}
        load_before = os.getloadavg()[0]
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
            f"| {per_round:.2f} | {total:.0f} | {100 * summary['test']['hr@10']:.2f} "
            f"| {load_before:.1f} / {os.getloadavg()[0]:.1f} |"
        )
        print(lines[-1], flush=True)
    table = "\n".join(lines) + (
        f"\n\nPFedRec, ML-100K, {args.protocol} protocol, reference hyperparameters, all "
        "943 users every round, evaluation every round; one run per scenario, one after "
        f"the other. {machine()} Load: the 1-minute load average before and after each "
        "scenario (the machine is shared: the times are those of this load).\n"
    )
    command = (
        f"python bench/speed.py --data-dir DIR --protocol {args.protocol} --rounds {args.rounds} "
        f"--scenarios {' '.join(args.scenarios)}"
    )
    table = f"```bash\n{command}\n```\n\n{table}"
    (out / f"speed-{args.protocol}.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
