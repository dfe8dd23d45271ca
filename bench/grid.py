"""Grid search on validation HR@10, in-process (LocalGrid, 1 node), a few runs at a time.

Chooses hyperparameters on the **validation** metric only; the test metric is recorded
beside it but never used. Writes ``bench/results/tuning/<name>.md`` (one row per setting,
best first) and ``<name>.json``::

    python bench/grid.py --name fedncf-ml100k-paper --data-dir ../shared/datasets \\
        --base method=fedncf dataset=ml-100k protocol=paper num-server-rounds=30 \\
        --grid lr=0.5,2.0 item-lr=0.5,2.0 dense-lr=0.1,1.0 --jobs 2
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fedrec_lab.presets import resolve
from fedrec_lab.tuning import run_trial as run_one

PROJECT = Path(__file__).resolve().parents[1]


def parse_value(text: str):
    """A TOML literal, or a bare string."""
    try:
        return tomllib.loads(f"x = {text}")["x"]
    except tomllib.TOMLDecodeError:
        return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument(
        "--base", nargs="+", default=[], help="preset .toml files and key=value for every run"
    )
    parser.add_argument("--grid", nargs="+", required=True, help="key=v1,v2,...")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default=str(PROJECT / "bench" / "results" / "tuning"))
    args = parser.parse_args()

    base: dict = {}
    for item in args.base:  # a preset file, or key=value
        if item.endswith(".toml"):
            base.update(resolve(item))
        else:
            key, value = item.split("=", 1)
            base[key] = parse_value(value)
    base["data-dir"] = str(Path(args.data_dir).resolve())
    keys, values = [], []
    for item in args.grid:
        key, choices = item.split("=", 1)
        keys.append(key)
        values.append([parse_value(v) for v in choices.split(",")])
    settings = [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]
    with tempfile.TemporaryDirectory() as tmp:
        configs = [
            {**base, **s, "results-dir": tmp, "run-name": f"run{i}"} for i, s in enumerate(settings)
        ]
        with ThreadPoolExecutor(args.jobs) as pool:
            summaries = list(pool.map(run_one, configs))
    rows = sorted(
        zip(settings, summaries, strict=True),
        key=lambda pair: -pair[1].get("val", {}).get("hr@10", -1.0),
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base["data-dir"] = os.path.relpath(base["data-dir"], PROJECT)  # no machine paths
    (out / f"{args.name}.json").write_text(
        json.dumps(
            {
                "base": base,
                "grid": dict(zip(keys, values, strict=True)),
                "runs": [{"setting": s, "summary": r} for s, r in rows],
            },
            indent=1,
        )
    )
    lines = [
        f"# {args.name}",
        "",
        "Chosen on validation HR@10 (test shown, not used). Command:",
        "",
        "```",
        "python bench/grid.py " + " ".join(sys.argv[1:]),
        "```",
        "",
        "| " + " | ".join(keys) + " | best round | val HR@10 | val NDCG@10 | test HR@10 "
        "| last val HR@10 | diverged at |",
        "|" + "---|" * (len(keys) + 6),
    ]
    for setting, summary in rows:
        if "error" in summary or not summary.get("val"):
            lines.append("| " + " | ".join(str(setting[k]) for k in keys) + " | failed | | | | | |")
            continue
        val, test = summary["val"], summary["test"]
        lines.append(
            "| "
            + " | ".join(str(setting[k]) for k in keys)
            + f" | {summary['best_round']} | {100 * val['hr@10']:.2f} | "
            f"{100 * val['ndcg@10']:.2f} | {100 * test['hr@10']:.2f} "
            f"| {100 * summary.get('final_val', {}).get('hr@10', float('nan')):.2f} "
            f"| {summary.get('diverged_round') or '-'} |"
        )
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    for setting, summary in rows:
        if "error" in summary:
            print("FAILED", setting, summary["error"][-500:])


if __name__ == "__main__":
    main()
