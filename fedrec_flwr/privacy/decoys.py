"""Decoy rows: items a user never interacted with, requested and uploaded beside its real
rows so that the set of rows it touches does not give its items away.

A user's decoys are one fixed set per (seed, user) (not per round): the rows it requests
every round are then its positives, its decoys and that round's fresh negatives, so an
observer intersecting its requests of several rounds finds the positives and the decoys in
every one of them, not the positives alone. ``decoy-ratio`` ``r``: ``ceil(r * m)`` decoys
for a user with ``m`` distinct train positives (at most the items it never interacted
with). They are drawn from the items outside all its interactions (train, validation and
test), so a decoy is never one of its positives. A decoy row is uploaded as the global row
it was sent (a zero change) plus the same LDP noise as every other row: see
:mod:`fedrec_flwr.privacy.uploads` for why the aggregate is not biased by them.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from fedrec_flwr.sampling import sample_excluding
from fedrec_flwr.schema import NON_NEGATIVE, ConfigError, Key, KeyGroup
from fedrec_flwr.seeding import keyed_rng


class UserItems(Protocol):
    """What the decoys read of the data (:class:`~fedrec_flwr.data.prepared.PreparedData`)."""

    num_items: int

    def interacted(self, user: int) -> np.ndarray: ...

    def train_positives(self, user: int) -> np.ndarray: ...


def check_decoys(config: Any) -> None:
    if config.decoy_ratio > 0 and config.aggregation != "round-mean":
        raise ConfigError(
            "decoy-ratio > 0 needs aggregation='round-mean': toucher-mean divides a row's "
            "change by its number of uploaders, which decoys inflate unseen by the server."
        )


DECOY_KEYS = KeyGroup(
    title="Decoys (plug-in)",
    owner=__name__,
    plugin="decoys",
    check=check_decoys,
    keys=(
        Key(
            "decoy-ratio",
            0.0,
            "decoy rows per distinct train positive, requested and uploaded by each user (fixed "
            "per seed and user, never an item it interacted with; `round-mean` only)",
            range=NON_NEGATIVE,
            why=": decoy rows per distinct train positive (0 = none)",
        ),
    ),
)


def num_decoys(ratio: float, num_positives: int, num_free: int) -> int:
    """``ceil(ratio * num_positives)``, at most ``num_free`` (items never interacted with)."""
    if ratio <= 0:
        return 0
    return min(math.ceil(ratio * num_positives - 1e-9), num_free)


def decoy_items(prepared: UserItems, seed: int, ratio: float, user: int) -> np.ndarray:
    """The user's decoy items (sorted, distinct), keyed by (seed, user)."""
    if ratio <= 0:
        return np.empty(0, dtype=np.int64)
    interacted = prepared.interacted(user)
    positives = len(np.unique(prepared.train_positives(user)))
    size = num_decoys(ratio, positives, prepared.num_items - len(interacted))
    rng = keyed_rng(seed, "decoys", user)
    drawn = sample_excluding(rng, prepared.num_items, interacted, size, distinct=True)
    return np.sort(drawn).astype(np.int64)
