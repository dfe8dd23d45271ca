"""The server of a method that sums co-occurrences (the item-item methods,
:func:`fedrec_flwr.methods.itemitem.uploads_statistics`): the sums over the users who have
contributed, and the model computed from them.

Each round the server reads the nodes' uploads (:func:`check_statistics_reply`: plain item
lists; under ``secure-aggregation`` the decoded sum, :func:`secure_statistics`), adds them
to the round's sums, adds the Gaussian mechanism's noise to those
(:mod:`fedrec_flwr.privacy.sum_noise`, ``itemitem-dp-epsilon``), accumulates them and, when
any user contributed, recomputes the item-item matrix ``W``
(:mod:`fedrec_flwr.methods.cooccurrence`). The item table it serves is ``W^T`` (row ``j``:
the weights into item ``j``), float32. :class:`StatisticsModel` stands where
:class:`~fedrec_flwr.server.model.ServerModel` stands for the methods that train item rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from fedrec_flwr.config import RunConfig
from fedrec_flwr.methods.cooccurrence import model_weights
from fedrec_flwr.methods.itemitem import ItemItem, ItemItemKeys, two_rounds
from fedrec_flwr.privacy.secure_statistics import DecodedSums, StatisticsLayout
from fedrec_flwr.privacy.sum_noise import SumNoise
from fedrec_flwr.schema import ConfigError
from fedrec_flwr.server.model import server_stages
from fedrec_flwr.server.payloads import TrainOrder
from fedrec_flwr.server.validation import ReplyError, ReplySchema, check_number, check_request
from fedrec_flwr.stages import NodeUpload, ServerChain, Upload, uploads_of

__all__ = ["StatisticsModel", "StatisticsUpload", "check_statistics_reply"]

ITEMS, OFFSETS = "basket-items", "basket-offsets"
GRAM, COUNTS, USERS, ROUNDS = "gram", "counts", "contributors", "rounds"
SUPPORT = "support"


@dataclass(frozen=True)
class StatisticsUpload:
    """One node's valid upload (plain: its users' item lists), or a round's decoded sum
    (secure aggregation)."""

    num_users: int
    items: np.ndarray | None = None
    offsets: np.ndarray | None = None
    sums: DecodedSums | None = None


def check_statistics_reply(
    arrays: Mapping[str, np.ndarray],
    metrics: Mapping[str, Any],
    schema: ReplySchema,
    order: TrainOrder,
) -> StatisticsUpload:
    """The upload of a valid plain train reply; raise :class:`ReplyError` otherwise: item
    lists of at most the selected users, distinct items in range, each list within
    ``itemitem-max-degree`` (``schema.max_degree``; the bound the noise is calibrated to)."""
    allowed = {ITEMS, OFFSETS, "next-items"}
    extra = sorted(set(arrays) - allowed)
    missing = sorted({ITEMS, OFFSETS} - set(arrays))
    if extra or missing:
        raise ReplyError(
            f"a co-occurrence upload carries {ITEMS} and {OFFSETS} only "
            f"(missing: {missing}, not allowed: {extra})"
        )
    num_users = int(check_number(metrics, "num-users", integral=True))
    check_number(metrics, "num-samples", integral=True)
    check_number(metrics, "loss-sum")
    items, offsets = np.asarray(arrays[ITEMS]), np.asarray(arrays[OFFSETS])
    if items.dtype != np.int64 or offsets.dtype != np.int64 or items.ndim != 1:
        raise ReplyError(f"{ITEMS} and {OFFSETS} must be int64 vectors")
    if num_users > len(order.users) or len(offsets) != num_users + 1:
        raise ReplyError(
            f"{len(offsets) - 1} item lists, num-users={num_users}, {len(order.users)} users "
            "selected on this node this round"
        )
    sizes = np.diff(offsets)
    if offsets[0] != 0 or offsets[-1] != len(items) or (sizes < 0).any():
        raise ReplyError(f"{OFFSETS} must rise from 0 to the number of items uploaded")
    if len(items) and (items.min() < 0 or items.max() >= schema.num_items):
        raise ReplyError(f"{ITEMS} holds ids outside [0, {schema.num_items})")
    if schema.max_degree and len(sizes) and sizes.max() > schema.max_degree:
        raise ReplyError(
            f"a user uploaded {sizes.max()} items, above itemitem-max-degree={schema.max_degree}"
        )
    owner = np.repeat(np.arange(num_users), sizes)
    keys = owner * schema.num_items + items
    if len(np.unique(keys)) != len(keys):
        raise ReplyError(f"an item list of {ITEMS} holds an item twice")
    check_request(arrays, metrics, schema.num_items)
    return StatisticsUpload(num_users, items, offsets)


def secure_statistics(total: np.ndarray, layout: StatisticsLayout) -> StatisticsUpload:
    """A round's unmasked secure sum as one upload (raises SecureAggregationError)."""
    sums = layout.decode(total)
    return StatisticsUpload(sums.num_users, sums=sums)


