"""Row-wise aggregation of sparse item-row uploads, and the mean of shared-dense uploads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class RowUpload:
    """One node's upload: for each item it trained, the sum of its users' tuned rows (rows
    whose sum is zero: only their ids and counts), and the sums of its users' tuned
    shared-dense parameters."""

    item_ids: np.ndarray  # [k] distinct
    row_sums: np.ndarray  # [k, d]
    row_counts: np.ndarray  # [k]: how many of the node's users trained the row
    num_users: int  # users that trained on the node this round
    dense_sums: dict[str, np.ndarray] = field(default_factory=dict)
    # Rows trained whose sum is zero (sent as ids and counts only) and their counts.
    zero_ids: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    zero_counts: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))


def row_changes(
    table: np.ndarray, uploads: Sequence[RowUpload], rule: str
) -> tuple[np.ndarray, np.ndarray]:
    """(touched rows, their float64 change) from the round's uploads.

    ``round-mean``: row ``i`` moves by the sum of its users' changes divided by the number of
    users in the round (a user that did not train row ``i`` counts as "no change", as in the
    reference codes' mean over dense tables). ``toucher-mean``: divided by the number of
    users that trained row ``i``. Sums run in float64 so the result does not depend on the
    order of the uploads or on how users were packed into nodes. A row uploaded as zero
    (``zero_ids``) counts as trained to the zero vector: its users still move it.
    """
    total_users = sum(upload.num_users for upload in uploads)
    if total_users == 0:
        return np.empty(0, dtype=np.int64), np.empty((0, table.shape[1]))
    sums = np.zeros(table.shape, dtype=np.float64)
    counts = np.zeros(table.shape[0], dtype=np.int64)
    for upload in uploads:
        sums[upload.item_ids] += upload.row_sums
        counts[upload.item_ids] += upload.row_counts
        counts[upload.zero_ids] += upload.zero_counts
    touched = np.flatnonzero(counts)
    base = table[touched].astype(np.float64)
    change = sums[touched] - counts[touched, None] * base
    if rule == "round-mean":
        divisor = np.full((len(touched), 1), float(total_users))
    elif rule == "toucher-mean":
        divisor = counts[touched, None].astype(np.float64)
    else:
        raise ValueError(f"unknown aggregation rule '{rule}' (round-mean, toucher-mean)")
    return touched, change / divisor


def aggregate_rows(table: np.ndarray, uploads: Sequence[RowUpload], rule: str) -> np.ndarray:
    """New global table from the round's uploads (``table`` is not modified)."""
    touched, delta = row_changes(table, uploads, rule)
    new_table = table.copy()
    new_table[touched] = (table[touched].astype(np.float64) + delta).astype(table.dtype)
    return new_table


def dense_changes(
    dense: dict[str, np.ndarray], uploads: Sequence[RowUpload]
) -> dict[str, np.ndarray]:
    """Float64 change of each shared-dense parameter: mean over the round's users of their
    tuned copies, minus the global value (every training user trains every dense weight)."""
    total_users = sum(upload.num_users for upload in uploads)
    changes = {}
    for name, value in dense.items():
        total = np.zeros(value.shape, dtype=np.float64)
        for upload in uploads:
            total += upload.dense_sums[name]
        changes[name] = total / max(total_users, 1) - value.astype(np.float64)
    return changes
