"""The leave-one-out split of a dataset's interactions (``docs/protocols.md``).

Both protocols: per user, rows ranked newest first; among rows with equal timestamps the row
earlier in the file counts as newer (pandas ``rank(method='first', ascending=False)``). Rank 1
is the test item, rank 2 the validation item, the rest train. The ``strict`` protocol first
removes repeated (user, item) pairs, keeping each pair's newest row; ``paper`` keeps them
(Last.fm-2K has one row per tag assignment). ``distinct_train`` then keeps one train row per
(user, item) pair, the first in file order (run-config key ``train-pairs``): the held-out
items and the users are those of the split without it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrec_flwr.data.interactions import Interactions

SPLIT_MINIMUM = 3  # rows a leave-one-out split needs of a user (train, validation, test)


@dataclass(frozen=True)
class LeaveOneOut:
    """Leave-one-out arrays; users are contiguous ``0..num_users-1``."""

    num_users: int
    num_items: int
    train_indptr: np.ndarray  # int64 [num_users + 1]
    train_items: np.ndarray  # int64 [num_train_rows], grouped by user, file order within a user
    valid_item: np.ndarray  # int64 [num_users]
    test_item: np.ndarray  # int64 [num_users]
    source_user: np.ndarray  # int64 [num_users]: the user's id in the Interactions


def leave_one_out(data: Interactions, dedupe: bool, distinct_train: bool = False) -> LeaveOneOut:
    """Split with the tie rule of ``docs/protocols.md``; users with fewer than
    :data:`SPLIT_MINIMUM` rows are dropped. ``distinct_train``: a repeated (user, item) pair
    among a user's train rows keeps its first row in file order only (after the held-out rows
    are taken, so they and the users do not change)."""
    n = len(data.user)
    row = np.arange(n, dtype=np.int64)
    # Primary key user, then newest first, then earlier file row first (= counts as newer).
    order = np.lexsort((row, -data.timestamp, data.user))
    if dedupe:
        pair = data.user[order] * data.num_items + data.item[order]
        _, first = np.unique(pair, return_index=True)
        order = order[np.sort(first)]  # keep each pair's first row in that order: its newest
    users = data.user[order]
    starts = np.flatnonzero(np.r_[True, users[1:] != users[:-1]])
    counts = np.diff(np.r_[starts, len(order)])
    rank = np.arange(len(order)) - np.repeat(starts, counts)
    kept_users = users[starts][counts >= SPLIT_MINIMUM]
    new_id = np.full(data.num_users, -1, dtype=np.int64)
    new_id[kept_users] = np.arange(len(kept_users))
    keep = new_id[users] >= 0
    order, rank = order[keep], rank[keep]

    test_rows, valid_rows = order[rank == 0], order[rank == 1]
    train_rows = np.sort(order[rank >= 2])  # file order
    train_users = new_id[data.user[train_rows]]
    train_rows = train_rows[np.argsort(train_users, kind="stable")]
    if distinct_train:
        pair = new_id[data.user[train_rows]] * data.num_items + data.item[train_rows]
        _, first = np.unique(pair, return_index=True)
        train_rows = train_rows[np.sort(first)]  # user-grouped, file order within a user
    num_users = len(kept_users)
    test_item = np.empty(num_users, dtype=np.int64)
    valid_item = np.empty(num_users, dtype=np.int64)
    test_item[new_id[data.user[test_rows]]] = data.item[test_rows]
    valid_item[new_id[data.user[valid_rows]]] = data.item[valid_rows]
    counts = np.bincount(new_id[data.user[train_rows]], minlength=num_users)
    return LeaveOneOut(
        num_users=num_users,
        num_items=data.num_items,
        train_indptr=np.r_[0, np.cumsum(counts)].astype(np.int64),
        train_items=data.item[train_rows].astype(np.int64),
        valid_item=valid_item,
        test_item=test_item,
        source_user=kept_users.astype(np.int64),
    )
