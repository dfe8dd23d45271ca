"""Where a round's time goes on one in-process node: a phase table per case and sampler.

    python bench/profile_round.py --data-dir ../shared/datasets --rounds 5 \\
        --case big --case ml100k --sampler keyed-numpy --sampler counter

Runs the app in-process (LocalGrid, one node, no Ray) with timers around the node's phases:
negative sampling, building the round's rows, the batch plan, the training loop (tensor
kernels), the upload, the rest of the node's train handler (row look-ups, copies into
tensors), evaluation, and the ClientApp's message glue; what is left of a round is the
server's side (strategy, aggregation, records) and Flower's. Each phase's time excludes the
phases inside it; a round runs from its first message to the next round's. Wall and CPU
seconds (``time.process_time``: every thread) are both kept, and per round the kernel's
share of the CPU seconds and the minor page faults (``getrusage``; mostly first touches of
freshly allocated memory); ``torch-threads`` stays at its default of 1. With ``--ops``
one intermediate round also runs under ``torch.profiler`` (a separate run): its top
operators by self CPU time and the number of operators, a proxy for the kernel launches of
a CUDA round.

Cases: ``big`` (synthetic, 100,000 users x 20,000 items, mean degree 50, 10 % train per
round, 1,000 users evaluated on intermediate rounds, all on the last), ``ml20m`` (the
ML-20M shape: 138,493 users x 26,744 items, mean degree 144, the same fractions), ``ml1m``
(the ML-1M shape: 6,040 users x 3,706 items, mean degree 165, every user trained and
evaluated every round) and
``ml100k`` / ``ml100k-paper`` (PFedRec's strict and paper presets). Prints Markdown and
writes ``--out`` (JSON of every figure).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedrec_lab.scaling.phases import PhaseClock, instrument, kernel_usage

PROJECT = Path(__file__).resolve().parents[1]
CASES: dict[str, dict[str, Any]] = {
    "big": {
        "dataset": "synthetic",
        "synthetic-users": 100_000,
        "synthetic-items": 20_000,
        "synthetic-mean-degree": 50,
        "fraction-train": 0.1,
        "eval-users": 1000,
    },
    "ml20m": {
        "dataset": "synthetic",
        "synthetic-users": 138_493,
        "synthetic-items": 26_744,
        "synthetic-mean-degree": 144,
        "fraction-train": 0.1,
        "eval-users": 1000,
    },
    "ml1m": {
        "dataset": "synthetic",
        "synthetic-users": 6040,
        "synthetic-items": 3706,
        "synthetic-mean-degree": 165,
    },
    "ml100k": {"preset": "pfedrec-ml100k-strict"},
    "ml100k-paper": {"preset": "pfedrec-ml100k-paper"},
}
SERVER = "server + Flower (rest of the round)"


def run_case(config: dict[str, Any], clock: PhaseClock, on_round: Callable | None = None):
    """Run ``config`` in-process on one node, every message through the clock."""
    from fedrec_flwr.client_app import app as client_app
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.server_app import run_federation
    from fedrec_lab.local_grid import LocalGrid

    def timed_app(message, context):
        content = message.content
        if "config" in content:
            server_round = int(content["config"].get("server-round", 0))
            if on_round and server_round not in clock.round_starts:
                on_round(server_round)
            clock.enter_round(server_round)
        with clock.phase("client app: messages and state"):
            return client_app(message, context)

    grid = LocalGrid(timed_app, config, 1)
    run_federation(grid, RunConfig.from_mapping(config))
    clock.charge()
    return time.perf_counter(), time.process_time(), *kernel_usage()


def recorded(config: dict) -> dict:
    """The config as the results file keeps it: no machine paths (the scratch results folder
    dropped, the data folder relative to the project)."""
    kept = {k: v for k, v in config.items() if k != "results-dir"}
    if kept.get("data-dir"):
        kept["data-dir"] = os.path.relpath(kept["data-dir"], PROJECT)
    return kept


def case_config(case: str, sampler: str, rounds: int, data_dir: str | None, work: Path) -> dict:
    from fedrec_lab.presets import resolve

    spec = dict(CASES[case])
    config: dict[str, Any] = {}
    if "preset" in spec:
        config.update(resolve(PROJECT / "conf" / f"{spec.pop('preset')}.toml"))
    config.update(spec)
    if data_dir:
        config["data-dir"] = str(Path(data_dir).resolve())
    config.update(
        {
            "num-server-rounds": rounds,
            "run-name": f"{case}-{sampler}",
            "results-dir": str(work),
            "checkpoint-every": 0,
            "negative-sampler": sampler,
        }
    )
    return config


def round_table(clock: PhaseClock, end: tuple[float, ...]) -> dict[int, dict[str, Any]]:
    """Per round: wall and CPU seconds and each phase's, the server's as the remainder; the
    kernel's share of the CPU seconds and the minor page faults (``end``: the run's
    :func:`run_case` figures at its end)."""
    starts = sorted(clock.round_starts)
    rounds = {}
    for r, nxt in zip(starts, [*starts[1:], None], strict=True):
        stop = clock.round_starts[nxt] if nxt else end
        wall = stop[0] - clock.round_starts[r][0]
        cpu = stop[1] - clock.round_starts[r][1]
        phases_wall, phases_cpu = dict(clock.wall[r]), dict(clock.cpu[r])
        phases_wall[SERVER] = wall - sum(phases_wall.values())
        phases_cpu[SERVER] = cpu - sum(phases_cpu.values())
        usage = clock.round_usage[nxt] if nxt else end[2:]
        rounds[r] = {
            "wall": wall,
            "cpu": cpu,
            "system": usage[0] - clock.round_usage[r][0],
            "page_faults": usage[1] - clock.round_usage[r][1],
            "phases_wall": phases_wall,
            "phases_cpu": phases_cpu,
        }
    return rounds


def summary(rounds: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Medians over the intermediate rounds (not the first, a warm-up, nor the last, which
    evaluates every user), or over what there is."""
    ids = sorted(rounds)
    middle = ids[1:-1] or ids[1:] or ids
    phases = sorted({p for r in middle for p in rounds[r]["phases_wall"]})
    return {
        "rounds": middle,
        "wall": statistics.median(rounds[r]["wall"] for r in middle),
        "cpu": statistics.median(rounds[r]["cpu"] for r in middle),
        "system": statistics.median(rounds[r]["system"] for r in middle),
        "page_faults": statistics.median(rounds[r]["page_faults"] for r in middle),
        "phases_wall": {
            p: statistics.median(rounds[r]["phases_wall"].get(p, 0.0) for r in middle)
            for p in phases
        },
        "phases_cpu": {
            p: statistics.median(rounds[r]["phases_cpu"].get(p, 0.0) for r in middle)
            for p in phases
        },
        "last_round": {
            key: rounds[ids[-1]][key] for key in ("wall", "cpu", "system", "page_faults")
        },
    }


