"""What a method may offer beside its contract (:class:`~fedrec_flwr.methods.base.Method`):
fast paths the runtime takes when they are there, the sparsity of its rows, and how its
private state is stored on the device.

A method offers one by declaring the member that its protocol below names; the node and the
server read it where they act, through the function beside it, which gives the default for
a method that does not. A plug-in that wraps a method (PLGC) offers what its base method
offers (the functions look the member up as an attribute, so a wrapper's delegation answers).
The conformance suite holds each fast path to the plain path.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

#: Users scored at once by a full ranking, unless the method says otherwise (``eval_chunk``).
EVAL_CHUNK = 256


class RowwiseLogits(Protocol):
    """``rowwise_logits = True``: ``logits`` is row-wise, with a result per row that does not
    depend on the shape of the batch (elementwise operations and sums over the row; no
    matrix product). Evaluation may then score a user's held rows as a flat list of (user,
    item) pairs instead of a padded [users, most held, r] block, with bit-identical
    scores."""

    rowwise_logits: bool


class LinearScoreHead(Protocol):
    """``linear_score_head = True``: the private score function is
    :func:`~fedrec_flwr.methods.heads.linear_head_init`'s linear head, so ``score-init``
    applies to it (PFedRec, FedRAP)."""

    linear_score_head: bool


class EvalChunk(Protocol):
    """``eval_chunk``: users scored at once by a full ranking (bounds the memory of [users,
    items, ...]; FedNCF's MLP: 16)."""

    eval_chunk: int


class LinearHead(Protocol):
    """``linear_head(params)``: (weight [a, r], bias [a] or None) when ``logits_all`` is
    ``linear_logits_all`` of them (a linear score head on the global rows): full rankings
    then take the exact fast path of :mod:`fedrec_flwr.node.full_ranking`; None: they do
    not."""

    def linear_head(
        self, params: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor | None] | None: ...


class SparseRows(Protocol):
    """``zero_threshold``: rows whose max |value| is at or below it count as zero: they are
    not sent (only their ids) and the server snaps them to exact zeros (FedRAP's ``C``)."""

    @property
    def zero_threshold(self) -> float: ...


class InitPrivate(Protocol):
    """The contract's ``init_private(users)``, all :func:`init_private_from` needs of a method
    (so that this module stays below :mod:`fedrec_flwr.methods.base`)."""

    def init_private(self, users: np.ndarray) -> dict[str, torch.Tensor]: ...


class InitFromData(Protocol):
    """``init_private_from(users, data)``: the private parameters of ``users`` on the node
    holding ``data`` (their interactions), for a method whose private parameters are the
    user's data (item-item); ``init_private(users)`` by default."""

    def init_private_from(self, users: np.ndarray, data) -> dict[str, torch.Tensor]: ...


class StoredPrivateRows(Protocol):
    """``private_rows_in(name, rows, items)``: private rows ``name`` of ``items`` as the score
    reads them, from their stored form (zero: never trained); ``private_rows_out``: the
    stored form after training (its inverse). FedRAP: offsets from a shared table. As stored
    by default."""

    def private_rows_in(self, name: str, rows: np.ndarray, items: np.ndarray) -> np.ndarray: ...

    def private_rows_out(self, name: str, rows: np.ndarray, items: np.ndarray) -> np.ndarray: ...


def rowwise_logits(method: object) -> bool:
    """Is the method's ``logits`` row-wise (:class:`RowwiseLogits`)? False by default."""
    return bool(getattr(method, "rowwise_logits", False))


def linear_score_head(method: object) -> bool:
    """Is the method's private score function a linear head (:class:`LinearScoreHead`)? False
    by default."""
    return bool(getattr(method, "linear_score_head", False))


def eval_chunk(method: object) -> int:
    """Users scored at once by a full ranking (:class:`EvalChunk`; :data:`EVAL_CHUNK`)."""
    return int(getattr(method, "eval_chunk", EVAL_CHUNK))


def linear_head(
    method: object, params: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The method's linear score head on ``params`` (:class:`LinearHead`), or None."""
    head = getattr(method, "linear_head", None)
    return None if head is None else head(params)


def zero_threshold(method: object) -> float | None:
    """The method's zero threshold (:class:`SparseRows`), or None: its rows are dense."""
    return getattr(method, "zero_threshold", None)


def init_private_from(method: InitPrivate, users: np.ndarray, data) -> dict[str, torch.Tensor]:
    """The private parameters of ``users`` on the node holding ``data`` (:class:`InitFromData`;
    ``init_private(users)`` by default)."""
    init = getattr(method, "init_private_from", None)
    return method.init_private(users) if init is None else init(users, data)


def private_rows_in(method: object, name: str, rows: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Private rows as the score reads them, from their stored form (:class:`StoredPrivateRows`;
    as stored by default)."""
    convert = getattr(method, "private_rows_in", None)
    return rows if convert is None else convert(name, rows, items)


def private_rows_out(method: object, name: str, rows: np.ndarray, items: np.ndarray) -> np.ndarray:
    """The stored form of private rows after training (:class:`StoredPrivateRows`; as they are
    by default)."""
    convert = getattr(method, "private_rows_out", None)
    return rows if convert is None else convert(name, rows, items)
