"""The secure-aggregation vector of co-occurrence sums (the item-item methods).

Under ``secure-aggregation`` a node uploads one dense vector over the ring of integers modulo
2^64, the same length for every node whatever its users hold, so that no index leaks:

- the upper triangle (diagonal included, ``np.triu_indices`` order) of the sum over its
  users of ``w_u x_u x_u^T``, each user's entries in fixed point, ``round(w_u * 2^32)``
  (:data:`~fedrec_flwr.privacy.secagg.FRACTION_BITS`; exact for ``w_u = 1``);
- the item counts ``sum_u x_u`` (integers), or under ``itemitem-degree-bound`` = ``scale``
  ``sum_u w_u x_u`` (``weighted``: the Gram's diagonal, in the same fixed point);
- its number of users.

A run with ``itemitem-min-count`` > 1 takes two rounds: the first sums the item counts only
(``gram`` False), from which the server fixes the support, the items at least that many users
hold; the second sums the co-occurrences over the support (its ``m`` coordinates:
``m (m + 1) / 2 + m + 1`` entries), which the train message names.

Masks and their sum are :func:`~fedrec_flwr.privacy.secagg.masked` and
:func:`~fedrec_flwr.privacy.secagg.ring_sum`, as for the item rows; the server decodes only
the sum (:meth:`StatisticsLayout.decode`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedrec_flwr.privacy.secagg import (
    FRACTION_BITS,
    TOTAL_LIMIT,
    SecureAggregationError,
    fixed,
    signed,
)


def upper_index(rows: np.ndarray, cols: np.ndarray, num_items: int) -> np.ndarray:
    """Positions of the pairs (rows[k] <= cols[k]) in the row-major upper triangle."""
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    return rows * num_items - rows * (rows - 1) // 2 + (cols - rows)


def basket_pairs(items: np.ndarray, num_items: int) -> np.ndarray:
    """Upper-triangle positions of every pair (i <= j) of one user's sorted ``items``."""
    first, second = np.triu_indices(len(items))
    return upper_index(items[first], items[second], num_items)


@dataclass(frozen=True)
class DecodedSums:
    """A round's decoded sum: the Gram's upper triangle (float64; None in a counts round),
    the counts (int64; float64 when weighted) and the number of users."""

    upper: np.ndarray | None
    counts: np.ndarray
    num_users: int


@dataclass(frozen=True)
class StatisticsLayout:
    """Where each part lies in the vector (see the module doc): over ``num_items``
    coordinates (the catalogue, or the support of a two-round run); ``gram`` False: a
    counts round (the item counts and the number of users only); ``weighted``: each user's
    counts are its ``w_u`` in fixed point, not 1."""

    num_items: int
    gram: bool = True
    weighted: bool = False

    @property
    def triangle(self) -> int:
        return self.num_items * (self.num_items + 1) // 2 if self.gram else 0

    @property
    def length(self) -> int:
        return self.triangle + self.num_items + 1

    def encode(
        self, baskets: Sequence[np.ndarray], weights: Sequence[float], total_users: int
    ) -> np.ndarray:
        """The unmasked vector of some users: ``baskets[k]`` one user's sorted coordinates,
        ``weights[k]`` its ``w_u``, each rounded on its own (the vector of several users is
        the exact sum of theirs). ``total_users`` bounds a user's value."""
        limit = TOTAL_LIMIT / max(total_users, 1)
        out = np.zeros(self.length, dtype=np.uint64)
        counts = out[self.triangle : self.triangle + self.num_items]
        for items, weight in zip(baskets, weights, strict=True):
            items = np.asarray(items, dtype=np.int64)
            value = fixed(np.array([weight]), FRACTION_BITS, limit, "co-occurrence weight")
            if self.gram:
                out[basket_pairs(items, self.num_items)] += value[0]  # distinct positions
            counts[items] += value[0] if self.weighted else np.uint64(1)
        out[-1] = np.uint64(len(baskets))
        return out

    def decode(self, total: np.ndarray) -> DecodedSums:
        """The round's sums from the unmasked total; raises when it cannot be a round's."""
        values = signed(total)
        if len(values) != self.length:
            raise SecureAggregationError(f"the sum has {len(values)} entries, not {self.length}")
        num_users = int(values[-1])
        counts = values[self.triangle : self.triangle + self.num_items]
        unit = 2**FRACTION_BITS if self.weighted else 1
        if num_users < 0 or counts.min(initial=0) < 0 or counts.max(initial=0) > num_users * unit:
            raise SecureAggregationError(
                f"the unmasked sum is not a round's ({num_users} users, counts "
                f"{counts.min(initial=0)}..{counts.max(initial=0)}): a node's masks do not cancel"
            )
        upper = None
        if self.gram:
            upper = values[: self.triangle].astype(np.float64) * 2.0**-FRACTION_BITS
        if self.weighted:
            return DecodedSums(upper, counts.astype(np.float64) * 2.0**-FRACTION_BITS, num_users)
        return DecodedSums(upper, counts.astype(np.int64), num_users)
