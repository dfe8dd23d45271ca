"""A node's upload for a method that sums co-occurrences (the item-item methods,
:func:`fedrec_flwr.methods.itemitem.uploads_statistics`).

A user contributes once: in the first round it is selected (``fraction-train``; a pure
function of the seed and the round, so the server knows it too). Its contribution is its
uploaded items ``x_u`` (at most ``itemitem-max-degree``) and the weight ``w_u`` of its
co-occurrences ``w_u x_u x_u^T`` (and, under ``itemitem-degree-bound`` = ``scale``, of its
counts ``w_u x_u``), which the server derives from the number of items:

- plain: the users' item lists, ``basket-items`` (int64, user after user) and
  ``basket-offsets`` (int64 [users + 1]): the server sees each user's items, exactly what its
  co-occurrences would tell it;
- ``secure-aggregation``: one dense vector over the ring, the same length for every node
  (:class:`~fedrec_flwr.privacy.secure_statistics.StatisticsLayout`), masked by the
  ClientApp as the item rows are.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from fedrec_flwr.data.prepared import PreparedData
from fedrec_flwr.methods import Method
from fedrec_flwr.methods.itemitem import two_rounds, uploads_statistics
from fedrec_flwr.node.upload import TrainResult
from fedrec_flwr.partition import participants
from fedrec_flwr.privacy.secagg import SecAggKeys
from fedrec_flwr.privacy.secure_statistics import StatisticsLayout
from fedrec_flwr.run_keys import RunGroups

ITEMS, OFFSETS = "basket_items", "basket_offsets"


def first_selected(
    config: RunGroups, num_users: int, users: np.ndarray, server_round: int
) -> np.ndarray:
    """Mask of ``users`` (selected in ``server_round``) not selected in any earlier round
    (a two-round run: rounds 1 and 2 are every user's)."""
    users = np.asarray(users, dtype=np.int64)
    earlier = np.zeros(num_users, dtype=bool)
    training = config.training
    if two_rounds(config):
        earlier[:] = server_round > 2
    elif training.fraction_train < 1.0:
        for past in range(1, server_round):
            earlier[participants(training.seed, past, num_users, training.fraction_train)] = True
    elif server_round > 1:
        earlier[:] = True
    return ~earlier[users]


class StatisticsNode(Protocol):
    """What :func:`statistics_upload` reads of the node
    (:class:`~fedrec_flwr.node.runtime.NodeRuntime`)."""

    @property
    def config(self) -> RunGroups: ...

    @property
    def prepared(self) -> PreparedData: ...

    @property
    def method(self) -> Method: ...


def statistics_upload(
    runtime: StatisticsNode,
    users: np.ndarray,
    server_round: int,
    support: np.ndarray | None = None,
) -> TrainResult:
    """The upload of ``users`` (this node's, selected in ``server_round``): the
    contributions of those selected for the first time. ``support``: the items of the
    second round of a two-round run (sent by the server), whose positions the vector uses."""
    method, data = runtime.method, runtime.prepared
    if not uploads_statistics(method):
        raise TypeError(f"method '{method.name}' sums no co-occurrences: it trains its rows")
    users = np.asarray(users, dtype=np.int64)
    new = users[first_selected(runtime.config, data.num_users, users, server_round)]
    baskets = [method.uploaded_items(data, int(user)) for user in new]
    sizes = np.array([len(b) for b in baskets], dtype=np.int64)
    empty = np.empty(0, dtype=np.int64)
    num_users, num_samples = len(new), int(sizes.sum())  # no loss: no gradient step
    if runtime.config.group(SecAggKeys).secure_aggregation:
        weights = [method.basket_weight(len(b)) for b in baskets]
        kind = method.upload_kind(server_round)
        weighted = method.weighted_counts
        layout = StatisticsLayout(data.num_items, gram=kind == "gram", weighted=weighted)
        if kind == "gram" and two_rounds(runtime.config):
            if support is None:
                raise RuntimeError("the server sent no support for the co-occurrence round")
            layout = StatisticsLayout(len(support), weighted=weighted)
            baskets = [positions_in(support, b) for b in baskets]
        vector = layout.encode(baskets, weights, data.num_users)
        rows = np.empty((0, method.row_dim), dtype=np.float32)
        return TrainResult(empty, rows, empty, num_users, num_samples, 0.0, secure=vector)
    items = np.concatenate(baskets) if baskets else empty
    offsets = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    return TrainResult(
        empty,
        np.empty((0, 0), dtype=np.float32),
        empty,
        num_users,
        num_samples,
        0.0,
        statistics={ITEMS: items, OFFSETS: offsets},
    )


def positions_in(support: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Positions in the sorted ``support`` of those of ``items`` it holds."""
    where = np.minimum(np.searchsorted(support, items), max(len(support) - 1, 0))
    held = support[where] == items if len(support) else np.zeros(len(items), dtype=bool)
    return where[held]
