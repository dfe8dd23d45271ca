"""Operators dispatched per round, CPU seconds per round and peak memory, by number of users.

    python bench/launch_counts.py --users 1000 10000 100000 --rounds 3 \\
        --out bench/results/profile/launch-counts

One node holds every user of the synthetic dataset (20,000 items, mean degree 50); a round
is the node's work for ``fraction-train`` 10 %: the request of the round's rows (the draws),
training the round's users from a global table, the personal-row store's update, and the
evaluation of the round's ``eval-users`` sample (1,000 users, full ranking under strict).
Each case runs in a process of its own (fresh memory): rounds ``1 .. --rounds`` timed
(``time.process_time``: CPU seconds of every thread; wall seconds beside them), then one
more round under ``torch.profiler``, whose aten operator calls are counted (on CPU every
aten call is a dispatch, on CUDA most are a kernel launch). ``old``: the default
``negative-sampler = "keyed-numpy"`` (a NumPy generator per user, the batch plan built user
by user); ``new``: ``negative-sampler = "counter"`` (every draw and the plan in tensor ops).
Peak RSS: the case process's ``ru_maxrss``. Writes ``--out``.json and ``--out``.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
PATHS = {"old": "keyed-numpy", "new": "counter"}
DATA = {"synthetic-items": 20_000, "synthetic-mean-degree": 50}
FRACTION, EVAL_USERS, SEED = 0.1, 1000, 0


def case(users: int, sampler: str, rounds: int) -> dict:
    """One case, in this process: its figures."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.data.prepared import prepare
    from fedrec_flwr.node import training
    from fedrec_flwr.node.runtime import NodeRuntime

    config = RunConfig.from_mapping(
        {
            "method": "pfedrec",
            "dataset": "synthetic",
            "protocol": "strict",
            "synthetic-users": users,
            **DATA,
            "fraction-train": FRACTION,
            "eval-users": EVAL_USERS,
            "negative-sampler": sampler,
            "num-server-rounds": rounds + 1,
            "seed": SEED,
            "torch-threads": 1,
        }
    )
    torch.set_num_threads(1)
    from fedrec_lab.scaling.phases import PhaseClock, instrument

    clock = PhaseClock()
    instrument(clock)  # exclusive CPU seconds by phase
    prepared = prepare(config)
    node = NodeRuntime(config, prepared, 0, 1)
    state = node.initial_state()
    generator = torch.Generator().manual_seed(SEED)
    table = torch.randn(prepared.num_items, node.method.row_dim, generator=generator).numpy()
    steps = Counter()
    plan = training.epoch_steps

    def counted(*args, **kwargs):
        out = plan(*args, **kwargs)
        steps[args[2]] += len(out)  # by round
        return out

    training.epoch_steps = counted

    def one_round(server_round: int, profiler=None) -> int:
        nonlocal state
        node.train_request(server_round)
        users_of_round = node.selected(server_round)
        _, state = node.train(state, server_round, users_of_round, None, table)
        if profiler is not None:  # the evaluation's operators apart from the training's
            profiler.step()
        node.evaluate(state, None, table, None, node.eval_positions(server_round, EVAL_USERS))
        return len(users_of_round)

    timed = []
    for server_round in range(1, rounds + 1):
        clock.enter_round(server_round)
        cpu, wall = time.process_time(), time.perf_counter()
        trained = one_round(server_round)
        timed.append(
            {
                "round": server_round,
                "users": trained,
                "cpu_s": time.process_time() - cpu,
                "wall_s": time.perf_counter() - wall,
                "steps": steps[server_round],
            }
        )
    clock.enter_round(rounds + 1)
    phases = (
        {
            name: statistics.median(clock.cpu[r].get(name, 0.0) for r in range(2, rounds + 1))
            for name in sorted({n for r in range(1, rounds + 1) for n in clock.cpu[r]})
        }
        if rounds > 1
        else dict(clock.cpu[1])
    )
    profiled = rounds + 1
    counts: list[Counter] = []

    def on_trace(finished) -> None:
        events = finished.key_averages()
        counts.append(Counter({e.key: e.count for e in events if e.key.startswith("aten::")}))

    schedule = torch.profiler.schedule(wait=0, warmup=0, active=1, repeat=2)
    with profile(
        activities=[ProfilerActivity.CPU], schedule=schedule, on_trace_ready=on_trace
    ) as profiler:
        one_round(profiled, profiler)
        profiler.step()
    train_ops, eval_ops = counts
    aten = train_ops + eval_ops
    later = timed[1:] or timed
    return {
        "users": users,
        "negative_sampler": sampler,
        "rounds": timed,
        "cpu_s_per_round": statistics.median(r["cpu_s"] for r in later),
        "wall_s_per_round": statistics.median(r["wall_s"] for r in later),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "phases_cpu_s": phases,
        "profiled_round": profiled,
        "profiled_steps": steps[profiled],
        "aten_ops": sum(aten.values()),
        "train_ops": sum(train_ops.values()),
        "eval_ops": sum(eval_ops.values()),
        "top_ops": dict(Counter(aten).most_common(12)),
    }


