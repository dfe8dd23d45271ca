"""Row-wise aggregation of sparse item-row uploads into the global item table."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RowUpload:
    """One node's upload: for each item it trained, the sum of its users' tuned rows."""

    item_ids: np.ndarray  # [k] distinct
    row_sums: np.ndarray  # [k, d]
    row_counts: np.ndarray  # [k]: how many of the node's users trained the row
    num_users: int  # users that trained on the node this round


def aggregate_rows(table: np.ndarray, uploads: list[RowUpload], rule: str) -> np.ndarray:
    """New global table from the round's uploads (``table`` is not modified).

    ``round-mean``: row ``i`` moves by the sum of its users' changes divided by the number of
    users in the round (a user that did not train row ``i`` counts as "no change", as in the
    reference codes' mean over dense tables). ``toucher-mean``: divided by the number of
    users that trained row ``i``. Sums run in float64 so the result does not depend on the
    order of the uploads or on how users were packed into nodes.
    """
    total_users = sum(upload.num_users for upload in uploads)
    new_table = table.copy()
    if total_users == 0:
        return new_table
    sums = np.zeros(table.shape, dtype=np.float64)
    counts = np.zeros(table.shape[0], dtype=np.int64)
    for upload in uploads:
        sums[upload.item_ids] += upload.row_sums
        counts[upload.item_ids] += upload.row_counts
    touched = np.flatnonzero(counts)
    base = table[touched].astype(np.float64)
    change = sums[touched] - counts[touched, None] * base
    if rule == "round-mean":
        divisor = np.full((len(touched), 1), float(total_users))
    elif rule == "toucher-mean":
        divisor = counts[touched, None].astype(np.float64)
    else:
        raise ValueError(f"unknown aggregation rule '{rule}' (round-mean, toucher-mean)")
    new_table[touched] = (base + change / divisor).astype(table.dtype)
    return new_table
