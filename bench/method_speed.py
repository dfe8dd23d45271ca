"""Training cost per round of each method and plug-in, in one run (medians and ratios).

Times ``NodeRuntime.train`` (the local update of every user, packed in one node, without
Flower or evaluation) for each preset, interleaving the presets over ``--repeats`` rounds so
the machine's noise hits all alike, and reports the median seconds per round and the ratio
to a reference preset (default: the same method without its plug-in, e.g. ``pfedrec-sam``
against ``pfedrec``). Writes ``bench/results/method-speed.md``::

    python bench/method_speed.py --data-dir ../shared/datasets \\
        --presets pfedrec-ml100k-paper pfedrec-sam-ml100k-paper fedmf-ml100k-paper \\
        fedmf-sam-ml100k-paper --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.server_app import initial_item_table
from fedrec_lab.presets import resolve

PROJECT = Path(__file__).resolve().parents[1]
PLUG_INS = ("-sam", "-dual")


def reference_of(preset: str) -> str:
    """The preset without its plug-in (``pfedrec-sam-ml100k-paper`` -> ``pfedrec-...``)."""
    for plug_in in PLUG_INS:
        if plug_in + "-" in preset:
            return preset.replace(plug_in, "", 1)
    return preset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--presets", nargs="+", required=True)
    parser.add_argument("--repeats", type=int, default=5, help="rounds timed per preset")
    parser.add_argument("--out", default=str(PROJECT / "bench" / "results" / "method-speed.md"))
    args = parser.parse_args()
    torch.set_num_threads(1)

    runtimes, states, tables, dense = {}, {}, {}, {}
    for name in args.presets:
        mapping = resolve(PROJECT / "conf" / f"{name}.toml")
        config = RunConfig.from_mapping({**mapping, "data-dir": args.data_dir})
        prepared = prepare(config)
        runtime = NodeRuntime(config, prepared, 0, 1)
        runtimes[name] = runtime
        states[name] = runtime.initial_state()
        tables[name] = initial_item_table(config, prepared.num_items, runtime.method.row_dim)
        dense[name] = {
            k: v
            for k, v in runtime.method.init_dense().items()
            if k in layout(runtime.method).shared_dense
        }
    seconds: dict[str, list[float]] = {name: [] for name in args.presets}
    for server_round in range(1, args.repeats + 1):
        for name in args.presets:
            runtime = runtimes[name]
            users = np.intersect1d(runtime.users, runtime.participants(server_round))
            started = time.perf_counter()
            _, states[name] = runtime.train(
                states[name], server_round, users, None, tables[name], dense[name]
            )
            seconds[name].append(time.perf_counter() - started)

    medians = {name: statistics.median(values) for name, values in seconds.items()}
    lines = [
        "| preset | median train s/round | min | max | vs reference | reference |",
        "|---|---|---|---|---|---|",
    ]
    for name in args.presets:
        ref = reference_of(name)
        ratio = f"{medians[name] / medians[ref]:.2f}x" if ref in medians and ref != name else "-"
        lines.append(
            f"| {name} | {medians[name]:.3f} | {min(seconds[name]):.3f} | "
            f"{max(seconds[name]):.3f} | {ratio} | {ref if ratio != '-' else '-'} |"
        )
    text = (
        "\n".join(lines)
        + f"\n\nLocal training of all users of the round in one node (no Flower, no evaluation),"
        f" {args.repeats} rounds per preset, interleaved, one PyTorch thread. Command:\n\n"
        "```\npython bench/method_speed.py --data-dir DATA --presets "
        + " ".join(args.presets)
        + f" --repeats {args.repeats}\n```\n"
    )
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