def run_child(users: int, path: str, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "case.json"
        command = [sys.executable, __file__, "--child", str(users), PATHS[path], str(rounds), out]
        env = {**os.environ, "PYTHONPATH": str(PROJECT)}
        subprocess.run([str(c) for c in command], check=True, cwd=PROJECT, env=env)
        return {"path": path, **json.loads(out.read_text())}


def markdown(result: dict) -> str:
    cases = result["cases"]
    lines = [
        "# Operators per round, CPU seconds and memory by number of users",
        "",
        "```",
        result["command"],
        "```",
        "",
        f"Machine: {result['machine']}; load average {result['load_before']} before, "
        f"{result['load_after']} after. One node, PFedRec strict, synthetic data "
        f"({DATA['synthetic-items']:,} items, mean degree {DATA['synthetic-mean-degree']}), "
        f"{FRACTION:.0%} of the users per round, {EVAL_USERS:,} evaluated per round; one "
        "torch thread. CPU and wall seconds: median over the timed rounds after the first. "
        "aten operators: one further round under torch.profiler. Steps: the lockstep "
        "steps of that round (one per batch index of its user with most batches; a step "
        "dispatches the same operators whatever the number of users in it).",
        "",
        "| path | users | users per round | aten ops per round | of which training | steps "
        "| training ops per step | evaluation | CPU s per round | wall s per round "
        "| peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cases:
        trained = c["rounds"][-1]["users"]
        per_step = c["train_ops"] / max(c["profiled_steps"], 1)
        lines.append(
            f"| {c['path']} ({c['negative_sampler']}) | {c['users']:,} | {trained:,} | "
            f"{c['aten_ops']:,} | {c['train_ops']:,} | {c['profiled_steps']} | {per_step:.1f} | "
            f"{c['eval_ops']:,} | "
            f"{c['cpu_s_per_round']:.2f} | {c['wall_s_per_round']:.2f} | {c['peak_rss_mb']:.0f} |"
        )
    largest = max(c["users"] for c in cases)
    big = [c for c in cases if c["users"] == largest]
    names = sorted(
        {n for c in big for n in c["phases_cpu_s"]}, key=lambda n: -big[0]["phases_cpu_s"].get(n, 0)
    )
    lines += [
        "",
        f"Where the CPU seconds of a round go at {largest:,} users (median, exclusive; "
        "node train: the rest of the node's train handler):",
        "",
        "| phase | " + " | ".join(f"{c['path']} CPU s" for c in big) + " |",
        "|---|" + "---:|" * len(big),
    ]
    for name in names:
        values = " | ".join(f"{c['phases_cpu_s'].get(name, 0.0):.2f}" for c in big)
        lines.append(f"| {name} | {values} |")
    lines += ["", "Ratios, old / new, at each number of users:", ""]
    lines += ["| users | aten ops | CPU s per round | peak RSS |", "|---:|---:|---:|---:|"]
    by = {(c["path"], c["users"]): c for c in cases}
    for users in sorted({c["users"] for c in cases}):
        old, new = by.get(("old", users)), by.get(("new", users))
        if old and new:
            lines.append(
                f"| {users:,} | {old['aten_ops'] / new['aten_ops']:.2f} | "
                f"{old['cpu_s_per_round'] / new['cpu_s_per_round']:.2f} | "
                f"{old['peak_rss_mb'] / new['peak_rss_mb']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        users, sampler, rounds, out = sys.argv[2:6]
        Path(out).write_text(json.dumps(case(int(users), sampler, int(rounds))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--paths", nargs="+", choices=sorted(PATHS), default=["old", "new"])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds")
    parser.add_argument("--out", default=None, help="writes OUT.json and OUT.md")
    args = parser.parse_args()
    load_before = round(os.getloadavg()[0], 1)
    cases = [run_child(u, p, args.rounds) for u in args.users for p in args.paths]
    command = (
        f"python bench/launch_counts.py --users {' '.join(map(str, args.users))} "
        f"--paths {' '.join(args.paths)} --rounds {args.rounds}"
        + (f" --out {os.path.relpath(args.out, PROJECT)}" if args.out else "")
    )
    result = {
        "command": command,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "load_before": load_before,
        "load_after": round(os.getloadavg()[0], 1),
        "cases": cases,
    }
    text = markdown(result)
    print(text)
    if args.out:
        Path(args.out + ".json").write_text(json.dumps(result, indent=1))
        Path(args.out + ".md").write_text(text)


if __name__ == "__main__":
    main()
