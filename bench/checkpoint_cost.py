"""What a checkpoint costs: its size (server and node states) and the seconds it adds, for a
preset run in-process (LocalGrid) with ``checkpoint-every = 1`` (a checkpoint after every
round but the last), beside the median seconds of a round. Prints; writes nothing here (the
run folder is a temporary one)::

    python bench/checkpoint_cost.py conf/pfedrec-ml100k-strict.toml --data-dir /data --rounds 6
"""

from __future__ import annotations

import argparse
import itertools
import logging
import re
import statistics
import tempfile
import time

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.server_app import run_federation
from fedrec_lab.local_grid import LocalGrid
from fedrec_lab.presets import resolve

WRITTEN = re.compile(r"written in ([\d.]+) s \(server ([\d.]+) MB, nodes ([\d.]+) MB\)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset")
    parser.add_argument("--data-dir", default="")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--nodes", type=int, default=2)
    args = parser.parse_args()
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logging.getLogger("flwr").addHandler(Keep())
    with tempfile.TemporaryDirectory() as results:
        config = {
            **resolve(args.preset),
            "num-server-rounds": args.rounds,
            "checkpoint-every": 1,
            "data-dir": args.data_dir,
            "results-dir": results,
        }
        started = time.perf_counter()
        grid = LocalGrid(client_app, config, num_nodes=args.nodes)
        run_federation(grid, RunConfig.from_mapping(config))
    written = [WRITTEN.search(line) for line in lines]
    written = [[float(x) for x in match.groups()] for match in written if match]
    elapsed = [float(line.split("] ")[1].split("s")[0]) for line in lines if line[:7] == "[round "]
    per_round = statistics.median(b - a for a, b in itertools.pairwise(elapsed))
    seconds, server, nodes = (statistics.median(column) for column in zip(*written, strict=True))
    print(
        f"{args.preset}, {args.nodes} nodes, {len(written)} checkpoints: median "
        f"{seconds:.2f} s and {server + nodes:.1f} MB each (server {server:.2f} MB, nodes "
        f"{nodes:.1f} MB); a round {per_round:.2f} s (median, checkpoint included); "
        f"{time.perf_counter() - started:.0f} s in all"
    )


if __name__ == "__main__":
    main()
