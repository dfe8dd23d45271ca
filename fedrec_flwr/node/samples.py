"""A round's training samples of a node's users (:class:`RoundSamples`).

Per user and round: its train rows as positives plus ``num-negatives`` fresh uniform
negatives per positive (generator keyed by (seed, user, round)), from the items the protocol
allows or, with ``train-negatives = "non-train"``, every item not among its train positives.
The users' distinct items become their blocks of item rows, each sample pointing at its row.
Everything here is a draw or an index computation: the same for a user whatever other users
share its node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import PreparedData
from fedrec_flwr.node import host_loops
from fedrec_flwr.node.counter_rng import counter_negatives
from fedrec_flwr.privacy.decoys import DecoyKeys, DecoyUpdates, with_trained_decoys
from fedrec_flwr.run_keys import TrainNegatives
from fedrec_flwr.sampling import NegativeSampler, is_member, sample_excluding
from fedrec_flwr.seeding import STREAMS, keyed_pcg64_states, keyed_rng, keyed_rngs


def user_round_items(
    prepared: PreparedData, config: RunConfig, user: int, server_round: int
) -> tuple[np.ndarray, np.ndarray]:
    """(items, labels) a user trains on in a round: its positives, then its negatives."""
    positives = prepared.train_positives(user)
    excluded = negative_exclusion(prepared, config, user)
    size = config.training.num_negatives * len(positives)
    if config.sampler.negative_sampler == NegativeSampler.COUNTER:
        negatives = counter_round_negatives(
            config, [user], server_round, [size], [len(excluded)], excluded, prepared.num_items
        )
    else:
        rng = keyed_rng(config.training.seed, "train-negatives", user, server_round)
        negatives = sample_excluding(rng, prepared.num_items, excluded, size)
    labels = np.r_[np.ones(len(positives), np.float32), np.zeros(len(negatives), np.float32)]
    return with_trained_decoys(prepared, config, user, np.r_[positives, negatives], labels)


def negative_exclusion(prepared: PreparedData, config: RunConfig, user: int) -> np.ndarray:
    """Items the user's training negatives avoid (sorted): the protocol's, or with
    ``train-negatives = "non-train"`` its train positives only."""
    if config.training.train_negatives == TrainNegatives.NON_TRAIN:
        return np.unique(prepared.train_positives(user))
    return prepared.negative_exclusion(user)


def negative_exclusions(
    prepared: PreparedData, config: RunConfig, users: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(counts, items): :func:`negative_exclusion` of each of ``users``, concatenated."""
    if config.training.train_negatives != TrainNegatives.NON_TRAIN:
        return prepared.exclusions_of(users)
    parts = [negative_exclusion(prepared, config, int(u)) for u in users]
    counts = np.array([len(part) for part in parts], dtype=np.int64)
    return counts, np.concatenate(parts) if parts else np.empty(0, np.int64)


