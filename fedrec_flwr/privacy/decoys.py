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

Options against an attacker who knows the defence (defaults: the behaviour above):

- ``decoy-updates``: ``unchanged`` (the zero change above: identifiable, every decoy row
  comes back exactly as sent); ``negatives`` (the decoys join the user's training samples as
  negatives, so their rows move as a sampled negative's do; the aggregate is then that of
  training with these extra negatives: a documented bias, never towards a positive);
  ``positives`` (trained as positives: they move like real rows, at the cost of teaching
  the user's model and the table that it likes them).
- ``decoy-selection``: ``uniform`` over the items the user never touched, or ``popularity``
  (weighted by each item's number of train users, so that decoys are as popular as positives
  and request counts do not tell them apart).
- ``decoy-request-size`` ``K`` > 0: at least ``K - (1 + num-negatives) m`` decoys, so that
  every user requests about ``K`` rows whatever its number of positives.
"""

from __future__ import annotations

import math
from enum import StrEnum
from functools import lru_cache
from typing import Protocol

import numpy as np

from fedrec_flwr.learning_keys import LearningKeys
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.sampling import sample_excluding
from fedrec_flwr.schema import NON_NEGATIVE, ConfigError, Group, RunValues, key
from fedrec_flwr.seeding import keyed_rng


class UserItems(Protocol):
    """What the decoys read of the data (:class:`~fedrec_flwr.data.prepared.PreparedData`)."""

    num_items: int
    train_indptr: np.ndarray
    train_items: np.ndarray

    def interacted(self, user: int) -> np.ndarray: ...

    def train_positives(self, user: int) -> np.ndarray: ...

    def __hash__(self) -> int: ...  # item_popularity caches by it


class DecoyUpdates(StrEnum):
    """``decoy-updates``: what a decoy row's upload is."""

    UNCHANGED = "unchanged"
    NEGATIVES = "negatives"
    POSITIVES = "positives"


class DecoySelection(StrEnum):
    """``decoy-selection``: how a user's decoys are drawn."""

    UNIFORM = "uniform"
    POPULARITY = "popularity"


def check_decoys(config: RunValues) -> None:
    keys = config.group(DecoyKeys)
    options = (
        keys.decoy_updates != DecoyUpdates.UNCHANGED
        or keys.decoy_selection != DecoySelection.UNIFORM
        or keys.decoy_request_size > 0
    )
    if options and keys.decoy_ratio <= 0:
        raise ConfigError(
            "decoy-updates, decoy-selection and decoy-request-size shape the decoys: set "
            "decoy-ratio > 0 (e.g. 1) to have decoys, or leave those keys at their defaults."
        )
    if keys.decoy_ratio > 0 and config.group(LearningKeys).aggregation != "round-mean":
        raise ConfigError(
            "decoy-ratio > 0 needs aggregation='round-mean': toucher-mean divides a row's "
            "change by its number of uploaders, which decoys inflate unseen by the server."
        )


class DecoyKeys(Group):
    title = "Decoys (plug-in)"
    plugin = "decoys"
    check = check_decoys

    decoy_ratio: float = key(
        default=0.0,
        help="decoy rows per distinct train positive, requested and uploaded by each user "
        "(fixed per seed and user, never an item it interacted with; `round-mean` only)",
        range=NON_NEGATIVE,
        why=": decoy rows per distinct train positive (0 = none)",
    )
    decoy_updates: str = key(
        default=DecoyUpdates.UNCHANGED.value,
        help="a decoy row's upload: `unchanged` (the row as sent), `negatives` or `positives` "
        "(trained with the user's samples under that label, so it moves like a real row)",
        choices=DecoyUpdates,
    )
    decoy_selection: str = key(
        default=DecoySelection.UNIFORM.value,
        help="how decoys are drawn from the items a user never interacted with: `uniform`, "
        "or `popularity` (weighted by the item's number of train users)",
        choices=DecoySelection,
    )
    decoy_request_size: int = key(
        default=0,
        help="at least `K - (1 + num-negatives) m` decoys, so that each user requests about "
        "`K` rows (`m` distinct train positives; 0 = off)",
        range=NON_NEGATIVE,
        why=": the rows each user requests, decoys included (0 = off)",
    )


def num_decoys(ratio: float, num_positives: int, num_free: int) -> int:
    """``ceil(ratio * num_positives)``, at most ``num_free`` (items never interacted with)."""
    if ratio <= 0:
        return 0
    return min(math.ceil(ratio * num_positives - 1e-9), num_free)


@lru_cache(maxsize=4)
def item_popularity(prepared: UserItems) -> np.ndarray:
    """Number of train users of each item (a user's repeats count once)."""
    indptr = np.asarray(prepared.train_indptr)
    owners = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    keys = np.unique(owners * prepared.num_items + np.asarray(prepared.train_items))
    return np.bincount(keys % prepared.num_items, minlength=prepared.num_items)


def decoy_items(
    prepared: UserItems,
    seed: int,
    ratio: float,
    user: int,
    *,
    selection: str = DecoySelection.UNIFORM,
    request_size: int = 0,
    negatives_per_positive: int = 0,
) -> np.ndarray:
    """The user's decoy items (sorted, distinct), keyed by (seed, user): ``ratio`` per
    distinct train positive, or enough to fill ``request_size`` requested rows (with
    ``negatives_per_positive`` fresh negatives per positive), from the items the user never
    interacted with, drawn uniformly or by ``popularity``."""
    if ratio <= 0:
        return np.empty(0, dtype=np.int64)
    interacted = prepared.interacted(user)
    positives = len(np.unique(prepared.train_positives(user)))
    free = prepared.num_items - len(interacted)
    size = num_decoys(ratio, positives, free)
    if request_size > 0:
        size = max(size, min(request_size - (1 + negatives_per_positive) * positives, free))
    rng = keyed_rng(seed, "decoys", user)
    if selection == DecoySelection.POPULARITY:
        pool = np.setdiff1d(np.arange(prepared.num_items, dtype=np.int64), interacted)
        weights = item_popularity(prepared)[pool] + 1e-6  # never-trained items: barely drawn
        drawn = rng.choice(pool, size=size, replace=False, p=weights / weights.sum())
    else:
        drawn = sample_excluding(rng, prepared.num_items, interacted, size, distinct=True)
    return np.sort(drawn).astype(np.int64)


def user_decoys(prepared: UserItems, config: RunGroups, user: int) -> np.ndarray:
    """:func:`decoy_items` of ``user`` under the run's decoy keys (and its seed and number
    of negatives)."""
    keys, training = config.group(DecoyKeys), config.training
    return decoy_items(
        prepared,
        training.seed,
        keys.decoy_ratio,
        user,
        selection=keys.decoy_selection,
        request_size=keys.decoy_request_size,
        negatives_per_positive=training.num_negatives,
    )


def with_trained_decoys(
    prepared: UserItems, config: RunGroups, user: int, items: np.ndarray, labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """A user's round samples (``items``, ``labels``) with its decoys appended as samples
    labelled by ``decoy-updates`` (unchanged: the samples as they are)."""
    keys = config.group(DecoyKeys)
    if keys.decoy_ratio <= 0 or keys.decoy_updates == DecoyUpdates.UNCHANGED:
        return items, labels
    decoys = user_decoys(prepared, config, user)
    label = 1.0 if keys.decoy_updates == DecoyUpdates.POSITIVES else 0.0
    return np.r_[items, decoys], np.r_[labels, np.full(len(decoys), label, labels.dtype)]
