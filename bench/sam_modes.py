"""SAM's two modes side by side: a preset run in-process with ``sam-mode = "joint"`` and
``"hierarchical"``, everything else equal.

By default FedRecGEL on Last.fm-2K under the paper protocol, seed 0, 20 rounds, with the
radii of the strict preset (``conf/fedrecgel-lastfm2k-strict.toml``). Prints, per mode, the
round with the best validation HR@10 and the test HR@10 / NDCG@10 there, and the last
round's test metrics::

    python bench/sam_modes.py --data-dir ../shared/datasets --rounds 20 --seed 0
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
import tomllib
from pathlib import Path

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.server_app import run_federation
from fedrec_lab.launch import PROJECT, merged_run_config
from fedrec_lab.local_grid import LocalGrid

MODES = ("joint", "hierarchical")


def strict_radii(preset: str) -> list[str]:
    """``sam-rho-*`` overrides from the preset's strict sibling (its tuned radii)."""
    strict = PROJECT / "conf" / f"{preset.rsplit('-', 1)[0]}-strict.toml"
    keys = tomllib.loads(strict.read_text())
    return [f"{key}={keys[key]}" for key in ("sam-rho-private", "sam-rho-shared")]


def summary(rounds_csv: Path) -> dict[str, float]:
    """Best validation HR@10 round and the test metrics there and at the last round."""
    with open(rounds_csv) as f:
        rows = [row for row in csv.DictReader(f) if row["val-hr@10"]]
    best = max(rows, key=lambda row: float(row["val-hr@10"]))  # first of equals
    last = rows[-1]
    return {
        "best round": int(best["round"]),
        "val HR@10": 100 * float(best["val-hr@10"]),
        "test HR@10": 100 * float(best["test-hr@10"]),
        "test NDCG@10": 100 * float(best["test-ndcg@10"]),
        "last test HR@10": 100 * float(last["test-hr@10"]),
        "last test NDCG@10": 100 * float(last["test-ndcg@10"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--preset", default="fedrecgel-lastfm2k-paper")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (shared CPUs)")
    parser.add_argument(
        "--preset-radii", action="store_true", help="keep the preset's radii (not the strict's)"
    )
    parser.add_argument("overrides", nargs="*", help="more key=value run-config overrides")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fedrec-sam-modes-"))
    radii = [] if args.preset_radii else strict_radii(args.preset)
    print(f"{args.preset}, seed {args.seed}, {args.rounds} rounds, {' '.join(radii)}")
    results = {}
    for mode in MODES:
        config = merged_run_config(
            PROJECT / "conf" / f"{args.preset}.toml",
            [
                *radii,
                *args.overrides,
                f"sam-mode='{mode}'",
                f"seed={args.seed}",
                f"num-server-rounds={args.rounds}",
                f"torch-threads={args.threads}",
                f"data-dir='{Path(args.data_dir).resolve()}'",
                f"results-dir='{work}'",
                f"run-name='{mode}'",
            ],
        )
        started = time.time()
        run_federation(LocalGrid(client_app, config, args.nodes), RunConfig.from_mapping(config))
        results[mode] = summary(work / mode / "rounds.csv")
        print(f"  {mode}: {time.time() - started:.0f} s", flush=True)
    columns = list(results[MODES[0]])
    print("| sam-mode | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for mode, values in results.items():
        cells = [f"{v}" if isinstance(v, int) else f"{v:.2f}" for v in values.values()]
        print(f"| {mode} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
