"""Why a target item enters users' top 10 in early rounds under bounded secure aggregation:
the rows of ``bench/poisoning_secagg.py``'s runs, round by round.

The same faithful-mode run as ``bench/poisoning_secagg.py`` (``promote`` clients, each
user's change clipped to the round's bound per row and summed exactly), evaluated after
every round. The round's bound is ``secure-aggregation-bound``, or with ``--bound-scale``
(and ``--bound-floor``) the bound that follows the table
(:class:`~fedrec_flwr.privacy.bounded.scaled.BoundSchedule`). For each round it reports
the round's bound, the table's median row norm as sent, the target row's norm as sent and
after the round, the target's contributors (malicious and
honest) and the median norm of their changes before the clip, the honest users' change
norms over every row (median, 99th percentile), the target row's change after aggregation
against the largest of the other rows', and the target's ER@10::

    FEDREC_DATA_DIR=../shared/datasets python bench/poisoning_secagg_rows.py --methods fedmf \
        --rounds 6 --bound-scale 20 --bound-floor 1 --out /tmp/poisoning-secagg-rows.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from poisoning import evaluation, train_round, write  # bench/ is the script's folder
from poisoning_secagg import PRESETS, PerUser, fast_sum

from fedrec_flwr.aggregation import RowUpload
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.node import malicious
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.privacy import uploads
from fedrec_flwr.privacy.bounded.circuit import Bounds
from fedrec_flwr.privacy.bounded.scaled import BoundSchedule
from fedrec_flwr.server.model import ServerModel
from fedrec_lab.presets import resolve

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "poisoning-secagg-rows.md"
HEAD = (
    "| method | seed | round | bound | table row norm (median) | target row norm, sent -> after "
    "| target contributors (malicious / honest) | their change norm before the clip "
    "(malicious / honest, median) | honest change norm (median / p99) | target row's "
    "aggregated change / largest other row's | ER@10 (%) |"
)


def norms(values: np.ndarray) -> np.ndarray:
    return np.sqrt((np.asarray(values, np.float64) ** 2).sum(axis=-1))


def rows_of(config: RunConfig, bound: float, scaled: tuple[float, float] = (0.0, 0.0)) -> list[str]:
    """One table line per round of a bounded run with ``promote`` clients (``scaled``: the
    bound's scale and floor, 0: ``bound`` every round)."""
    prepared = prepare(config)
    runtime = NodeRuntime(config, prepared, 0, 1)
    seed = config.training.seed
    runtime.protocol.target_items = malicious.target_items(prepared, seed, 1)
    target = int(runtime.protocol.target_items[0])
    model = ServerModel.initial(config, runtime.method, prepared.num_items)
    schedule = BoundSchedule(Bounds.of(prepared.num_items, model.table.shape[1], bound, 0), *scaled)
    fraction = config.group(malicious.MaliciousKeys).malicious_fraction
    bad = set(malicious.malicious_users(seed, prepared.num_users, fraction).tolist())
    state, observer, lines = runtime.initial_state(), PerUser(), []
    uploads.OBSERVERS.append(observer)
    try:
        for server_round in range(1, config.training.num_server_rounds + 1):
            observer.rows.clear()
            before = np.array(model.table, dtype=np.float64)
            state, table = train_round(runtime, model, state, server_round)
            bounds = schedule.at(table)
            honest, on_target = [], {True: [], False: []}
            for user, items, rows in observer.rows:
                change = norms(rows.astype(np.float64) - table[items])
                if user not in bad:
                    honest.extend(change)
                on_target[user in bad].extend(change[items == target])
            total, counts = fast_sum(bounds, table, observer.rows, seed, server_round)
            touched = np.flatnonzero(counts)
            changes = total[touched].astype(np.float64) * 2.0**-bounds.frac_bits
            sums = changes + counts[touched, None] * table[touched]
            model.apply([RowUpload(touched, sums, counts[touched], len(observer.rows))])
            moved = norms(np.asarray(model.table, np.float64) - before)
            others = np.delete(moved, target)
            er = evaluation(runtime, state, model, server_round)["er@10"]
            bad_n, good_n = on_target[True], on_target[False]
            lines.append(
                f"| {config.method_name} | {seed} | {server_round} | {bounds.bound:.3g} | "
                f"{np.median(norms(before)):.3f} | {norms(before[target]):.3f} -> "
                f"{norms(model.table[target]):.3f} | {len(bad_n)} / {len(good_n)} | "
                f"{np.median(bad_n) if bad_n else 0:.2f} / {np.median(good_n) if good_n else 0:.2f}"
                f" | {np.median(honest):.2f} / {np.quantile(honest, 0.99):.2f} | "
                f"{moved[target]:.3f} / {others.max():.3f} | {100 * er:.2f} |"
            )
            print(lines[-1], flush=True)
    finally:
        uploads.OBSERVERS.remove(observer)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--fraction", type=float, default=0.05, help="malicious-fraction")
    parser.add_argument("--scale", type=float, default=100.0, help="malicious-scale of promote")
    parser.add_argument("--bound", type=float, default=25.0, help="secure-aggregation-bound")
    parser.add_argument(
        "--bound-scale",
        type=float,
        default=0.0,
        help="secure-aggregation-bound-scale: each round's bound this times the table's median "
        "row norm, at most --bound (0: --bound every round)",
    )
    parser.add_argument(
        "--bound-floor", type=float, default=0.0, help="secure-aggregation-bound-floor"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    attack = {
        "malicious-attack": "promote",
        "malicious-scale": args.scale,
        "malicious-fraction": args.fraction,
    }
    lines = []
    for method in args.methods:
        for seed in args.seeds:
            base = {**resolve(PRESETS[method]), "num-server-rounds": args.rounds, "seed": seed}
            config = RunConfig.from_mapping({**base, **attack})
            lines += rows_of(config, args.bound, (args.bound_scale, args.bound_floor))
    text = [
        "# The target row under bounded secure aggregation, round by round",
        "",
        f"ML-100K, strict (`conf/<method>-ml100k-strict.toml`), faithful mode, "
        f"{100 * args.fraction:g} % `promote` clients (malicious-scale {args.scale:g}, 1 target "
        f"item), secure-aggregation-bound {args.bound:g} (every row), evaluated after every "
        "round. "
        + (
            f"The bound follows the table: each round's bound is {args.bound_scale:g} x the "
            f"median row norm of the table as sent, at least {args.bound_floor:g} and at most "
            f"{args.bound:g} (`secure-aggregation-bound-scale`). "
            if args.bound_scale > 0
            else ""
        )
        + "Norms are L2 norms of item rows; a change is a user's row as uploaded less "
        "the row as sent, before the clip to the bound; the aggregated change is the row "
        "after the round less the row as sent.",
        "",
        HEAD,
        "|" + "---|" * HEAD.count(" | ") + "---|",
        *lines,
        "",
        f"Command: `FEDREC_DATA_DIR=../shared/datasets python bench/poisoning_secagg_rows.py "
        f"{' '.join(sys.argv[1:])}`",
        "",
    ]
    write(args.out, "\n".join(text))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
