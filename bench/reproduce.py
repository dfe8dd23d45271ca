"""Reproduction table: methods x datasets x protocols x seeds through ``flwr run``.

Each cell is one ``flwr run`` of a preset (private SuperLink, ``--nodes`` SuperNodes); the
table reports test metrics at the best validation round, mean ± std over the seeds, with
seconds per round. Results land in ``<out>/runs/`` and the table in ``<out>/table.md``::

    python bench/reproduce.py --data-dir ../shared/datasets --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from fedrec_flwr.baselines import popularity
from fedrec_flwr.config import RunConfig
from fedrec_flwr.launch import PROJECT, merged_run_config, run

PAPER = {  # PFedRec paper, Table 2 (HR@10 / NDCG@10 in %, mean of 5 runs)
    ("pfedrec", "ml-100k"): (71.62, 43.44),
    ("pfedrec", "lastfm-2k"): (82.38, 73.19),
    ("fedmf", "ml-100k"): (65.15, 39.38),
    ("fedmf", "lastfm-2k"): (81.64, 69.36),
}
SHORT = {"ml-100k": "ml100k", "lastfm-2k": "lastfm2k"}


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
    args = parser.parse_args()
    out = Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)

    rows = []
    for protocol in args.protocols:
        for dataset in args.datasets:
            for method in args.methods:
                summaries = []
                for seed in args.seeds:
                    name = f"{method}-{SHORT[dataset]}-{protocol}-seed{seed}"
                    summary_file = out / "runs" / name / "summary.json"
                    if not summary_file.exists():
                        overrides = [
                            f"seed={seed}",
                            f"data-dir='{Path(args.data_dir).resolve()}'",
                            f"results-dir='{(out / 'runs').resolve()}'",
                            f"run-name='{name}'",
                        ]
                        if args.rounds:
                            overrides.append(f"num-server-rounds={args.rounds}")
                        preset = PROJECT / "conf" / f"{method}-{SHORT[dataset]}-{protocol}.toml"
                        started = time.time()
                        status, _ = run(
                            merged_run_config(preset, overrides), nodes=args.nodes, stream=False
                        )
                        print(f"{name}: {status} in {time.time() - started:.0f} s", flush=True)
                        if status != "finished:completed":
                            raise SystemExit(f"{name} failed: {status}")
                    summaries.append(json.loads(summary_file.read_text()))
                rows.append((protocol, dataset, method, summaries))
            floors = [
                {
                    "test": popularity(
                        RunConfig(
                            dataset=dataset,
                            protocol=protocol,
                            seed=seed,
                            data_dir=str(Path(args.data_dir).resolve()),
                        )
                    )["test"],
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
        f"\n\nSeeds {seeds}; {args.nodes} SuperNodes; test metrics (%) at the round with the "
        "best validation HR@10; mean ± std over seeds. s/round: median over the seeds, "
        "measured while other jobs shared the 2 cores (see speed-*.md for clean timings).\n"
    )
    (out / "table.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
