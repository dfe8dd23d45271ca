"""The ``ratings.dat`` of PFedRec's reference code (which FedRAP's reads too), laid out so that
the reference's own leave-one-out split of it is this project's split."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedrec_lab.reference.runs import ReferenceError, Split


def reference_files(split: Split, folder: Path) -> dict[str, np.ndarray]:
    """``ratings.dat`` (``uid,mid,rating,timestamp``) laid out so that the reference's split
    is ours; our negatives and validation items in the reference's item numbering."""
    counts = np.bincount(split.train_user, minlength=split.num_users)
    users, items, stamps = [], [], []
    start = 0
    for user in range(split.num_users):
        train = split.train_item[start : start + counts[user]]
        start += counts[user]
        users += [user] * (2 + len(train))
        items += [int(split.test_item[user]), int(split.valid_item[user]), *train.tolist()]
        stamps += [2, 1] + [0] * len(train)
    items_array = np.asarray(items)
    _, first = np.unique(items_array, return_index=True)
    order = np.unique(items_array)[np.argsort(first)]  # our item ids by first appearance
    numbering = np.full(split.num_items, -1, dtype=np.int64)
    numbering[order] = np.arange(len(order))
    if (numbering < 0).any():
        raise ReferenceError(
            f"{(numbering < 0).sum()} items appear in no row: the reference numbers only the "
            "items in its file, and would not know them as negatives"
        )
    folder.mkdir(parents=True, exist_ok=True)
    rows = np.c_[users, items, np.ones(len(users), dtype=np.int64), stamps]
    np.savetxt(folder / "ratings.dat", rows, fmt="%d", delimiter=",")
    negatives = numbering[np.c_[split.valid_negatives, split.test_negatives]]
    return {"negatives": negatives, "valid_items": numbering[split.valid_item]}