def run_profiling(
    config: dict[str, Any],
    profiled_round: int,
    start: Callable[[], Any],
    stop: Callable[[], Any],
) -> None:
    """One run of ``config`` with ``start`` called when round ``profiled_round`` begins and
    ``stop`` when the next one does (or at the end of the run)."""
    state = {"on": False}

    def on_round(server_round: int) -> None:
        if server_round == profiled_round and not state["on"]:
            start()
            state["on"] = True
        elif state["on"]:
            stop()
            state["on"] = False

    run_case(config, PhaseClock(), on_round)
    if state["on"]:
        stop()


def op_profile(config: dict[str, Any], profiled_round: int, top: int) -> dict[str, Any]:
    """One run with ``torch.profiler`` on round ``profiled_round``: operator counts and the
    top operators by self CPU time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if str(config.get("device", "cpu")).startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    profiler = profile(activities=activities)
    run_profiling(config, profiled_round, profiler.start, profiler.stop)
    events = profiler.key_averages()
    rows = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    busiest = sorted(kernels, key=lambda e: e.self_device_time_total, reverse=True)[:top]
    return {
        "round": profiled_round,
        "operators": sum(e.count for e in events if e.key.startswith("aten::")),
        "cuda_kernels": sum(e.count for e in kernels),
        "top": [
            {"op": e.key, "calls": e.count, "self_cpu_s": e.self_cpu_time_total / 1e6} for e in rows
        ],
        # the device's side: its busy seconds (kernels and copies) and the busiest kernels
        "device_s": sum(e.self_device_time_total for e in kernels) / 1e6,
        "top_device": [
            {"kernel": e.key, "calls": e.count, "device_s": e.self_device_time_total / 1e6}
            for e in busiest
        ],
    }


def python_profile(config: dict[str, Any], profiled_round: int, top: int) -> dict[str, Any]:
    """One run with ``cProfile`` on round ``profiled_round`` (the host's side of a round on
    an accelerator): the top functions by own time and by cumulative time."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    run_profiling(config, profiled_round, profiler.enable, profiler.disable)
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]

    def rows(column: int) -> list[dict[str, Any]]:
        ranked = sorted(stats.items(), key=lambda kv: kv[1][column], reverse=True)[:top]
        return [
            {
                "function": f"{Path(file).name}:{line} {name}",
                "calls": value[1],
                "own_s": value[2],
                "cumulative_s": value[3],
            }
            for (file, line, name), value in ranked
        ]

    return {"round": profiled_round, "by_own": rows(2), "by_cumulative": rows(3)}


