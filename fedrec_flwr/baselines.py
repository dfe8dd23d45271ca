"""Reference floors, computed centrally: not federated methods.

``popularity``: every user gets the items ranked by their number of train rows over all
users. It is the floor any recommender must beat under the same protocol. It is scored by
the same evaluation code as the methods: a one-dimensional item table holding the counts
and a user vector of 1 is exactly a dot-product model.

    python -m fedrec_flwr.baselines --dataset ml-100k --protocol strict --data-dir DIR
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.node import NodeRuntime, NodeState
from fedrec_flwr.personal import PersonalRows


def popularity(config: RunConfig) -> dict[str, dict[str, float]]:
    """Validation and test metrics of popularity ranking under ``config.protocol``."""
    prepared = prepare(config)
    counts = np.bincount(prepared.train_items, minlength=prepared.num_items)
    table = counts.astype(np.float32)[:, None]
    runtime = NodeRuntime(config.replace(method="fedmf", embedding_dim=1), prepared, 0, 1)
    state = NodeState(
        private={"user-embedding": torch.ones(len(runtime.users), 1)},
        personal=PersonalRows.empty(len(runtime.users), 1),
    )
    sums = runtime.evaluate(state, None, table)
    users = sums.pop("num-users")
    return {
        split: {
            name.split("-", 1)[1]: value / users
            for name, value in sums.items()
            if name.startswith(split)
        }
        for split in ("val", "test")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Popularity floor of a dataset and protocol.")
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--protocol", default="strict")
    parser.add_argument("--data-dir", default="")
    parser.add_argument("--seed", type=int, default=0, help="seed of the paper negatives")
    args = parser.parse_args()
    config = RunConfig(
        dataset=args.dataset, protocol=args.protocol, data_dir=args.data_dir, seed=args.seed
    )
    print(json.dumps(popularity(config), indent=2))


if __name__ == "__main__":
    main()
