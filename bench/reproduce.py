"""Reproduction table: presets x datasets x protocols x seeds through ``flwr run``.

The experiments' tables have their own command, ``python -m fedrec_lab.experiments <table>``
(docs/experiments.md); this script is the free-form grid (any presets, ``--set`` ablations).

Each cell is one run of a preset ``conf/<preset>-<dataset>-<protocol>.toml`` (``--methods``
takes preset prefixes: ``pfedrec``, ``fedmf-dual``, ``pfedrec-sam``...): by default through
``flwr run`` (private SuperLink, ``--nodes`` SuperNodes); with ``--inprocess`` through the same
ServerApp and ClientApp on an in-process grid of ``--nodes`` nodes (identical metrics, since
results do not depend on the packing; no Ray start-up), ``--jobs`` runs at a time. The table
reports test metrics at the best validation round, mean ± std over the seeds, with seconds
per round. Results land in ``<out>/runs/`` and the table in ``<out>/<table>.md``::

    python bench/reproduce.py --data-dir ../shared/datasets --seeds 0 1 2
    python bench/reproduce.py --data-dir ../shared/datasets --methods fedncf fedrecon \
        --inprocess --jobs 2 --table table-methods --no-floor

An ablation is a preset with ``--set`` overrides under a ``--tag``: its runs are named
``<preset>+<tag>-<dataset>-<protocol>-seed<s>``::

    python bench/reproduce.py --data-dir ../shared/datasets --methods pfedrec-plgc \
        --set plgc-alpha=0.5 --tag alpha0.5 --inprocess --jobs 2 --no-floor
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fedrec_flwr.config import RunConfig
from fedrec_lab.baselines import popularity
from fedrec_lab.experiments.cells import SHORT, run_federated, scrub_paths
from fedrec_lab.experiments.command import parse_override
from fedrec_lab.experiments.tables import PAPER
from fedrec_lab.launch import PROJECT, merged_run_config, run
from fedrec_lab.presets import resolve

__all__ = ["PAPER", "main"]  # bench/collect.py reads PAPER from here


def run_inprocess(preset: Path, overrides: dict, nodes: int) -> str:
    """One run on the in-process grid, in a fresh process; returns a status like flwr's."""
    run_config = {**resolve(preset), **overrides}
    return run_federated(run_config, nodes, use_flwr=False)