def markdown(name: str, result: dict[str, Any]) -> str:
    s = result["summary"]
    load = (
        f" Load average meanwhile: {result['load_average']:.1f}."
        if "load_average" in result
        else ""
    )
    lines = [
        f"### {name}",
        "",
        f"Rounds {s['rounds']} (median): {s['wall']:.2f} s wall, {s['cpu']:.2f} CPU-s "
        f"({kernel(s)}); last round (evaluates every user): {s['last_round']['wall']:.2f} s "
        f"wall, {s['last_round']['cpu']:.2f} CPU-s ({kernel(s['last_round'])}).{load}",
        "",
        "| phase | wall s | share | CPU s | share |",
        "|---|---:|---:|---:|---:|",
    ]
    order = sorted(s["phases_wall"], key=lambda p: -s["phases_wall"][p])
    for p in order:
        w, c = s["phases_wall"][p], s["phases_cpu"][p]
        lines.append(f"| {p} | {w:.3f} | {w / s['wall']:.0%} | {c:.3f} | {c / s['cpu']:.0%} |")
    if "ops" in result:
        ops = result["ops"]
        lines += [
            "",
            f"torch.profiler, round {ops['round']}: {ops['operators']} aten operator calls, "
            f"{ops['cuda_kernels']} CUDA kernels.",
            "",
            "| operator | calls | self CPU s |",
            "|---|---:|---:|",
            *(f"| {t['op']} | {t['calls']} | {t['self_cpu_s']:.3f} |" for t in ops["top"]),
        ]
        if ops.get("top_device"):
            lines += [
                "",
                f"The device's side, round {ops['round']}: {ops['device_s']:.3f} s busy "
                "(kernels and copies, by the profiler's device times).",
                "",
                "| kernel | calls | device s |",
                "|---|---:|---:|",
                *(
                    f"| {t['kernel'][:90]} | {t['calls']} | {t['device_s']:.3f} |"
                    for t in ops["top_device"]
                ),
            ]
    if "python" in result:
        py = result["python"]
        lines += [
            "",
            f"cProfile, round {py['round']}, by own time:",
            "",
            "| function | calls | own s | cumulative s |",
            "|---|---:|---:|---:|",
            *(
                f"| {t['function']} | {t['calls']} | {t['own_s']:.3f} | {t['cumulative_s']:.3f} |"
                for t in py["by_own"]
            ),
        ]
    return "\n".join(lines) + "\n"


def kernel(figures: dict[str, Any]) -> str:
    """The kernel's part of a round's CPU seconds, in words (results without it: nothing)."""
    if "system" not in figures:
        return "kernel seconds not recorded"
    return (
        f"of which {figures['system']:.2f} in the kernel, "
        f"{figures['page_faults']:,.0f} minor page faults"
    )


def _value(text: str) -> Any:
    """A ``--set`` value: a number or boolean as such, anything else as text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--sampler", action="append", choices=["keyed-numpy", "counter"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data-dir", default=None, help="folder of the datasets")
    parser.add_argument("--set", action="append", default=[], help="run-config key=value")
    parser.add_argument("--ops", action="store_true", help="also one torch.profiler run")
    parser.add_argument("--top", type=int, default=12, help="operators listed by --ops")
    parser.add_argument(
        "--ops-round", type=int, default=None, help="the round --ops profiles (default 2)"
    )
    parser.add_argument(
        "--py", action="store_true", help="also one cProfile run of the --ops-round round"
    )
    parser.add_argument("--out", default=None, help="JSON of every figure")
    args = parser.parse_args()
    extra = {key: _value(text) for key, text in (item.split("=", 1) for item in args.set)}
    results: dict[str, Any] = {}
    clock = PhaseClock()
    instrument(clock)
    for case in args.case or ["ml100k"]:
        for sampler in args.sampler or ["keyed-numpy"]:
            work = Path(tempfile.mkdtemp(prefix="fedrec-profile-"))
            try:
                config = {**case_config(case, sampler, args.rounds, args.data_dir, work), **extra}
                clock.reset()
                load_before = os.getloadavg()[0]
                end = run_case(config, clock)
                load = round((load_before + os.getloadavg()[0]) / 2, 2)  # the machine's
                rounds = round_table(clock, end)
                result = {"config": recorded(config), "rounds": rounds, "summary": summary(rounds)}
                result["load_average"] = load
                profiled = min(2, args.rounds) if args.ops_round is None else args.ops_round
                if args.ops:
                    result["ops"] = op_profile(config, profiled, args.top)
                if args.py:
                    result["python"] = python_profile(config, profiled, args.top)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            name = f"{case}, negative-sampler = {sampler}"
            results[name] = result
            print(markdown(name, result), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
