"""Each user's entries in a full ranking (:mod:`fedrec_flwr.node.full_ranking`): the CSR of
its train positives, held rows (personal or private, with their own scores), validation and
test items; and its ranks counted from what the blocked product decided, its exclusions
taken out and its held rows put back with their own scores."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fedrec_flwr.data.prepared import EVAL_NEGATIVES_PER_SPLIT, PreparedData
from fedrec_flwr.node import host_loops
from fedrec_flwr.node.personal import run_indices
from fedrec_flwr.node.samples import sorted_unique

#: Flags of a user's (item) entry in its exclusion and held CSR.
TRAIN, HELD, VALID, TEST = 1, 2, 4, 8


class Decided(Protocol):
    """What the matrix product decided (``full_ranking._Decisions``): per user and split
    the items above the band, per entry and sampled negative whether it beats the target."""

    above: np.ndarray
    entries: list[np.ndarray]
    sample: np.ndarray


def beats(scores: np.ndarray, target: np.ndarray) -> np.ndarray:
    """A competitor beats the held-out item: it scores at least as high, or is NaN."""
    return (scores >= target) | np.isnan(scores)


@dataclass
class Entries:
    """Each user's CSR of exclusion and held entries: sorted distinct ``owner * I + item``
    keys with their flags, and the held entries' own scores."""

    owner: np.ndarray
    items: np.ndarray
    flags: np.ndarray
    personal: np.ndarray  # float32 own score of held entries (NaN elsewhere: unused)
    #: (num_items, the entries' keys) of the last :meth:`where` (the arrays never change)
    _keys: tuple[int, np.ndarray] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def where(self, owner: np.ndarray, items: np.ndarray, num_items: int) -> np.ndarray:
        """Index of each (owner, item) among the entries, -1 where it is none."""
        if self._keys is None or self._keys[0] != num_items:
            self._keys = (num_items, self.owner * num_items + self.items)
        keys = self._keys[1]
        wanted = np.asarray(owner, np.int64) * num_items + np.asarray(items, np.int64)
        found = np.minimum(np.searchsorted(keys, wanted), max(len(keys) - 1, 0))
        hit = keys[found] == wanted if len(keys) else np.zeros(len(wanted), dtype=bool)
        return np.where(hit, found, -1)


def read_held(
    entries: Entries, owner: np.ndarray, items: np.ndarray, num_items: int
) -> tuple[np.ndarray, np.ndarray]:
    """(pairs, at): the held rows (``owner[k]``, ``items[k]``) whose own score a ranking
    reads, and their entries. A train positive is excluded from both splits' rankings, and
    never a sampled negative (those avoid every item the user interacted with), so its own
    score is read only where it is also a held-out item. Every held row where the pairs are
    not the entries' held ones in order (distinct, sorted per user)."""
    held = np.flatnonzero(entries.flags & HELD)
    keys = np.asarray(owner, np.int64) * num_items + np.asarray(items, np.int64)
    if len(held) != len(keys) or (np.diff(keys) <= 0).any():
        return np.arange(len(keys)), entries.where(owner, items, num_items)
    flags = entries.flags[held]
    read = ((flags & TRAIN) == 0) | ((flags & (VALID | TEST)) > 0)
    return np.flatnonzero(read), held[read]


def train_csr(prepared: PreparedData, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, items): each of ``users``' train positives (``owner``: its index in
    ``users``), user after user, from the split's CSR (no loop over users)."""
    users = np.asarray(users, dtype=np.int64)
    at = np.asarray(prepared.local(users), dtype=np.int64)  # a device's folder: its own rows
    indptr = np.asarray(prepared.train_indptr, dtype=np.int64)
    starts, counts = indptr[at], indptr[at + 1] - indptr[at]
    items = np.asarray(prepared.train_items)[run_indices(starts, counts)].astype(np.int64)
    return np.repeat(np.arange(len(users), dtype=np.int64), counts), items


