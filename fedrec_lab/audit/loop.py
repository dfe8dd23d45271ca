"""The federation's round loop without Flower (one node holding every user): what the
strategy does with round-mean aggregation, for the audit where Flower is not installed.

Every draw is keyed by (seed, user, round) and a packed node uploads the exact sum of its
users' uploads, so this loop gives the metrics of a Flower run of the same configuration
(``tests/test_privacy_loop.py`` holds them equal); it supports what the audit runs: all
users every round, no early stopping, no checkpoints, every user evaluated.
"""

from __future__ import annotations

import numpy as np

from fedrec_flwr.aggregation import RowUpload, dense_changes, row_changes
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import PreparedData
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.partition import participants
from fedrec_flwr.privacy.denoise import denoised
from fedrec_flwr.seeding import keyed_rng
from fedrec_flwr.server.optimizer import ServerOptimizer


def initial_table(config: RunConfig, num_items: int, row_dim: int) -> np.ndarray:
    """The global item table of round 1 (as :func:`fedrec_flwr.server_app.initial_item_table`)."""
    rng = keyed_rng(config.seed, "item-init")
    return rng.normal(0.0, config.init_std, size=(num_items, row_dim)).astype(np.float32)


def run_plain(config: RunConfig, prepared: PreparedData) -> dict:
    """Run the configured federation; return ``best_round``, its ``val`` and ``test``
    metrics (best validation HR@10, earliest on ties) and every evaluated round's means."""
    if config.early_stopping_patience or getattr(config, "eval_users", 0):
        raise ValueError("the plain loop runs without early stopping and evaluates every user")
    runtime = NodeRuntime(config, prepared, 0, 1)
    method = runtime.method
    state = runtime.initial_state()
    table = initial_table(config, prepared.num_items, method.row_dim)
    dense = {n: v for n, v in method.init_dense().items() if n in method.shared_dense_names()}
    optimizer = ServerOptimizer(config.server_optimizer, config.server_lr, config.server_momentum)
    history = []
    for server_round in range(1, config.num_server_rounds + 1):
        users = participants(config.seed, server_round, prepared.num_users, config.fraction_train)
        runtime.train_request(server_round)
        result, state = runtime.train(state, server_round, users, None, table, dense)
        upload = RowUpload(
            result.item_ids,
            result.row_sums,
            result.row_counts,
            result.num_users,
            result.dense_sums,
            result.zero_ids,
            result.zero_counts,
        )
        start = table
        touched, delta = row_changes(table, [upload], config.aggregation)
        if config.ldp_denoise:
            delta = denoised(touched, delta, [upload], config, prepared.num_items)
        table = optimizer.update_rows(table, touched, delta)
        if method.zero_threshold is not None:
            table[np.abs(table).max(axis=1, initial=0.0) <= method.zero_threshold] = 0.0
        dense = {
            name: optimizer.update_dense(name, dense[name], change)
            for name, change in dense_changes(dense, [upload]).items()
        }
        last = server_round == config.num_server_rounds
        if server_round % config.eval_every and not last:
            continue
        base = start if method.eval_table == "round-start" else table
        sums = runtime.evaluate(state, None, base, dense)
        users_evaluated = sums.pop("num-users")
        means = {k: v / users_evaluated for k, v in sums.items() if k.startswith(("val", "test"))}
        history.append({"round": server_round, **means})
    best = max(history, key=lambda row: (row["val-hr@10"], -row["round"]))
    split = {
        s: {k[len(s) + 1 :]: v for k, v in best.items() if k.startswith(s)} for s in ("val", "test")
    }
    return {"best_round": best["round"], **split, "history": history}
