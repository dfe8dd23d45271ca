"""Scoring a reference model through the methods' own evaluation code.

A model's user x item score matrix ``S`` is a dot-product model: node ``p`` holds users
``u = p mod N``, scored :data:`SCORED_AT_ONCE` at a time: each user vector is a one-hot
vector of the block's users and the item table is ``S[block users].T``, so the logits are
``S`` bit for bit, and every row goes through :meth:`NodeRuntime.evaluate_users`, under
exactly the protocol the federated methods get. A node's sums are those of its users'
values, as the node sums them. The blocks are narrow because the exact ranking rescores the
items whose score ties with a held-out item's (most items of a sparse catalogue, whose
scores are mostly zero) as dot products as wide as the user vectors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import PreparedData, prepare
from fedrec_flwr.node.personal import PersonalRows
from fedrec_flwr.node.runtime import NodeRuntime, NodeState
from fedrec_flwr.partition import users_of_partition
from fedrec_flwr.results import write_per_user_csv

USERS_PER_NODE = 128  # users of one NodeRuntime, whose metric sums are added up at once
SCORED_AT_ONCE = 8  # users of one evaluation call: the one-hot vectors are this wide

Metrics = dict[str, dict[str, float]]
Scorer = Callable[[np.ndarray], np.ndarray]  # users -> [len(users), num_items] scores


@dataclass(frozen=True)
class PerUser:
    """Each evaluated user's metrics, as a federated run's ``per-user.csv`` holds them:
    ``values[i]`` are user ``users[i]``'s ``names`` (the ``val-*`` metrics, then ``test-*``)."""

    users: np.ndarray  # int64 [n]
    names: tuple[str, ...]
    values: np.ndarray  # float64 [n, len(names)]

    @classmethod
    def read(cls, folder: Path) -> PerUser:
        """From ``<folder>/per-user.csv``."""
        from fedrec_lab.stats import read_per_user

        users, columns = read_per_user(folder)
        names = tuple(columns)
        return cls(np.asarray(users), names, np.stack([columns[n] for n in names], axis=1))

    def write(self, folder: Path) -> None:
        """``<folder>/per-user.csv``, as a federated run writes it."""
        write_per_user_csv(folder, self.users, self.names, self.values)


def evaluate_scores(config: RunConfig, prepared: PreparedData, scores_of: Scorer) -> Metrics:
    """Validation and test metrics (means over users) of the score matrix ``scores_of``
    gives, through the methods' evaluation code (:meth:`NodeRuntime.evaluate`)."""
    return evaluate_scores_per_user(config, prepared, scores_of)[0]


def evaluate_scores_per_user(
    config: RunConfig, prepared: PreparedData, scores_of: Scorer
) -> tuple[Metrics, PerUser]:
    """:func:`evaluate_scores`'s means and each user's values."""
    num_nodes = max(1, math.ceil(prepared.num_users / USERS_PER_NODE))
    totals: dict[str, float] = {}
    users_seen, values_seen = [], []
    names: tuple[str, ...] = ()
    for node in range(num_nodes):
        users = users_of_partition(node, num_nodes, prepared.num_users)
        node_config = config.replace(
            method="fedmf", personalization="none", plgc=False, embedding_dim=SCORED_AT_ONCE
        )
        runtime = NodeRuntime(node_config, prepared, node, num_nodes)
        scores = np.asarray(scores_of(runtime.users), dtype=np.float32)
        if scores.shape != (len(users), prepared.num_items):
            raise ValueError(f"scores of shape {scores.shape}, expected ({len(users)}, items)")
        ids, values = _node_values(runtime, scores)
        names = _per_user_names(runtime)
        for column, name in enumerate(names):  # the node's sums, as evaluate_users adds them
            total = float(np.ascontiguousarray(values[:, column]).sum())
            totals[name] = totals.get(name, 0.0) + (0.0 + total)
        totals["num-users"] = totals.get("num-users", 0.0) + float(len(users))
        users_seen.append(ids)
        values_seen.append(values)
    return _means(totals), PerUser(np.concatenate(users_seen), names, np.concatenate(values_seen))


def _node_values(runtime: NodeRuntime, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The node's users and their per-user values, :data:`SCORED_AT_ONCE` users a call."""
    count, width = len(scores), SCORED_AT_ONCE
    one_hot = torch.zeros((count, width))
    one_hot[torch.arange(count), torch.arange(count) % width] = 1.0
    state = NodeState(
        private={"user-embedding": one_hot}, personal=PersonalRows.empty(count, width)
    )
    ids, values = [], []
    for lo in range(0, count, width):
        block = np.arange(lo, min(lo + width, count))
        table = np.zeros((scores.shape[1], width), dtype=np.float32)
        table[:, : len(block)] = scores[block].T
        _, block_ids, block_values = runtime.evaluate_users(state, None, table, positions=block)
        ids.append(block_ids)
        values.append(block_values)
    return np.concatenate(ids), np.concatenate(values)


def _per_user_names(runtime: NodeRuntime) -> tuple[str, ...]:
    metrics = runtime.protocol.metrics
    return tuple(f"{split}-{m}" for split in ("val", "test") for m in metrics)


def _means(sums: dict[str, float]) -> Metrics:
    users = sums.pop("num-users")
    return {
        split: {
            name.split("-", 1)[1]: value / users
            for name, value in sums.items()
            if name.startswith(split + "-")
        }
        for split in ("val", "test")
    }


def popularity(config: RunConfig) -> tuple[Metrics, PerUser]:
    """Validation and test metrics of popularity ranking under ``config.training.protocol`` (means,
    and each user's): a one-dimensional item table holding the train counts and a user
    vector of 1."""
    prepared = prepare(config)
    counts = np.bincount(prepared.train_items, minlength=prepared.num_items)
    table = counts.astype(np.float32)[:, None]
    runtime = NodeRuntime(config.replace(method="fedmf", embedding_dim=1), prepared, 0, 1)
    state = NodeState(
        private={"user-embedding": torch.ones(len(runtime.users), 1)},
        personal=PersonalRows.empty(len(runtime.users), 1),
    )
    sums, users, values = runtime.evaluate_users(state, None, table)
    return _means(sums), PerUser(users, _per_user_names(runtime), values)
