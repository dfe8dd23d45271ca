"""What a node uploads after training (:class:`TrainResult`): the sums over its users of their
tuned item rows (ids, counts) and of their shared-dense parameters, built by
:func:`summed_upload` from the users' flat rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from fedrec_flwr.node.samples import distinct_items


@dataclass(frozen=True)
class TrainResult:
    """What a node uploads after training (and the metrics it reports)."""

    item_ids: np.ndarray  # sorted distinct items its users trained (non-zero sums)
    row_sums: np.ndarray  # [k, r]: sum over its users of their tuned rows
    row_counts: np.ndarray  # [k]: number of its users that trained each row
    num_users: int
    num_samples: int
    loss_sum: float
    dense_sums: dict[str, np.ndarray] = field(default_factory=dict)
    # Trained rows whose sum is zero (sparse methods: sent as ids only) and their counts.
    zero_ids: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    zero_counts: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))


SUM_CHUNK = 1 << 16  # rows converted to float64 at a time by float64_row_sums


def float64_row_sums(inverse: np.ndarray, rows: np.ndarray, num_out: int) -> torch.Tensor:
    """``out[inverse[k]] += rows[k]`` in float64, in row order, a chunk at a time (the same
    sums as one ``index_add_`` without a float64 copy of the whole flat table)."""
    sums = torch.zeros((num_out, rows.shape[1]), dtype=torch.float64)
    index, source = torch.from_numpy(inverse), torch.from_numpy(rows)
    for lo in range(0, len(rows), SUM_CHUNK):
        sums.index_add_(0, index[lo : lo + SUM_CHUNK], source[lo : lo + SUM_CHUNK].double())
    return sums


def summed_upload(
    items: np.ndarray,
    rows: np.ndarray,
    num_items: int,
    dense: Mapping[str, torch.Tensor],
    *,
    num_users: int,
    num_samples: int,
    loss_sum: float,
    sparse: bool,
) -> TrainResult:
    """The upload of ``num_users`` users from their flat ``rows`` of ``items`` (the rows of
    one item are summed) and their shared-dense tensors ``dense`` (``[users, ...]`` each).

    One user: its float32 values as they are; several: exact float64 sums, so the server's
    aggregate does not depend on how users are packed into nodes. ``sparse`` (the method has
    a zero threshold): rows whose sum is zero travel as ids only (``zero_ids``)."""
    item_ids, inverse = distinct_items(items, num_items)
    sums = float64_row_sums(inverse, rows, len(item_ids))
    counts = np.bincount(inverse, minlength=len(item_ids)).astype(np.int64)
    one = num_users == 1
    row_sums = rows if one else sums.numpy()
    nonzero = np.ones(len(item_ids), dtype=bool)
    if sparse:
        nonzero = row_sums.any(axis=1)
    return TrainResult(
        item_ids=item_ids[nonzero],
        row_sums=row_sums[nonzero],
        row_counts=counts[nonzero],
        zero_ids=item_ids[~nonzero],
        zero_counts=counts[~nonzero],
        num_users=num_users,
        num_samples=num_samples,
        loss_sum=loss_sum,
        dense_sums={
            name: value[0].cpu().numpy() if one else value.cpu().double().sum(0).numpy()
            for name, value in dense.items()
        },
    )
