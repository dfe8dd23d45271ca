"""What a node uploads after training (:class:`TrainResult`): the sums over its users of their
tuned item rows (ids, counts) and of their shared-dense parameters, built by
:func:`summed_upload` from the users' flat rows; under ``secure-aggregation`` the unmasked
fixed-point vector of their tuned rows instead (:func:`secure_upload`,
:mod:`fedrec_flwr.privacy.secagg`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch

from fedrec_flwr.node.samples import distinct_items
from fedrec_flwr.partition import participants
from fedrec_flwr.privacy import secagg


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
    # Under secure-aggregation: the unmasked ring vector (secagg.encode), no sparse rows.
    secure: np.ndarray | None = None
    # A method that sums co-occurrences: its plain upload's arrays (node/statistics.py).
    statistics: dict[str, np.ndarray] | None = None
    # weight-decay-rows = "all": the sum over its users of 1 - f_u (node/dense_decay.py).
    row_shrink: float = 0.0


class SecureUploads:
    """A node's secure-aggregation uploads (``secure-aggregation``): what every round's
    needs of the run (:meth:`at` adds the round's)."""

    def __init__(self, config: Any, prepared: Any) -> None:
        self.config = config
        self.num_items, self.num_users = prepared.num_items, prepared.num_users

    def at(self, server_round: int, users, offsets, table: np.ndarray) -> SecureRound:
        """The round's: its users (flat rows at ``offsets``) and the table they were sent."""
        return SecureRound(self, server_round, np.asarray(users), offsets, table)


@dataclass(frozen=True)
class SecureRound:
    """One round of a node's secure-aggregation upload (:meth:`SecureUploads.at`)."""

    uploads: SecureUploads
    server_round: int
    users: np.ndarray
    offsets: np.ndarray
    table: np.ndarray  # the full table sent (the audit's view shows it)

    def participants(self) -> np.ndarray:
        config = self.uploads.config
        return participants(
            config.seed, self.server_round, self.uploads.num_users, config.fraction_train
        )


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
    secure: SecureRound | None = None,
) -> TrainResult:
    """The upload of ``num_users`` users from their flat ``rows`` of ``items`` (the rows of
    one item are summed) and their shared-dense tensors ``dense`` (``[users, ...]`` each).

    One user: its float32 values as they are; several: exact float64 sums, so the server's
    aggregate does not depend on how users are packed into nodes. ``sparse`` (the method has
    a zero threshold): rows whose sum is zero travel as ids only (``zero_ids``).
    ``secure`` (``secure-aggregation``): the unmasked vector instead (:func:`secure_upload`)."""
    if secure:
        return secure_upload(secure, items, rows, dense, num_samples, loss_sum)
    item_ids, inverse = distinct_items(items, num_items)
    sums = float64_row_sums(inverse, rows, len(item_ids))
    counts = np.bincount(inverse, minlength=len(item_ids)).astype(np.int64)
    one = num_users == 1
    row_sums = rows if one else sums.numpy()
    nonzero = np.ones(len(item_ids), dtype=bool)
    if sparse:
        nonzero = np.asarray(row_sums.any(axis=1))
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


def secure_upload(
    secure: SecureRound,
    items: np.ndarray,
    rows: np.ndarray,
    dense: Mapping[str, torch.Tensor],
    num_samples: int,
    loss_sum: float,
) -> TrainResult:
    """The unmasked :func:`~fedrec_flwr.privacy.secagg.encode` vector of the round's users'
    flat ``rows`` (user after user at ``secure.offsets``) and shared-dense tensors; the
    masks are the node's to add (:func:`~fedrec_flwr.privacy.secagg.masked`). Observers set
    (:data:`secagg.OBSERVERS`, the audit) get each wanted user's faithful-mode view: its
    own vector masked with every other participant of the round."""
    users, offsets = secure.users, secure.offsets
    values = {name: value.detach().cpu().double().numpy() for name, value in dense.items()}
    layout = secagg.Layout.of(
        secure.uploads.num_items, rows.shape[1], {k: v.shape[1:] for k, v in values.items()}
    )
    encode = partial(secagg.encode, layout, total_users=secure.uploads.num_users)
    vector = encode(
        items, rows, values, num_users=len(users), num_samples=num_samples, loss_sum=loss_sum
    )
    config = secure.uploads.config
    for j, user in enumerate(users.tolist()):
        observers = secagg.wanted(user, secure.server_round) if secagg.OBSERVERS else []
        if not observers:
            continue
        lo, hi = int(offsets[j]), int(offsets[j + 1])
        own = {name: value[j : j + 1] for name, value in values.items()}
        alone = encode(items[lo:hi], rows[lo:hi], own, num_users=1, num_samples=0, loss_sum=0.0)
        view = secagg.faithful_view(
            config.seed,
            config.secure_aggregation_keys,
            secure.server_round,
            user,
            secure.participants(),
            alone,
        )
        for observer in observers:
            observer(user, secure.server_round, view, secure.table, alone)
    empty = np.empty(0, dtype=np.int64)
    return TrainResult(
        item_ids=empty,
        row_sums=np.empty((0, rows.shape[1]), dtype=np.float32),
        row_counts=empty,
        num_users=len(users),
        num_samples=num_samples,
        loss_sum=loss_sum,
        secure=vector,
    )