def distinct_items(items: np.ndarray, num_items: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(items, return_inverse=True)`` for item ids in ``range(num_items)``, by a
    mask over the items instead of a sort (linear in the rows and the catalogue)."""
    items = np.asarray(items, dtype=np.int64)
    mask = np.zeros(num_items, dtype=bool)
    mask[items] = True
    ids = np.flatnonzero(mask).astype(np.int64)
    where = np.zeros(num_items, dtype=np.int64)
    where[ids] = np.arange(len(ids), dtype=np.int64)
    return ids, where[items]


#: Draws from which :func:`users_round_items` (``keyed-numpy``) takes the compiled loop.
COMPILED_DRAWS = 1 << 14
#: Entries from which :func:`user_rows` takes the compiled loop (below: one sort).
COMPILED_KEYS = 1 << 16


def sorted_unique(keys: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` for non-negative int64 ``keys`` below
    ``bound``: one sort of the keys with their index in the low bits (a value sort, not an
    argsort) where both fit 63 bits."""
    shift = max(int(len(keys) - 1).bit_length(), 1)
    if len(keys) == 0 or int(bound - 1).bit_length() + shift > 63:
        return np.unique(keys, return_inverse=True)
    # unique values: any sort gives the same array; the stable one (timsort) uses the
    # keys' runs (sorted by user) and takes half the time of the default
    packed = np.sort((keys << shift) | np.arange(len(keys), dtype=np.int64), kind="stable")
    ordered, order = packed >> shift, packed & ((1 << shift) - 1)
    first = np.empty(len(keys), dtype=bool)
    first[0], first[1:] = True, ordered[1:] != ordered[:-1]
    inverse = np.empty(len(keys), dtype=np.int64)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse


def user_rows(
    offsets: np.ndarray, items: np.ndarray, num_items: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each user's distinct items (sorted) as its block of rows, user ``j`` owning
    ``items[offsets[j]:offsets[j+1]]``: (rows per user, the rows' items, each entry's row).
    One unique over (user, item) keys (sorted by user, then item); from ``COMPILED_KEYS``
    entries the compiled loop gives the three at once
    (:func:`fedrec_flwr.node.host_loops.user_rows`)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    if len(items) >= COMPILED_KEYS:
        return host_loops.user_rows(offsets, items, num_items)
    users = len(offsets) - 1
    owner = np.repeat(np.arange(users, dtype=np.int64), np.diff(offsets))
    keys, inverse = sorted_unique(
        owner * num_items + np.asarray(items, np.int64), users * num_items
    )
    row_owner = keys // num_items
    return np.bincount(row_owner, minlength=users), keys - row_owner * num_items, inverse


def users_round_items(
    prepared: PreparedData, config: RunConfig, users: np.ndarray, server_round: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`user_round_items` of each of ``users``, the same draws from the same keyed
    generators: from ``COMPILED_DRAWS`` draws each generator stepped in a compiled loop
    (:func:`fedrec_flwr.node.host_loops.keyed_negatives`), below it the membership tests
    against the exclusion sets made for all users at once (:func:`lockstep_negatives`)."""
    users = np.asarray(users, dtype=np.int64)
    if len(users) < 2:  # one user (a faithful-mode node): no batching to gain
        return [user_round_items(prepared, config, int(u), server_round) for u in users]
    counts, excluded = negative_exclusions(prepared, config, users)
    n = prepared.num_items
    positives = [prepared.train_positives(int(u)) for u in users]
    sizes = np.array([config.training.num_negatives * len(p) for p in positives], dtype=np.int64)
    if config.sampler.negative_sampler == NegativeSampler.COUNTER:  # every user at once
        flat = counter_round_negatives(config, users, server_round, sizes, counts, excluded, n)
        return assembled(prepared, config, users, positives, np.split(flat, np.cumsum(sizes)[:-1]))
    fallback = drawn_alone(sizes, counts, n)
    sizes[fallback] = 0  # those draw user by user below
    seed = config.training.seed
    flat = keyed_round_negatives(seed, users, server_round, sizes, counts, excluded, n)
    draws = np.split(flat, np.cumsum(sizes)[:-1])
    result = assembled(prepared, config, users, positives, draws)
    for j in np.flatnonzero(fallback):
        result[j] = user_round_items(prepared, config, int(users[j]), server_round)
    return result


def drawn_alone(sizes: np.ndarray, counts: np.ndarray, n: int) -> np.ndarray:
    """The users whose ``keyed-numpy`` draws are made user by user, not flat: nothing to
    draw, or every item excluded (``sample_excluding``'s own error)."""
    return (sizes == 0) | (counts >= n)


def keyed_round_negatives(
    seed: int,
    users: np.ndarray,
    server_round: int,
    sizes: np.ndarray,
    counts: np.ndarray,
    excluded: np.ndarray,
    n: int,
) -> np.ndarray:
    """``negative-sampler = "keyed-numpy"``: each user's ``sample_excluding`` draws, flat
    (generator keyed by (seed, user, round); each user ``counts[j]`` sorted exclusions next
    in ``excluded``, fewer than ``n``): from ``COMPILED_DRAWS`` draws each generator stepped
    in a compiled loop, below it :func:`lockstep_negatives`."""
    key_rows = np.stack([users, np.full_like(users, server_round)], 1)
    if int(sizes.sum()) >= COMPILED_DRAWS:  # each generator stepped in a compiled loop
        states = keyed_pcg64_states(seed, "train-negatives", key_rows)
        return host_loops.keyed_negatives(states, sizes, counts, excluded, n)
    return lockstep_negatives(seed, key_rows, sizes, counts, excluded, n)


def lockstep_negatives(
    seed: int,
    key_rows: np.ndarray,
    sizes: np.ndarray,
    counts: np.ndarray,
    excluded: np.ndarray,
    n: int,
) -> np.ndarray:
    """Each user's ``sample_excluding`` draws (generator keyed by its row of ``key_rows``),
    flat, with the membership tests made for all of them at once."""
    rngs = keyed_rngs(seed, "train-negatives", key_rows)
    draws = [
        rng.integers(0, n, size=int(size), dtype=np.int64) if size else np.empty(0, np.int64)
        for rng, size in zip(rngs, sizes, strict=True)
    ]
    # (position in users, item) keys: the exclusion sets' are sorted, as the users' order is.
    excluded_keys = np.repeat(np.arange(len(sizes), dtype=np.int64), counts) * n + excluded
    draw_owner = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    flat = np.concatenate(draws)
    # sample_excluding's rejection loop, every user's in lockstep: each redraws its rejected
    # entries from its own generator, in the same order, until none is excluded.
    wrong = np.flatnonzero(is_member(draw_owner * n + flat, excluded_keys))
    while len(wrong):
        owners, counts_wrong = np.unique(draw_owner[wrong], return_counts=True)
        flat[wrong] = np.concatenate(
            [
                rngs[j].integers(0, n, size=int(c), dtype=np.int64)
                for j, c in zip(owners, counts_wrong, strict=True)
            ]
        )
        wrong = wrong[is_member(draw_owner[wrong] * n + flat[wrong], excluded_keys)]
    return flat


def assembled(
    prepared: PreparedData,
    config: RunConfig,
    users: np.ndarray,
    positives: list[np.ndarray],
    draws: list[np.ndarray],
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each user's (items, labels): its positives, then its negatives ``draws``."""
    result = []
    for j, user in enumerate(users):
        labels = np.zeros(len(positives[j]) + len(draws[j]), np.float32)
        labels[: len(positives[j])] = 1.0
        items = np.concatenate([positives[j], draws[j]])
        result.append(with_trained_decoys(prepared, config, int(user), items, labels))
    return result


def counter_round_negatives(
    config: RunConfig,
    users: np.ndarray | list[int],
    server_round: int,
    sizes: np.ndarray | list[int],
    counts: np.ndarray | list[int],
    excluded: np.ndarray,
    num_items: int,
) -> np.ndarray:
    """``negative-sampler = "counter"``: the users' negatives from the keyed Philox stream,
    drawn on the run's device (the same integers on CPU and CUDA)."""
    stream = STREAMS["train-negatives"]
    return counter_negatives(
        config.training.seed,
        stream,
        server_round,
        users,
        sizes,
        counts,
        excluded,
        num_items,
        device=config.execution.device,
    )


@dataclass(frozen=True)
class RoundDraws:
    """Every user's (items, labels) of a round, flat: user ``j`` (global id ``users[j]``)
    owns ``items[offsets[j]:offsets[j+1]]`` and their labels."""

    users: np.ndarray
    offsets: np.ndarray
    items: np.ndarray
    labels: np.ndarray

    @classmethod
    def from_pairs(
        cls, users: np.ndarray, pairs: list[tuple[np.ndarray, np.ndarray]]
    ) -> RoundDraws:
        counts = np.array([len(items) for items, _ in pairs], dtype=np.int64)
        empty = np.empty(0, np.int64)
        return cls(
            users=np.asarray(users, dtype=np.int64),
            offsets=np.r_[0, np.cumsum(counts)].astype(np.int64),
            items=np.concatenate([i for i, _ in pairs]).astype(np.int64) if pairs else empty,
            labels=np.concatenate([lab for _, lab in pairs]).astype(np.float32)
            if pairs
            else np.empty(0, np.float32),
        )

    def pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each user's (items, labels)."""
        cuts = self.offsets[1:-1]
        return list(zip(np.split(self.items, cuts), np.split(self.labels, cuts), strict=True))


def round_draws(
    prepared: PreparedData, config: RunConfig, users: np.ndarray, server_round: int
) -> RoundDraws:
    """:func:`users_round_items` of ``users``, flat. Without trained decoys (and under
    ``keyed-numpy`` for two users or more, each with something to draw), built for every
    user at once in array ops (positives gathered from the train rows, negatives from
    :func:`counter_round_negatives` or :func:`keyed_round_negatives`): the same items and
    labels, no Python loop over users."""
    users = np.asarray(users, dtype=np.int64)
    decoys = config.group(DecoyKeys)
    trained_decoys = decoys.decoy_ratio > 0 and decoys.decoy_updates != DecoyUpdates.UNCHANGED
    counter = config.sampler.negative_sampler == NegativeSampler.COUNTER
    if trained_decoys or (not counter and len(users) < 2):
        return RoundDraws.from_pairs(
            users, users_round_items(prepared, config, users, server_round)
        )
    at = np.asarray(prepared.local(users), dtype=np.int64)  # a device's folder: its own rows
    indptr = np.asarray(prepared.train_indptr, dtype=np.int64)
    first, positives = indptr[at], indptr[at + 1] - indptr[at]
    sizes = config.training.num_negatives * positives
    counts, excluded = negative_exclusions(prepared, config, users)
    n = prepared.num_items
    if counter:
        negatives = counter_round_negatives(config, users, server_round, sizes, counts, excluded, n)
    elif drawn_alone(sizes, counts, n).any():
        return RoundDraws.from_pairs(
            users, users_round_items(prepared, config, users, server_round)
        )
    else:
        seed = config.training.seed
        negatives = keyed_round_negatives(seed, users, server_round, sizes, counts, excluded, n)
    offsets = np.r_[0, np.cumsum(positives + sizes)].astype(np.int64)
    before = np.cumsum(positives) - positives  # positives of the users before
    rank = np.arange(int(positives.sum()), dtype=np.int64) - np.repeat(before, positives)
    where = np.repeat(offsets[:-1], positives) + rank  # each positive's slot
    items = np.empty(int(offsets[-1]), dtype=np.int64)
    labels = np.zeros(int(offsets[-1]), dtype=np.float32)
    items[where] = np.asarray(prepared.train_items)[np.repeat(first, positives) + rank]
    labels[where] = 1.0
    is_negative = np.ones(len(items), dtype=bool)
    is_negative[where] = False
    items[is_negative] = negatives  # each user's negatives after its positives, in order
    return RoundDraws(users=users, offsets=offsets, items=items, labels=labels)


@dataclass(frozen=True)
class RoundSamples:
    """Training samples of several users, each with its own block of item rows.

    User ``j`` owns flat rows ``row_offsets[j]:row_offsets[j+1]`` (items ``row_items``) and
    samples ``sample_offsets[j]:sample_offsets[j+1]`` (flat row ``sample_rows``, label).
    """

    users: np.ndarray
    positions: np.ndarray
    row_offsets: np.ndarray
    row_items: np.ndarray
    sample_offsets: np.ndarray
    sample_rows: np.ndarray
    sample_labels: np.ndarray

    def row_positions(self) -> np.ndarray:
        """The node position of the user owning each flat row."""
        return np.repeat(self.positions, np.diff(self.row_offsets))

    def positive_row_mask(self) -> np.ndarray:
        """Mask of the flat rows whose item is a train positive of its user.

        A user trains on all its train positives every round (``user_round_items``) and its
        negatives avoid them, so these are exactly the rows with a positive sample."""
        mask = np.zeros(int(self.row_offsets[-1]), dtype=bool)
        mask[self.sample_rows[self.sample_labels > 0]] = True
        return mask


def build_round_samples(
    prepared: PreparedData,
    config: RunConfig,
    users: np.ndarray,
    positions: np.ndarray,
    server_round: int,
    items_of: Callable[[int], tuple[np.ndarray, np.ndarray]] | None = None,
    draws: RoundDraws | None = None,
) -> RoundSamples:
    """Samples of ``users`` (global ids; ``positions`` in the node's private tensors).

    ``draws`` (the round's draws, of these users or others) or ``items_of(user)`` may
    supply the (items, labels) if they were drawn already.
    """
    users = np.asarray(users, dtype=np.int64)
    if draws is None or not np.array_equal(draws.users, users):  # user by user
        planned = {}
        if draws is not None:
            planned = dict(zip(draws.users.tolist(), draws.pairs(), strict=True))
        if items_of is None:

            def items_of(user: int) -> tuple[np.ndarray, np.ndarray]:
                return user_round_items(prepared, config, user, server_round)

        pairs = [planned[u] if u in planned else items_of(u) for u in users.tolist()]
        draws = RoundDraws.from_pairs(users, pairs)
    row_counts, row_items, sample_rows = user_rows(draws.offsets, draws.items, prepared.num_items)
    return RoundSamples(
        users=users,
        positions=np.asarray(positions, dtype=np.int64),
        row_offsets=np.r_[0, np.cumsum(row_counts)].astype(np.int64),
        row_items=np.asarray(row_items, np.int64),  # the compiled loop's arrays, not copies
        sample_offsets=draws.offsets,
        sample_rows=np.asarray(sample_rows, np.int64).reshape(-1),
        sample_labels=draws.labels,
    )
