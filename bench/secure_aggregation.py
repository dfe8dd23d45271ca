"""Secure aggregation: its accuracy, its cost and what the server still sees.

PFedRec on ML-100K under ``strict`` (``conf/pfedrec-ml100k-strict.toml``), one seed, with and
without ``secure-aggregation``, through Flower's apps on an in-process grid of ``--nodes``
nodes (users packed into nodes: each node masks towards every other). Reports the test
metrics of the best validation round and how far the two runs' validation HR@10 ever
differ, the traffic per round (train and evaluate messages' arrays), the time a node
spends on its masks (medians), the payload of one user's own node in the faithful mode
(one user per node, as a real device), and what the unmasked aggregate still exposes: the
participants of each round and, per row, how many of them trained it (rows trained by one
participant only are that participant's row, unattributed). Writes
``bench/results/privacy/secure-aggregation.md``::

    python bench/secure_aggregation.py --data-dir DIR --rounds 30 --nodes 8
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.partition import participants
from fedrec_flwr.privacy import secagg
from fedrec_flwr.server_app import run_federation
from fedrec_lab.audit.run import request_counts, request_of
from fedrec_lab.local_grid import LocalGrid
from fedrec_lab.presets import resolve

ROOT = Path(__file__).resolve().parent.parent
PRESET = ROOT / "conf" / "pfedrec-ml100k-strict.toml"
OUT = ROOT / "bench" / "results" / "privacy" / "secure-aggregation.md"


def federated(mapping: dict, nodes: int) -> tuple[dict, list[dict], float]:
    """(summary, rounds.csv rows, seconds) of one in-process Flower run."""
    with tempfile.TemporaryDirectory() as tmp:
        config = RunConfig.from_mapping({**mapping, "results-dir": tmp, "checkpoint-every": 0})
        start = time.perf_counter()
        summary = run_federation(LocalGrid(client_app, config.to_mapping(), nodes), config)
        seconds = time.perf_counter() - start
        with open(next(Path(tmp).glob("*/rounds.csv"))) as f:
            rows = list(csv.DictReader(f))
    return summary, rows, seconds


def seconds_per_peer(length: int, peers: int = 32) -> float:
    """Median seconds one node takes per peer to mask a vector of ``length`` (key
    agreement, HKDF, the ChaCha20 stream and the addition), over ``peers`` peers."""
    keys = [secagg.private_key(0, p, "seeded") for p in range(peers + 1)]
    vector = np.zeros(length, dtype=np.uint64)
    times = []
    for peer in keys[1:]:
        start = time.perf_counter()
        secret = secagg.shared_secret(keys[0], secagg.public_bytes(peer))
        vector += secagg.mask_stream(secret, 1, length)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def mb(value: float) -> str:
    return f"{value / 1e6:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default="", help="the datasets folder (data-dir)")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=8, help="in-process nodes")
    parser.add_argument("--out", type=Path, default=OUT, help="the Markdown report written")
    args = parser.parse_args()
    base = {**resolve(PRESET), "num-server-rounds": args.rounds, "seed": args.seed}
    if args.data_dir:
        base["data-dir"] = args.data_dir
    runs = {}
    for name, keys in (("plain", {}), ("secure aggregation", {"secure-aggregation": True})):
        runs[name] = federated({**base, **keys}, args.nodes)
        print(name, runs[name][0]["test"]["hr@10"], f"{runs[name][2]:.0f} s", flush=True)

    config = RunConfig.from_mapping(base)
    prepared = prepare(config)
    n, d = prepared.num_items, config.learning.embedding_dim
    length = secagg.Layout.of(n, d, {}).length
    lines = [
        "# Secure aggregation: accuracy, cost and what the server still sees",
        "",
        f"PFedRec, ML-100K, strict (`{PRESET.relative_to(ROOT)}`), seed {args.seed}, "
        f"{args.rounds} rounds, Flower's apps on an in-process grid of {args.nodes} nodes "
        f"(the {prepared.num_users} users packed into them), with and without "
        "`secure-aggregation`. Test metrics in % at the best validation round.",
        "",
        "| run | best round | test HR@10 | test NDCG@10 | bytes down / round (MB) | "
        "bytes up / round (MB) | s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (summary, rows, seconds) in runs.items():
        down = statistics.median(float(r["bytes-down"]) for r in rows)
        up = statistics.median(float(r["bytes-up"]) for r in rows)
        lines.append(
            f"| {name} | {summary['best_round']} | {100 * summary['test']['hr@10']:.2f} | "
            f"{100 * summary['test']['ndcg@10']:.2f} | {mb(down)} | {mb(up)} | {seconds:.0f} |"
        )
    plain_rows, secure_rows = runs["plain"][1], runs["secure aggregation"][1]
    gap = max(
        abs(float(a["val-hr@10"]) - float(b["val-hr@10"]))
        for a, b in zip(plain_rows, secure_rows, strict=True)
        if a["val-hr@10"] and b["val-hr@10"]
    )
    lines += [
        "",
        f"Largest difference of validation HR@10 between the two runs over the "
        f"{args.rounds} rounds: {gap:.6f} (the fixed point's step is "
        f"2^-{secagg.FRACTION_BITS} per user and coordinate). Bytes: the medians over rounds "
        "of the arrays of every train and evaluate message (the evaluate messages carry the "
        "full table in both runs).",
        "",
    ]
    per_peer = seconds_per_peer(length)
    one_user = sorted(len(request_of(prepared, config, u, 1)) for u in range(prepared.num_users))
    median_rows = one_user[len(one_user) // 2]
    everyone = participants(
        config.training.seed, 1, prepared.num_users, config.training.fraction_train
    )
    lines += [
        "**Cost of one node.** Its vector has "
        f"{length:,} entries of 8 bytes ({n} x {d} row sums, {n} counts, 3 totals): "
        f"{mb(8 * length)} MB up; it is sent the full table, {mb(4 * n * d)} MB, and "
        "40 bytes per participant. Masking it takes a median "
        f"{1e3 * per_peer:.2f} ms per peer (X25519 agreement, HKDF, the ChaCha20 stream and "
        "the addition; this 2-core machine, shared). In the faithful mode (one user per "
        f"node, {len(everyone)} participants in a round) a node masks towards "
        f"{len(everyone) - 1} peers, about {per_peer * (len(everyone) - 1):.1f} s a round, and "
        f"uploads {mb(8 * length)} MB, where without secure aggregation a median user "
        f"requests {median_rows} rows of round 1 and uploads them "
        f"({mb(median_rows * (4 * d + 16))} MB with ids and counts).",
        "",
    ]
    audited = sorted({1, max(args.rounds // 2, 1), args.rounds})
    lines += [
        "**What the server still sees** (the unmasked sum of a round): the sum over the "
        "round's participants of their tuned rows and of their shared-dense parameters, "
        "per row the number of participants that trained it, and the round's numbers of "
        "users and samples and its loss sum. Rows trained by one participant only are that "
        "participant's row, though the server cannot tell whose (the anonymity set is the "
        "round's participants):",
        "",
        "| round | participants | rows trained | rows trained by one participant | median "
        "trainers per trained row |",
        "|---|---|---|---|---|",
    ]
    for server_round in audited:
        counts = request_counts(prepared, config, server_round)
        trained = counts[counts > 0]
        users = participants(
            config.training.seed, server_round, prepared.num_users, config.training.fraction_train
        )
        lines.append(
            f"| {server_round} | {len(users)} | {len(trained)} | {int((trained == 1).sum())} "
            f"| {float(np.median(trained)):.0f} |"
        )
    command = " ".join(["python bench/secure_aggregation.py", *shown(sys.argv[1:])])
    lines += ["", f"Command: `{command}`", ""]
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")
    return 0


def shown(argv: list[str]) -> list[str]:
    """``argv`` with the value of ``--data-dir`` as DIR (a local path)."""
    return [
        "DIR" if before == "--data-dir" else a
        for before, a in zip(["", *argv[:-1]], argv, strict=True)
    ]


if __name__ == "__main__":
    raise SystemExit(main())