def entries_of(
    prepared: PreparedData,
    users: np.ndarray,
    held: tuple[np.ndarray, np.ndarray],
    held_scores: np.ndarray,
) -> Entries:
    """``users``' entries: their train positives, held rows (``held``: (owner, item), with
    their own ``held_scores``), validation and test items."""
    n, every = prepared.num_items, np.arange(len(users), dtype=np.int64)
    parts = [
        (*train_csr(prepared, users), TRAIN),
        (held[0], held[1], HELD),
        (every, np.asarray(prepared.valid_item[users], np.int64), VALID),
        (every, np.asarray(prepared.test_item[users], np.int64), TEST),
    ]
    held_owner = np.asarray(held[0], np.int64)
    size = sum(len(owner) for owner, _, _ in parts)
    if size >= COMPILED_ENTRIES and not (np.diff(held_owner) < 0).any():
        return _compiled_entries(parts, len(users), held_scores, n)
    keys = np.concatenate([owner * n + items for owner, items, _ in parts])
    distinct, inverse = sorted_unique(keys, n * len(users))
    flags = np.zeros(len(distinct), dtype=np.uint8)
    personal = np.full(len(distinct), np.nan, dtype=np.float32)
    lo = 0
    for owner, _, flag in parts:
        where = inverse[lo : lo + len(owner)]
        flags[where] |= flag
        if flag == HELD:
            personal[where] = held_scores
        lo += len(owner)
    owner = distinct // n
    return Entries(owner, distinct - owner * n, flags, personal)


#: Entries from which :func:`entries_of` takes the compiled loop
#: (:func:`fedrec_flwr.node.host_loops.user_entries`; below it, one sort of the keys).
COMPILED_ENTRIES = 1 << 16


def _compiled_entries(
    parts: list[tuple[np.ndarray, np.ndarray, int]],
    users: int,
    held_scores: np.ndarray,
    num_items: int,
) -> Entries:
    """:func:`entries_of` of its parts (each one's owners ascending) in a compiled loop:
    each user's entries marked in a scratch bitmap over the items, read back sorted."""
    every = np.arange(users + 1, dtype=np.int64)
    sizes = np.cumsum([0] + [len(owner) for owner, _, _ in parts])
    bounds = np.stack(
        [
            lo + np.searchsorted(owner, every)
            for (owner, _, _), lo in zip(parts, sizes, strict=False)
        ]
    )
    items = np.concatenate([np.asarray(items, np.int64) for _, items, _ in parts])
    flags = np.array([flag for _, _, flag in parts], dtype=np.uint8)
    held_part = [flag for _, _, flag in parts].index(HELD)
    owner, found, marks, personal = host_loops.user_entries(
        bounds, items, flags, held_part, held_scores, num_items
    )
    return Entries(owner, found, marks, personal)


#: (user, item) slots of the position map :func:`sampled_where` fills at a time.
MAP_SLOTS = 1 << 18  # 1 MB of int64 positions: the map stays in the cache
#: Wanted pairs from which :func:`pair_where` takes the compiled loop (one user at a time).
COMPILED_PAIRS = 1 << 16


def sampled_where(entries: Entries, sample: np.ndarray, num_items: int) -> np.ndarray:
    """:meth:`Entries.where` of each (user ``j``, item ``sample[j, s]``) [a, width]."""
    return pair_where(entries.owner, entries.items, sample, num_items)


