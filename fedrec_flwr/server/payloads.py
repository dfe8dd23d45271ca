"""Which users and global rows each node is sent in a round (plain numpy; the strategy turns
these plans into Flower messages).

- ``train``: each node holding a user selected this round (``fraction-train``) gets those
  users and the rows it asked for in its last reply (``next-items`` for this round), or the
  full table when it has no fresh request (the full table is always correct), and always
  under ``secure-aggregation`` (no node's request may tell its items).
- ``evaluate``: every node gets the rows its evaluation reads (``eval-items``; none given:
  the full table). With an ``eval-users`` sample, a node holding none of the sampled users
  gets no rows, and no message at all unless it owes its next-round request (it trains next
  round, not this one): one-user nodes then do not each receive the table for nothing.

The nodes' pending requests are the planner's state (:meth:`PayloadPlanner.state_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedrec_flwr.config import RunConfig
from fedrec_flwr.partition import eval_sample, participants
from fedrec_flwr.privacy.secagg import SecAggKeys
from fedrec_flwr.server.nodes import NodeInfo

__all__ = ["EvaluationPlan", "PayloadPlanner", "TrainOrder"]

REQUESTS, REQUEST = "requests", "request/"


@dataclass(frozen=True)
class TrainOrder:
    """What the server sent one node in a round: the users to train and the rows
    (``item_ids`` None: the full table, any item may come back)."""

    users: np.ndarray
    item_ids: np.ndarray | None


#: node id -> the item ids of the rows it is sent (None: the full table; empty: none).
EvaluationPlan = dict[int, np.ndarray | None]


class PayloadPlanner:
    """Plans each round's train and evaluate payloads from what the nodes hold and asked for."""

    def __init__(
        self,
        config: RunConfig,
        nodes: dict[int, NodeInfo],
        num_users: int,
        train_rows: bool = True,
    ) -> None:
        self.config = config
        self.nodes = nodes
        self.num_users = num_users
        #: Does training read item rows? (Not for a method that sums co-occurrences.)
        self.train_rows = train_rows

    def train_orders(self, server_round: int) -> dict[int, TrainOrder]:
        """The round's train orders by node id (nodes with no selected user get none)."""
        selected = participants(
            self.config.training.seed,
            server_round,
            self.num_users,
            self.config.training.fraction_train,
        )
        orders = {}
        for node_id, info in self.nodes.items():
            # ``np.intersect1d`` of sorted distinct ``selected``: its members held by the node
            users = selected[np.isin(selected, info.users)]
            if len(users) == 0:
                continue
            fresh = info.request_round == server_round and info.request_items is not None
            # under secure aggregation everyone gets everything
            fresh = fresh and not self.config.group(SecAggKeys).secure_aggregation
            ids = info.request_items if fresh else None  # no fresh request: the full table
            if not self.train_rows:  # the upload reads no row: none sent
                ids = np.empty(0, dtype=np.int64)
            orders[node_id] = TrainOrder(users=users, item_ids=ids)
        return orders

    def evaluation_plan(self, server_round: int, sample_size: int) -> EvaluationPlan:
        """The rows each node evaluating this round is sent (``sample_size``: the users
        evaluated, 0 for all)."""
        sampled, owing = self.eval_recipients(server_round, sample_size)
        plan: EvaluationPlan = {}
        for node_id, info in self.nodes.items():
            if sampled is not None and node_id not in sampled:
                if node_id in owing:  # no sampled user: only the chance to send its request
                    plan[node_id] = np.empty(0, dtype=np.int64)
            else:
                plan[node_id] = info.eval_items
        return plan

    def eval_recipients(
        self, server_round: int, sample_size: int
    ) -> tuple[set[int] | None, set[int]]:
        """(nodes holding a user of the round's ``eval-users`` sample, or None when every
        user is evaluated; nodes without one that still owe their next-round request: they
        train next round but did not train this one, so only an evaluate reply can carry
        it). The sample is :func:`~fedrec_flwr.partition.eval_sample`, as the nodes draw it."""
        if sample_size <= 0 or sample_size >= self.num_users:
            return None, set()
        seed, fraction = self.config.training.seed, self.config.training.fraction_train
        chosen = eval_sample(seed, server_round, self.num_users, sample_size)
        now = participants(seed, server_round, self.num_users, fraction)
        following = np.empty(0, dtype=np.int64)
        if server_round < self.config.training.num_server_rounds:
            following = participants(seed, server_round + 1, self.num_users, fraction)
        node_ids = list(self.nodes)
        users = [self.nodes[node_id].users for node_id in node_ids]
        owner = np.repeat(np.arange(len(node_ids)), [len(u) for u in users])
        flat = np.concatenate(users) if users else np.empty(0, dtype=np.int64)

        def holds(selected: np.ndarray) -> np.ndarray:  # per node: holds one of them?
            mask = np.zeros(self.num_users, dtype=bool)
            mask[selected] = True
            return np.bincount(owner, weights=mask[flat], minlength=len(node_ids)) > 0

        sampled_mask = holds(chosen)
        owing_mask = ~sampled_mask & holds(following) & ~holds(now)
        return (
            {node_ids[i] for i in np.flatnonzero(sampled_mask)},
            {node_ids[i] for i in np.flatnonzero(owing_mask)},
        )

    def state_dict(self) -> dict[str, Any]:
        """The nodes' pending requests: ``requests`` (the round each asked for, by
        partition) and the ids of each, ``request/<partition>``."""
        state: dict[str, Any] = {
            REQUESTS: {str(i.partition_id): i.request_round for i in self.nodes.values()}
        }
        for info in self.nodes.values():
            if info.request_items is not None:
                state[REQUEST + str(info.partition_id)] = info.request_items
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Give each node (by partition) the request :meth:`state_dict` saved for it."""
        requests = state.get(REQUESTS, {})
        for info in self.nodes.values():
            partition = str(info.partition_id)
            if partition not in requests:
                raise ValueError(
                    f"the server state holds no request of partition {partition}: resume "
                    "with the nodes the run was checkpointed with"
                )
            info.request_round = requests[partition]
            info.request_items = state.get(REQUEST + partition)
