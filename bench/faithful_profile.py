"""Where our seconds of a faithful-mode message go, without Flower's engine.

Runs the app in-process on one node per user (LocalGrid) and, for every message, does what
the Ray backend does around our ClientApp: pickles the message and the node's ``Context``
(``context.state`` included) to the worker and the reply and context back. Prints, per
message kind, the median bytes of the pickled context and message and the median seconds of
pickling and of our handler; with ``--profile`` the top functions of the handler::

    python bench/faithful_profile.py --data-dir ../shared/datasets --rounds 3
"""

from __future__ import annotations

import argparse
import cProfile
import pickle
import pstats
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.server_app import run_federation
from fedrec_lab.local_grid import LocalGrid
from fedrec_lab.presets import resolve

PROJECT = Path(__file__).resolve().parents[1]


class PickledGrid(LocalGrid):
    """A LocalGrid whose nodes receive and return pickled (message, context) pairs."""

    def __init__(self, *args, profiler: cProfile.Profile | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.figures: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.profiler = profiler
        self.inner = self.client_app
        self.client_app = self._through_pickle

    def _through_pickle(self, message, context):
        kind = message.metadata.message_type
        figures = self.figures[kind]
        started = time.perf_counter()
        sent = pickle.dumps((message, context), protocol=5)
        message, received = pickle.loads(sent)
        figures["context-bytes"].append(len(pickle.dumps(context, protocol=5)))
        figures["message-bytes"].append(len(sent) - figures["context-bytes"][-1])
        handler = time.perf_counter()
        if self.profiler:
            self.profiler.enable()
        reply = self.inner(message, received)
        if self.profiler:
            self.profiler.disable()
        done = time.perf_counter()
        back, received = pickle.loads(pickle.dumps((reply, received), protocol=5))
        context.state = received.state
        ended = time.perf_counter()
        figures["pickle-s"].append(handler - started + ended - done)
        figures["handler-s"].append(done - handler)
        return back


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--preset", default="pfedrec-ml100k-strict")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=943)
    parser.add_argument("--profile", action="store_true", help="cProfile the handlers")
    parser.add_argument("--sort", default="cumulative", help="pstats order (tottime, ...)")
    parser.add_argument("--profile-out", help="also write the raw profile here (pstats file)")
    args = parser.parse_args()
    config = resolve(PROJECT / "conf" / f"{args.preset}.toml")
    results = tempfile.mkdtemp(prefix="fedrec-faithful-profile-")
    config.update(
        {
            "data-dir": str(Path(args.data_dir).resolve()),
            "results-dir": results,
            "num-server-rounds": args.rounds,
            "checkpoint-every": 0,
        }
    )
    profiler = cProfile.Profile() if args.profile else None
    grid = PickledGrid(client_app, config, args.nodes, profiler=profiler)
    started = time.perf_counter()
    try:
        run_federation(grid, RunConfig.from_mapping(config))
    finally:
        shutil.rmtree(results, ignore_errors=True)
    print(f"\n{args.nodes} nodes, {args.rounds} rounds: {time.perf_counter() - started:.1f} s")
    print("| message | count | context bytes | message bytes | pickle ms | handler ms |")
    print("|---|---|---|---|---|---|")
    for kind, figures in grid.figures.items():
        med = {k: statistics.median(v) for k, v in figures.items()}
        print(
            f"| {kind} | {len(figures['handler-s'])} | {med['context-bytes']:.0f} | "
            f"{med['message-bytes']:.0f} | {1e3 * med['pickle-s']:.2f} | "
            f"{1e3 * med['handler-s']:.2f} |"
        )
    if profiler:
        pstats.Stats(profiler).sort_stats(args.sort).print_stats(40)
        if args.profile_out:
            profiler.dump_stats(args.profile_out)


if __name__ == "__main__":
    main()