def cell(values: list[float]) -> str:
    """'mean ± std' in percent."""
    mean = 100 * statistics.mean(values)
    std = 100 * statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.2f} ± {std:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--methods", nargs="+", default=["pfedrec", "fedmf"])
    parser.add_argument("--datasets", nargs="+", default=["ml-100k", "lastfm-2k"])
    parser.add_argument("--protocols", nargs="+", default=["paper", "strict"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=None, help="override num-server-rounds")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--out", default=str(PROJECT / "bench" / "results"))
    parser.add_argument("--inprocess", action="store_true", help="in-process grid, no Ray")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (--inprocess)")
    parser.add_argument("--table", default="table", help="name of the markdown table file")
    parser.add_argument("--no-floor", action="store_true", help="leave out popularity rows")
    parser.add_argument(
        "--set", nargs="+", default=[], metavar="KEY=VALUE", help="override preset keys"
    )
    parser.add_argument("--tag", default="", help="name suffix of the runs made with --set")
    args = parser.parse_args()
    if args.set and not args.tag:
        parser.error("--set changes the runs: name them with --tag (e.g. --tag alpha0.5)")
    extra = dict(parse_override(pair) for pair in args.set)
    suffix = f"+{args.tag}" if args.tag else ""
    out = Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)

    def run_cell(cell: tuple[str, str, str, int]) -> None:
        protocol, dataset, method, seed = cell
        name = f"{method}{suffix}-{SHORT[dataset]}-{protocol}-seed{seed}"
        if (out / "runs" / name / "summary.json").exists():
            return
        overrides = {
            **extra,
            "seed": seed,
            "data-dir": str(Path(args.data_dir).resolve()),
            "results-dir": str((out / "runs").resolve()),
            "run-name": name,
        }
        if args.rounds:
            overrides["num-server-rounds"] = args.rounds
        preset = PROJECT / "conf" / f"{method}-{SHORT[dataset]}-{protocol}.toml"
        started = time.time()
        if args.inprocess:
            status = run_inprocess(preset, overrides, args.nodes)
        else:
            pairs = [f"{k}={json.dumps(v)}" for k, v in overrides.items()]
            status, _ = run(merged_run_config(preset, pairs), nodes=args.nodes, stream=False)
        scrub_paths(out / "runs", only=(name,))  # no path of this machine in the results
        print(f"{name}: {status} in {time.time() - started:.0f} s", flush=True)
        if status != "finished:completed":
            raise SystemExit(f"{name} failed: {status}")

    cells = [
        (protocol, dataset, method, seed)
        for protocol in args.protocols
        for dataset in args.datasets
        for method in args.methods
        for seed in args.seeds
    ]
    with ThreadPoolExecutor(args.jobs if args.inprocess else 1) as pool:
        list(pool.map(run_cell, cells))

    rows = []
    for protocol in args.protocols:
        for dataset in args.datasets:
            for method in args.methods:
                summaries = [
                    json.loads(
                        (
                            out
                            / "runs"
                            / f"{method}{suffix}-{SHORT[dataset]}-{protocol}-seed{seed}"
                            / "summary.json"
                        ).read_text()
                    )
                    for seed in args.seeds
                ]
                rows.append((protocol, dataset, method + suffix, summaries))
            if args.no_floor:
                continue
            floors = [
                {
                    "test": popularity(
                        RunConfig.from_fields(
                            dataset=dataset,
                            protocol=protocol,
                            seed=seed,
                            data_dir=str(Path(args.data_dir).resolve()),
                        )
                    )[0]["test"],
                    "best_round": "-",
                    "seconds_per_round": 0.0,
                }
                for seed in args.seeds
            ]
            rows.append((protocol, dataset, "popularity (central floor)", floors))

    lines = [
        "| protocol | dataset | method | test HR@10 | test NDCG@10 | paper (HR / NDCG) "
        "| best rounds | s/round |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for protocol, dataset, method, summaries in rows:
        paper = PAPER.get((method, dataset)) if protocol == "paper" else None
        federated = summaries[0]["best_round"] != "-"
        best_rounds = ", ".join(str(s["best_round"]) for s in summaries) if federated else "-"
        speed = statistics.median(s["seconds_per_round"] for s in summaries)
        lines.append(
            f"| {protocol} | {dataset} | {method} "
            f"| {cell([s['test']['hr@10'] for s in summaries])} "
            f"| {cell([s['test']['ndcg@10'] for s in summaries])} "
            f"| {f'{paper[0]} / {paper[1]}' if paper else '-'} "
            f"| {best_rounds} | {f'{speed:.2f}' if federated else '-'} |"
        )
    strict_metrics = ("hr@10", "ndcg@10", "recall@20", "ndcg@20", "mrr")
    lines += [
        "",
        "Strict protocol, all metrics (test, %, mean ± std over seeds):",
        "",
        "| dataset | method | " + " | ".join(strict_metrics) + " |",
        "|---|---|" + "---|" * len(strict_metrics),
    ]
    for protocol, dataset, method, summaries in rows:
        if protocol == "strict":
            values = [cell([s["test"][m] for s in summaries]) for m in strict_metrics]
            lines.append(f"| {dataset} | {method} | " + " | ".join(values) + " |")
    seeds = ", ".join(map(str, args.seeds))
    table = "\n".join(lines) + (
        f"\n\nSeeds {seeds}; {args.nodes} "
        + ("nodes on the in-process grid" if args.inprocess else "SuperNodes (flwr run)")
        + "; test metrics (%) at the round with the "
        "best validation HR@10; mean ± std over seeds. s/round: median over the seeds, "
        "measured while other jobs shared the 2 cores (see speed-*.md for clean timings).\n"
    )
    (out / f"{args.table}.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
