"""What the Gaussian mechanism leaves of the summed co-occurrences: for each user-level
epsilon and degree bound, the noise's standard deviation ``sigma`` on each released entry,
and how many eigenvalues of the exact (noiseless) sums stand above ``sigma sqrt(m)`` over
``m`` items, the level below which a direction of a symmetric matrix is lost in a Gaussian
(Wigner) noise matrix's spectrum (the BBP transition: Baik, Ben Arous and Péché, 2005;
for Wigner matrices, Féral and Péché, 2007). The sums are those of a federated run's round
1 (every user's upload, weighted as ``itemitem-degree-bound`` says), read through the
method's own server code without the noise: a diagnosis of the mechanism, not a release.

    python bench/itemitem_spectrum.py --data-dir DIR --dataset ml-100k \\
        --epsilons 8 32 128 512 2048 --degrees 10 25 50 100 --bound scale \\
        --write bench/results/itemitem-grid/dp-spectrum-ml100k

Writes ``<write>.json`` and ``<write>.md``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.methods import build_method
from fedrec_flwr.privacy.sum_noise import SumNoise
from fedrec_flwr.server.statistics import StatisticsModel, StatisticsUpload


def exact_gram(mapping: dict) -> np.ndarray:
    """The round-1 sums of every user's upload under ``mapping`` (no noise)."""
    config = RunConfig.from_mapping(mapping)
    prepared = prepare(config)
    method = build_method(config, prepared.num_items)
    baskets = [method.uploaded_items(prepared, u) for u in range(prepared.num_users)]
    model = StatisticsModel(config, method, prepared.num_items)
    model.start_round()
    offsets = np.r_[0, np.cumsum([len(b) for b in baskets])].astype(np.int64)
    model.apply([StatisticsUpload(prepared.num_users, np.concatenate(baskets), offsets)])
    return model.gram


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--epsilons", nargs="+", type=float, required=True)
    parser.add_argument("--degrees", nargs="+", type=int, required=True)
    parser.add_argument("--bound", default="scale", choices=["sample", "scale"])
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--write", required=True)
    args = parser.parse_args()
    cells = []
    for degree in args.degrees:
        base = {
            "method": "itemitem",
            "dataset": args.dataset,
            "protocol": "strict",
            "data-dir": args.data_dir,
            "itemitem-model": "ease",
            "itemitem-max-degree": degree,
            "itemitem-degree-bound": args.bound,
        }
        eigenvalues = np.linalg.eigvalsh(exact_gram(base))[::-1]
        size = len(eigenvalues)
        for epsilon in args.epsilons:
            mapping = {**base, "itemitem-dp-epsilon": epsilon, "itemitem-dp-delta": args.delta}
            noise = SumNoise.of(RunConfig.from_mapping(mapping))
            assert noise is not None
            level = noise.gram_std * math.sqrt(size)
            cells.append(
                {
                    "epsilon": epsilon,
                    "max-degree": degree,
                    "sigma": noise.gram_std,
                    "detectable-level": level,
                    "above": int((eigenvalues > level).sum()),
                    "top": [float(v) for v in eigenvalues[:3]],
                }
            )
            print(json.dumps(cells[-1]), flush=True)
    command = (
        f"python bench/itemitem_spectrum.py --data-dir DIR --dataset {args.dataset} "
        f"--epsilons {' '.join(f'{e:g}' for e in args.epsilons)} "
        f"--degrees {' '.join(map(str, args.degrees))} --bound {args.bound}"
        + (f" --delta {args.delta:g}" if args.delta != 1e-5 else "")
        + f" --write {args.write}"
    )
    out = Path(args.write)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"command": command, "cells": cells}, indent=2))
    lines = [
        f"# What the noise leaves of the sums: {args.dataset}, itemitem-degree-bound = "
        f"{args.bound}, {size} items",
        "",
        f"```bash\n{command}\n```",
        "",
        "| epsilon | itemitem-max-degree | noise std | sigma sqrt(m) | eigenvalues above it |",
        "|---|---|---|---|---|",
    ]
    for cell in cells:
        lines.append(
            f"| {cell['epsilon']:g} | {cell['max-degree']} | {cell['sigma']:.3g} | "
            f"{cell['detectable-level']:.4g} | {cell['above']} |"
        )
    lines += [
        "",
        f"User-level epsilon at delta {args.delta:g}; the eigenvalues are those of the exact "
        "sums (every user's round-1 upload, no noise): a direction below sigma sqrt(m) is lost "
        "in the noise's spectrum whatever the post-processing.",
        "",
    ]
    out.with_suffix(".md").write_text("\n".join(lines))
    print(f"wrote {out}.md")


if __name__ == "__main__":
    main()