def add_upper(target: np.ndarray, upper: np.ndarray, coords: np.ndarray) -> None:
    """Add the symmetric matrix whose upper triangle over ``coords`` (row-major, diagonal
    included) is ``upper`` to ``target`` in place, a row at a time."""
    size, start = len(coords), 0
    for i in range(size):
        segment = upper[start : start + size - i]
        target[coords[i], coords[i:]] += segment
        target[coords[i + 1 :], coords[i]] += segment[1:]
        start += size - i


def check_gram_rank(rank: int, num_items: int) -> None:
    """Refuse an ``itemitem-gram-rank`` that keeps every eigenvalue of the catalogue's sums."""
    if rank >= num_items:
        raise ConfigError(
            f"itemitem-gram-rank={rank} keeps every eigenvalue of a {num_items}-item "
            f"catalogue's co-occurrences, which projects nothing: set it below {num_items} "
            "(e.g. 64), or 0 to read the sums as they are."
        )


class StatisticsModel:
    """The released sums, the support, the model computed from them and the item table it
    serves (``W^T``)."""

    def __init__(self, config: RunConfig, method: ItemItem, num_items: int) -> None:
        self.keys = config.group(ItemItemKeys)
        self.seed = config.training.seed
        self.method = method
        self.kind = str(self.keys.itemitem_model)
        self.noise = SumNoise.of(config)
        check_gram_rank(self.keys.itemitem_gram_rank, num_items)
        self.min_count = max(int(self.keys.itemitem_min_count), 1)
        self.two_rounds = two_rounds(config)
        self.gram = np.zeros((num_items, num_items), dtype=np.float64)
        self.counts = np.zeros(num_items, dtype=np.float64)
        self.support: np.ndarray | None = None  # items the model covers (None: none yet)
        self.contributors = 0
        self.rounds = 0  # training rounds started (keys each round's noise)
        self.table = np.zeros((num_items, num_items), dtype=np.float32)
        self.round_start_table = self.table
        self.dense: dict[str, np.ndarray] = {}
        self.zero_threshold: float | None = None  # the table is dense
        self.defended = False
        self.touched_ever = np.zeros(num_items, dtype=bool)
        #: The run's server stages: only whether the nodes mask their vectors counts (the
        #: reader decodes a masked round's sums itself, :func:`secure_statistics`).
        self.stages = ServerChain(server_stages(config, method, num_items))

    @property
    def num_items(self) -> int:
        return len(self.table)

    @property
    def row_dim(self) -> int:
        return self.table.shape[1]

    def check_contributors(self, users_per_node: int) -> None:
        """Nothing to refuse: the server's defences against poisoned rows do not apply."""

    def limit_values(self, limit: float) -> None:
        """Nothing to limit: the table is computed from the released sums, whose bounds are
        checked as they are read (:meth:`StatisticsLayout.decode`), not uploaded."""

    def decode(self, uploads: list[NodeUpload]) -> list[NodeUpload]:
        """The round's uploads as they were read (already decoded)."""
        return uploads

    def refusals(self, uploads: Sequence[Upload]) -> list[str | None]:
        """None for each upload: ``update-limit`` bounds row changes, and a co-occurrence
        upload has none (its bounds are checked as it is read: :func:`check_statistics_reply`,
        :meth:`StatisticsLayout.decode`)."""
        return [None] * len(uploads_of(StatisticsUpload, uploads))

    def load_initial(self, table: np.ndarray, dense: Mapping[str, np.ndarray]) -> None:
        """Round 1's table: the model of no user (all zeros)."""
        table = np.asarray(table, dtype=np.float32)
        if table.shape != self.table.shape or dense:
            raise ValueError(f"item-table {table.shape}, expected {self.table.shape}, no dense")
        self.table = self.round_start_table = table

    def start_round(self) -> None:
        self.rounds += 1
        self.round_start_table = self.table

    def secure_layout(self) -> StatisticsLayout:
        """The layout of this round's secure vectors: the counts, then the co-occurrences
        over the support (two rounds), or both over the catalogue."""
        weighted = self.method.weighted_counts
        if not self.two_rounds:
            return StatisticsLayout(self.num_items, weighted=weighted)
        if self.support is None:
            return StatisticsLayout(self.num_items, gram=False, weighted=weighted)
        return StatisticsLayout(len(self.support), weighted=weighted)

    def train_arrays(self) -> dict[str, np.ndarray]:
        """What a train message carries besides the users: the support of a two-round run
        once it is fixed."""
        if self.two_rounds and self.support is not None:
            return {"itemitem_support": self.support}
        return {}

    def apply(self, uploads: Sequence[Upload]) -> np.ndarray:
        """Add the round's contributions (:class:`StatisticsUpload`; ``TypeError`` for any
        other upload) to the released sums (noised, with the mechanism on) and recompute the
        model if any user's co-occurrences came; return the items the round's users hold."""
        contributions = uploads_of(StatisticsUpload, uploads)
        users = sum(upload.num_users for upload in contributions)
        secure = [upload.sums for upload in contributions if upload.sums is not None]
        if secure and secure[0].upper is None:  # a counts round: the support
            counts = secure[0].counts.astype(np.float64)
            self._release_counts(counts)
            self.support = np.flatnonzero(self.counts >= self.min_count)
            return np.flatnonzero(secure[0].counts > 0)
        counts = np.zeros(self.num_items, dtype=np.float64)
        coords = self._gram_coords()
        for sums in secure:
            assert sums.upper is not None  # a round's secure sum: its counts, or both
            add_upper(self.gram, sums.upper, coords)
            counts[coords] += sums.counts
        for upload in contributions:
            if upload.items is not None and upload.offsets is not None:  # plain item lists
                self._add_baskets(upload.items, upload.offsets, counts)
        touched = np.flatnonzero(counts > 0)
        if users == 0:
            return touched
        self._release(counts, coords)
        self.contributors += users
        self.touched_ever[touched] = True
        self.refresh()
        return touched

    def _gram_coords(self) -> np.ndarray:
        """The items a round's co-occurrences cover: the support of a two-round run (fixed
        by its counts round), else the catalogue."""
        if not self.two_rounds:
            return np.arange(self.num_items)
        if self.support is None:
            raise RuntimeError("a round of co-occurrences before the counts fixed the support")
        return self.support

    def _add_baskets(self, items: np.ndarray, offsets: np.ndarray, counts: np.ndarray) -> None:
        """Add the users' item lists (``items[offsets[j]:offsets[j + 1]]``, user after user)."""
        for lo, hi in pairwise(offsets):
            basket = items[lo:hi]
            self.gram[np.ix_(basket, basket)] += self.method.basket_weight(len(basket))
            counts[basket] += self.method.count_weight(len(basket))

    def _release_counts(self, counts: np.ndarray) -> None:
        """A release of the round's counts (noised with the mechanism on), accumulated."""
        if self.noise is not None:
            self.noise.add_to_counts(counts, self.rounds)
        self.counts += counts

    def _release(self, counts: np.ndarray, coords: np.ndarray) -> None:
        """Release the round's Gram (added to ``self.gram`` already: the noise is added
        there) and, where the model reads them apart from its diagonal, its counts: those
        that fix the support (``itemitem-min-count`` > 1) and GF-CF's degrees."""
        if not self.two_rounds and (self.min_count > 1 or self.kind == "gfcf"):
            self._release_counts(counts)
        if self.noise is not None:  # over the support of a two-round run, else everywhere
            self.noise.add_to_gram(self.gram, self.rounds, coords if self.two_rounds else None)
        if self.kind != "gfcf" and self.min_count <= 1:
            self.counts = np.diagonal(self.gram).copy()  # the diagonal is the released count
        if not self.two_rounds:
            self.support = np.flatnonzero(self.counts >= self.min_count)

    def refresh(self) -> None:
        """Recompute the model from the sums, over the support."""
        support = self.support if self.support is not None else np.empty(0, np.int64)
        block = np.ix_(support, support)
        weights = np.zeros((self.num_items, self.num_items), dtype=np.float32)
        if len(support):
            noise_std = 0.0 if self.noise is None else self.noise.gram_std
            part = model_weights(
                self.kind, self.gram[block], self.counts[support], self.keys, self.seed, noise_std
            )
            weights[block] = part
        self.table = np.ascontiguousarray(weights.T)

    def evaluation_table(self) -> np.ndarray:
        return self.table

    def density(self) -> float:
        """Share of the table's rows that are not all zero."""
        return float(self.table.any(axis=1).mean())

    def dp_record(self) -> dict | None:
        """``summary.json``'s ``dp_user_level`` (None without the mechanism)."""
        return None if self.noise is None else self.noise.record()

    def state_dict(self) -> dict[str, Any]:
        state = {
            GRAM: self.gram,
            COUNTS: self.counts,
            USERS: np.array(self.contributors),
            ROUNDS: np.array(self.rounds),
            "touched-ever": self.touched_ever,
        }
        if self.support is not None:
            state[SUPPORT] = self.support
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        missing = [key for key in (GRAM, COUNTS, USERS, ROUNDS) if key not in state]
        if missing:
            raise ValueError(
                f"the server state lacks {', '.join(missing)}: it was saved by a run of "
                "another method; resume with that run's configuration"
            )
        self.gram = np.array(state[GRAM], dtype=np.float64)
        self.counts = np.array(state[COUNTS], dtype=np.float64)
        self.contributors = int(state[USERS])
        self.rounds = int(state[ROUNDS])
        self.touched_ever = np.array(state["touched-ever"], dtype=bool)
        self.support = np.array(state[SUPPORT], dtype=np.int64) if SUPPORT in state else None
        if self.contributors:
            self.refresh()
