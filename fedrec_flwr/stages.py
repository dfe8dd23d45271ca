"""Upload stages: what happens to the users' uploads on a node, and to the round's uploads on
the server, as chains of stages that plug-ins contribute (the way Flower's mods wrap a
ClientApp: each stage gets the upload and ``call_next``).

On a node, after its users' local update (:class:`UploadChain`):

- **request**: the rows a user asks the server for, besides those it trains (decoys, a
  malicious user's attack rows);
- **transform**: each user's upload on its own (a malicious user's poisoning, decoy rows,
  LDP); a stage changes :class:`Uploads` and calls ``call_next``;
- **finish**: the node's upload from its users' (:class:`TrainResult`): the plain sum, or
  the secure-aggregation vector. Exactly one finisher ends the chain.

On the server, in front of the optimiser (:class:`ServerChain`,
:meth:`fedrec_flwr.server.model.ServerModel.apply`):

- **decode**: the round's replies into row uploads (secure aggregation: the sum, masks removed);
- **changes**: the round's float64 change of each touched row, from the uploads: the plain
  ``aggregation`` rule, or a defence against poisoned uploads that replaces it (the
  terminal), and stages around it (LDP denoising).

A plug-in declares the stages it contributes (``node``, ``server`` of
:class:`fedrec_flwr.methods.plugin.Plugin`); the node and the server compose the chains of
the plug-ins a run enables, in registry order. The upload's rows are torch tensors: a stage
that works in NumPy reads them on the host (:meth:`Uploads.host_rows`); the others leave
them where the local update left them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np
import torch

from fedrec_flwr.aggregation import RowUpload, row_changes

__all__ = [
    "Contribution",
    "Finish",
    "ModelShapes",
    "NodeUpload",
    "RowChanges",
    "SecureSum",
    "ServerChain",
    "ServerStage",
    "TrainResult",
    "Upload",
    "UploadChain",
    "UploadRound",
    "UploadStage",
    "Uploads",
    "UserChanges",
    "uploads_of",
]


# ------------------------------------------------------------------------------ node
@dataclass(frozen=True)
class UserChanges:
    """Each user's change of the rows it trained, for bounded secure aggregation (a report
    per user proves its own: :mod:`fedrec_flwr.privacy.bounded`)."""

    users: np.ndarray
    blocks: list[tuple[np.ndarray, np.ndarray]]  # per user: (items, changes [k, row_dim])
    num_samples: int
    loss_sum: float


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
    # Under secure-aggregation: the ring vector (secagg.encode) the node masks; no sparse rows.
    secure: np.ndarray | None = None
    # Under secure-aggregation-bound: each user's row changes, which the node proves.
    user_changes: UserChanges | None = None
    # A method that sums co-occurrences: its plain upload's arrays (node/statistics.py).
    statistics: dict[str, np.ndarray] | None = None
    # weight-decay-rows = "all": the sum over its users of 1 - f_u (node/dense_decay.py).
    row_shrink: float = 0.0


@dataclass(frozen=True)
class Uploads:
    """The round's uploads of a node's users, user after user.

    User ``users[j]`` uploads the rows ``rows[offsets[j]:offsets[j + 1]]`` of the items
    ``items[offsets[j]:offsets[j + 1]]`` (sorted within the block), whose global rows as sent
    are ``sent`` (the base of each change: None when no stage of the chain reads it), and
    its tuned copies ``dense[name][j]`` of the shared-dense parameters. Private and personal
    parameters are never part of it.
    """

    users: np.ndarray
    offsets: np.ndarray
    items: np.ndarray
    rows: torch.Tensor
    sent: torch.Tensor | None
    dense: Mapping[str, torch.Tensor]
    num_samples: int
    loss_sum: float

    def replace(self, **changes: Any) -> Uploads:
        return replace(self, **changes)

    def host_rows(self) -> np.ndarray:
        """The uploaded rows as a NumPy array (a copy only when they are off the host)."""
        return self.rows.detach().cpu().numpy()

    def host_sent(self) -> np.ndarray:
        """The rows as sent, as a NumPy array (the chain must read them: ``reads_sent``)."""
        if self.sent is None:
            raise RuntimeError("a stage reads the rows as sent, but the chain did not keep them")
        return self.sent.detach().cpu().numpy()

    def blocks(self) -> Iterator[tuple[int, int, int]]:
        """(user, lo, hi) of each user's block of flat rows, in order."""
        for j, user in enumerate(np.asarray(self.users, dtype=np.int64).tolist()):
            yield user, int(self.offsets[j]), int(self.offsets[j + 1])