def pair_where(owner: np.ndarray, items: np.ndarray, wanted: np.ndarray, num_items: int):
    """Index ``k`` of the pair (``owner[k]``, ``items[k]``) that is (``j``, ``wanted[j, s]``)
    for each entry of ``wanted`` [a, width] (int64; -1 where none): from a position map of
    a block of users' pairs (``owner`` ascending, the pairs distinct, items below
    ``num_items``), filled and cleared again block after block (linear, where a binary
    search per wanted item costs a tenth of a full ranking). From :data:`COMPILED_PAIRS`
    on, the same map one user at a time in a compiled loop
    (:func:`fedrec_flwr.node.host_loops.pair_positions`)."""
    a, width = wanted.shape
    if wanted.size >= COMPILED_PAIRS:
        return host_loops.pair_positions(owner, items, wanted, num_items)
    step = max(1, MAP_SLOTS // max(num_items, 1))
    slots = np.full(min(step, a) * num_items, -1, dtype=np.int64)
    bounds = np.searchsorted(owner, np.arange(0, a + step, step))
    out = np.empty((a, width), dtype=np.int64)
    for block, lo in enumerate(range(0, a, step)):
        hi, first, last = min(a, lo + step), bounds[block], bounds[block + 1]
        keys = (owner[first:last] - lo) * num_items + items[first:last]
        slots[keys] = np.arange(first, last, dtype=np.int64)
        out[lo:hi] = slots[np.arange(hi - lo)[:, None] * num_items + wanted[lo:hi]]
        slots[keys] = -1
    return out


#: The flags that take an entry out of each split's ranking (validation, test).
EXCLUDED_FLAGS = (TRAIN | VALID, TRAIN | VALID | TEST)


def full_ranks(
    entries: Entries, decided: Decided, targets: np.ndarray, num_items: int
) -> tuple[np.ndarray, np.ndarray]:
    """The validation and test ranks over the whole catalogue, the user's exclusions out."""
    a, owner = len(targets), entries.owner
    if len(owner) >= COMPILED_ENTRIES:  # one compiled pass for both splits, no temporaries
        rank, out_of = host_loops.entry_ranks(
            entries, decided.entries, targets, decided.above, EXCLUDED_FLAGS, HELD
        )
        out = np.where(np.isnan(targets), num_items - out_of, rank).astype(np.int64)
        return out[:, 0].copy(), out[:, 1].copy()
    ranks = []
    flags = entries.flags
    excluded = tuple((flags & out) > 0 for out in EXCLUDED_FLAGS)
    held = np.flatnonzero(flags & HELD)  # rescored from their own rows
    held_owner = owner[held]
    for k in range(2):
        counted = decided.entries[k]
        own_beats = counted.copy()
        own_beats[held] = beats(entries.personal[held], targets[held_owner, k])
        own_beats &= ~excluded[k]
        # the entries counted anew in, those the scan counted out (integer counts)
        rank = (
            decided.above[:, k]
            + np.bincount(owner[own_beats], minlength=a)
            - np.bincount(owner[counted], minlength=a)
        )
        valid = num_items - np.bincount(owner[excluded[k]], minlength=a)
        ranks.append(np.where(np.isnan(targets[:, k]), valid, rank).astype(np.int64))
    return ranks[0], ranks[1]


def sampled_ranks(
    entries: Entries,
    decided: Decided,
    targets: np.ndarray,
    sample: np.ndarray,
    num_items: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The validation and test ranks among the sampled negatives (each split's half)."""
    width = sample.shape[1]
    columns = (slice(0, EVAL_NEGATIVES_PER_SPLIT), slice(EVAL_NEGATIVES_PER_SPLIT, width))
    sizes = np.array([len(range(width)[c]) for c in columns])  # a NaN target's rank
    if sample.size >= COMPILED_PAIRS:  # one compiled pass, no position or mask array
        count = host_loops.sampled_counts(
            entries, sample, decided.sample, targets, HELD, EVAL_NEGATIVES_PER_SPLIT, num_items
        )
        out = np.where(np.isnan(targets), sizes, count).astype(np.int64)
        return out[:, 0].copy(), out[:, 1].copy()
    where = sampled_where(entries, sample, num_items).reshape(-1)
    found = np.flatnonzero(where >= 0)
    held = found[(entries.flags[where[found]] & HELD) > 0]  # rescored from their own rows
    split = (held % width >= EVAL_NEGATIVES_PER_SPLIT).astype(np.int64)  # 0: val, 1: test
    sample_beats = np.array(decided.sample, dtype=bool, order="C")
    sample_beats.reshape(-1)[held] = beats(
        entries.personal[where[held]], targets[held // width, split]
    )
    ranks = []
    for k, split_columns in enumerate(columns):
        count = np.count_nonzero(sample_beats[:, split_columns], axis=1)
        ranks.append(np.where(np.isnan(targets[:, k]), sizes[k], count).astype(np.int64))
    return ranks[0], ranks[1]