@dataclass(frozen=True)
class UploadRound:
    """What a node's stages know of the round besides the uploads."""

    server_round: int
    num_items: int
    #: Global rows of any items, as the server sent them (decoys, attack rows).
    lookup: Callable[[np.ndarray], np.ndarray]
    #: The rows the server sent (the full table when the node asked for none).
    table: np.ndarray
    #: The method's zero threshold is set: rows whose sum is zero travel as ids only.
    sparse: bool = False


#: A chain's rest: the uploads and the round in, the node's upload out.
Finish = Callable[[Uploads, UploadRound], TrainResult]


class UploadStage:
    """One stage of a node's upload chain (see the module's doc).

    A stage changes what its three hooks change and inherits the rest: ``request`` (a user's
    requested rows), ``transform`` (the uploads before the rest of the chain) or
    ``__call__`` itself (around the rest, as a Flower mod). A finisher (``finishes = True``)
    ends the chain: its ``finish`` makes the node's upload.
    """

    #: Name, for logs and errors (the plug-in's).
    name: ClassVar[str] = ""
    #: Does it read :attr:`Uploads.sent` (the chain then keeps a copy of the rows as sent)?
    reads_sent: ClassVar[bool] = False
    #: Does it end the chain (``finish``)?
    finishes: ClassVar[bool] = False
    #: A finisher whose nodes are sent the full table and request no rows.
    full_table: ClassVar[bool] = False

    def request(self, user: int, items: np.ndarray) -> np.ndarray:
        """The sorted rows ``user`` requests, given those it requests so far (``items``)."""
        return items

    def transform(self, uploads: Uploads, upload_round: UploadRound) -> Uploads:
        """The uploads the rest of the chain gets."""
        return uploads

    def finish(self, uploads: Uploads, upload_round: UploadRound) -> TrainResult:
        """The node's upload (finishers only)."""
        raise NotImplementedError(f"stage '{self.name}' does not finish a chain")

    def __call__(
        self, uploads: Uploads, upload_round: UploadRound, call_next: Finish
    ) -> TrainResult:
        return call_next(self.transform(uploads, upload_round), upload_round)

    def requests(self) -> bool:
        """Does it add rows to a user's request?"""
        return type(self).request is not UploadStage.request


class UploadChain:
    """A node's stages, then its finisher: ``chain(uploads, round)`` runs
    ``stages[0](uploads, round, call_next)``, whose ``call_next`` runs ``stages[1]``, and so
    on to ``finisher.finish``."""

    def __init__(self, stages: Sequence[UploadStage], finisher: UploadStage) -> None:
        if not finisher.finishes or any(stage.finishes for stage in stages):
            raise ValueError(
                "an upload chain ends in exactly one finisher: "
                f"{[s.name for s in stages if s.finishes] + [finisher.name]}"
            )
        self.stages = tuple(stages)
        self.finisher = finisher

    @property
    def reads_sent(self) -> bool:
        return any(stage.reads_sent for stage in (*self.stages, self.finisher))

    @property
    def full_table(self) -> bool:
        """Are the nodes sent the full table (they request no rows)?"""
        return self.finisher.full_table

    @property
    def adds_requests(self) -> bool:
        """Does a stage add rows to the users' requests?"""
        return any(stage.requests() for stage in self.stages)

    def request(self, user: int, items: np.ndarray) -> np.ndarray:
        """The rows ``user`` requests when it trains ``items``."""
        for stage in self.stages:
            items = stage.request(user, items)
        return items

    def __call__(self, uploads: Uploads, upload_round: UploadRound) -> TrainResult:
        return self._from(0, uploads, upload_round)

    def _from(self, index: int, uploads: Uploads, upload_round: UploadRound) -> TrainResult:
        if index == len(self.stages):
            return self.finisher.finish(uploads, upload_round)
        return self.stages[index](uploads, upload_round, lambda u, r: self._from(index + 1, u, r))

    def around(self, stage: UploadStage) -> UploadChain:
        """This chain with ``stage`` first (one round's: ``weight-decay-rows = "all"``)."""
        return UploadChain([stage, *self.stages], self.finisher)

    def names(self) -> tuple[str, ...]:
        return tuple(stage.name for stage in (*self.stages, self.finisher))


# ---------------------------------------------------------------------------- server
#: (touched rows, their float64 change) of a round.
RowChanges = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class SecureSum:
    """The sum modulo 2^64 of a round's vectors (secure aggregation), their masks removed,
    before decoding: the sum of ``num_users`` users' uploads (the round's surviving
    participants) of a federation of ``total_users``."""

    server_round: int
    total: np.ndarray
    num_users: int
    total_users: int


class Contribution(Protocol):
    """An upload of a method's own kind (an item-item method's co-occurrences:
    :mod:`fedrec_flwr.server.statistics`): the number of users it sums."""

    @property
    def num_users(self) -> int: ...


#: What the server reads from a round's replies: a node's row upload, the encoded sum of every
#: node's (secure aggregation), or an upload of a method's own kind.
Upload = RowUpload | SecureSum | Contribution
U = TypeVar("U")


def uploads_of(kind: type[U], uploads: Sequence[Upload]) -> list[U]:
    """``uploads``, each a ``kind``: what a model applies once its stages have decoded them;
    raise ``TypeError`` for any other (an encoded sum not decoded, another method's upload)."""
    foreign = [type(upload).__name__ for upload in uploads if not isinstance(upload, kind)]
    if foreign:
        raise TypeError(
            f"uploads of kind {', '.join(sorted(set(foreign)))} where {kind.__name__} was "
            "expected: decode the round's uploads with the model's stages first"
        )
    return [upload for upload in uploads if isinstance(upload, kind)]


@dataclass(frozen=True)
class NodeUpload:
    """One upload the server reads from the round's replies: a node's row upload and its
    loss and sample counts, or (secure aggregation) the encoded sum of every node's, or an
    upload of a method's own kind."""

    partition_id: int
    upload: Upload
    metrics: Mapping[str, Any]


class ServerStage:
    """One stage of the server's round update (see the module's doc): ``decode`` (what the
    replies carried into row uploads) and ``changes`` (around the rest of the chain; a
    ``terminal`` stage computes the changes itself, in place of the plain rule)."""

    name: ClassVar[str] = ""
    #: Does it compute the rows' changes itself (the chain's last ``changes``)?
    terminal: ClassVar[bool] = False
    #: Do the nodes upload masked vectors that only this stage decodes (their sum)?
    masked: ClassVar[bool] = False

    def decode(self, uploads: list[NodeUpload], shapes: ModelShapes) -> list[NodeUpload]:
        return uploads

    def changes(
        self,
        table: np.ndarray,
        uploads: Sequence[RowUpload],
        call_next: Callable[[np.ndarray, Sequence[RowUpload]], RowChanges],
    ) -> RowChanges:
        return call_next(table, uploads)

    def check_contributors(self, users_per_node: int) -> None:
        """Raise ``ConfigError`` when the stage cannot work with nodes of this many users."""
        return None


@dataclass(frozen=True)
class ModelShapes:
    """What a decoder needs of the model: the table's shape and the shared-dense shapes."""

    num_items: int
    row_dim: int
    dense: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


class ServerChain:
    """The server's stages: ``decode`` runs each stage's in order; ``changes`` runs
    ``stages[0].changes(table, uploads, call_next)`` and so on, down to the terminal stage
    (placed last) or, without one, the plain ``aggregation`` rule."""

    def __init__(self, stages: Sequence[ServerStage], aggregation: str = "round-mean") -> None:
        terminals = [stage for stage in stages if stage.terminal]
        if len(terminals) > 1:
            raise ValueError(
                "a server chain has at most one terminal stage: "
                f"{[stage.name for stage in terminals]}"
            )
        self.stages = (*(stage for stage in stages if not stage.terminal), *terminals)
        self.aggregation = aggregation

    @property
    def masked(self) -> bool:
        """Do the nodes upload masked vectors (the server decodes only their sum)?"""
        return any(stage.masked for stage in self.stages)

    def decode(self, uploads: list[NodeUpload], shapes: ModelShapes) -> list[NodeUpload]:
        for stage in self.stages:
            uploads = stage.decode(uploads, shapes)
        return uploads

    def changes(self, table: np.ndarray, uploads: Sequence[RowUpload]) -> RowChanges:
        return self._from(0, table, uploads)

    def _from(self, index: int, table: np.ndarray, uploads: Sequence[RowUpload]) -> RowChanges:
        if index == len(self.stages):
            return row_changes(table, uploads, self.aggregation)
        return self.stages[index].changes(table, uploads, lambda t, u: self._from(index + 1, t, u))

    def check_contributors(self, users_per_node: int) -> None:
        for stage in self.stages:
            stage.check_contributors(users_per_node)

    def names(self) -> tuple[str, ...]:
        return tuple(stage.name for stage in self.stages)
