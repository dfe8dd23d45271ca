"""The compiled form of a full ranking's entries (each user's bitmap read back in order)
gives the entries of the sort of their keys: the same owners, items, flags and own scores."""

from types import SimpleNamespace

import numpy as np
import pytest

from fedrec_flwr.node import rank_entries
from fedrec_flwr.node.rank_entries import entries_of


def _case(seed):
    rng = np.random.default_rng(seed)
    num_users, num_items = int(rng.integers(1, 30)), int(rng.integers(2, 200))
    counts = rng.integers(0, min(num_items, 12), num_users)  # users without train items too
    train = [np.sort(rng.choice(num_items, c, replace=False)) for c in counts]
    prepared = SimpleNamespace(
        num_items=num_items,
        local=lambda users: np.asarray(users, np.int64),
        train_indptr=np.r_[0, np.cumsum(counts)].astype(np.int64),
        train_items=np.concatenate(train).astype(np.int64),
        valid_item=rng.integers(0, num_items, num_users),  # may repeat a train item
        test_item=rng.integers(0, num_items, num_users),
    )
    users = rng.permutation(num_users)[: int(rng.integers(0, num_users + 1))]
    held_counts = rng.integers(0, min(num_items, 9), len(users)) * (rng.random(len(users)) < 0.7)
    held_items = [np.sort(rng.choice(num_items, c, replace=False)) for c in held_counts]
    owner = np.repeat(np.arange(len(users), dtype=np.int64), held_counts)
    items = np.concatenate([np.empty(0, np.int64), *held_items]).astype(np.int64)
    scores = rng.normal(size=len(items)).astype(np.float32)
    scores[rng.random(len(items)) < 0.2] = np.nan  # NaN own scores are kept as they are
    return prepared, users, (owner, items), scores


@pytest.mark.parametrize("seed", range(10))
def test_compiled_entries_equal_the_sorted_keys(seed, monkeypatch):
    prepared, users, held, scores = _case(seed)
    monkeypatch.setattr(rank_entries, "COMPILED_ENTRIES", 1 << 62)
    plain = entries_of(prepared, users, held, scores)
    monkeypatch.setattr(rank_entries, "COMPILED_ENTRIES", 0)
    compiled = entries_of(prepared, users, held, scores)
    for name in ("owner", "items", "flags", "personal"):
        mine, theirs = getattr(compiled, name), getattr(plain, name)
        assert mine.dtype == theirs.dtype and mine.shape == theirs.shape, name
        np.testing.assert_array_equal(mine.view(np.uint8), theirs.view(np.uint8), name)


def test_held_owners_out_of_order_take_the_sort(monkeypatch):
    seed = 0
    prepared, users, held, scores = _case(seed)
    while len(np.unique(held[0])) < 2:  # two owners at least: reversed, they descend
        seed += 1
        prepared, users, held, scores = _case(seed)
    owner, items = held
    flipped = (owner[::-1].copy(), items[::-1].copy())
    monkeypatch.setattr(rank_entries, "COMPILED_ENTRIES", 0)
    got = entries_of(prepared, users, flipped, scores[::-1].copy())
    monkeypatch.setattr(rank_entries, "COMPILED_ENTRIES", 1 << 62)
    want = entries_of(prepared, users, flipped, scores[::-1].copy())
    for name in ("owner", "items", "flags", "personal"):
        np.testing.assert_array_equal(
            getattr(got, name).view(np.uint8), getattr(want, name).view(np.uint8)
        )


def _decided_and_targets(rng, a: int, size: int):
    """Random band decisions (comparisons above, decided entries per split) and targets."""
    decided = SimpleNamespace(
        above=rng.integers(0, 50, (a, 2)),
        entries=[rng.random(size) < 0.4, rng.random(size) < 0.6],
    )
    return decided, rng.normal(size=(a, 2))


@pytest.mark.parametrize("seed", range(10))
def test_compiled_full_ranks_equal_the_counts(seed, monkeypatch):
    prepared, users, held, scores = _case(seed)
    entries = entries_of(prepared, users, held, scores)
    rng = np.random.default_rng(seed + 100)
    decided, targets = _decided_and_targets(rng, len(users), len(entries.owner))
    targets[rng.random(targets.shape) < 0.2] = np.nan  # a user without that split
    ties = entries.flags & rank_entries.HELD > 0  # own scores equal to the target: beaten
    targets[entries.owner[ties][:1], 0] = entries.personal[ties][:1]
    monkeypatch.setattr(rank_entries, "COMPILED_ENTRIES", 1 << 62)
    plain = rank_entries.full_ranks(entries, decided, targets, prepared.num_items)
    monkeypatch.setattr(rank_entries, "COMPILED_ENTRIES", 0)
    compiled = rank_entries.full_ranks(entries, decided, targets, prepared.num_items)
    for mine, theirs in zip(compiled, plain, strict=True):
        assert mine.dtype == theirs.dtype == np.int64
        np.testing.assert_array_equal(mine, theirs)


def test_where_finds_each_pair_whatever_catalogue_it_is_asked_with():
    prepared, users, held, scores = _case(1)
    entries = entries_of(prepared, users, held, scores)
    picks = np.arange(0, len(entries.owner), 3)
    owner, items = entries.owner[picks], entries.items[picks]
    for num_items in (prepared.num_items, prepared.num_items + 7, prepared.num_items):
        np.testing.assert_array_equal(entries.where(owner, items, num_items), picks)
    absent = entries.where(owner[:1], np.array([prepared.num_items + 3]), prepared.num_items + 7)
    np.testing.assert_array_equal(absent, [-1])


@pytest.mark.parametrize("seed", range(10))
def test_compiled_sampled_ranks_equal_the_position_map(seed, monkeypatch):
    """The compiled sampled ranks (one user's entries mapped at a time) against the position
    map and masks: held sampled items rescored from their own scores (NaN ones, ties), NaN
    targets, users without entries, a width that leaves the test split short."""
    prepared, users, held, scores = _case(seed)
    entries = entries_of(prepared, users, held, scores)
    rng = np.random.default_rng(seed + 200)
    a = len(users)
    for width in (2 * rank_entries.EVAL_NEGATIVES_PER_SPLIT, 120, 7):
        sample = rng.integers(0, prepared.num_items, (a, width))
        decided = SimpleNamespace(sample=rng.random((a, width)) < 0.3)
        targets = rng.normal(size=(a, 2)).astype(np.float32)
        targets[rng.random((a, 2)) < 0.2] = np.nan  # a user without that split
        ties = entries.flags & rank_entries.HELD > 0
        targets[entries.owner[ties][:1], 1] = entries.personal[ties][:1]
        monkeypatch.setattr(rank_entries, "COMPILED_PAIRS", 1 << 62)
        plain = rank_entries.sampled_ranks(entries, decided, targets, sample, prepared.num_items)
        monkeypatch.setattr(rank_entries, "COMPILED_PAIRS", 0)
        compiled = rank_entries.sampled_ranks(entries, decided, targets, sample, prepared.num_items)
        for mine, theirs in zip(compiled, plain, strict=True):
            assert mine.dtype == theirs.dtype == np.int64
            np.testing.assert_array_equal(mine, theirs)


@pytest.mark.parametrize("seed", range(10))
def test_the_own_scores_read_are_the_held_rows_but_train_positives(seed):
    """``read_held``: each held row that is no train positive, or is a held-out item too,
    with its entry; full ranks from those own scores alone are the ranks from all of them.
    Held rows out of the entries' order: every one, at its entry."""
    prepared, users, held, scores = _case(seed)
    entries = entries_of(prepared, users, held, scores)
    pairs, at = rank_entries.read_held(entries, *held, prepared.num_items)
    flags = entries.flags[entries.where(*held, prepared.num_items)]
    train, held_out = rank_entries.TRAIN, rank_entries.VALID | rank_entries.TEST
    np.testing.assert_array_equal(pairs, np.flatnonzero((flags & train == 0) | (flags & held_out)))
    np.testing.assert_array_equal(
        at, entries.where(held[0][pairs], held[1][pairs], prepared.num_items)
    )
    partial = entries_of(prepared, users, held, np.full(len(scores), np.nan, np.float32))
    partial.personal[at] = scores[pairs]
    rng = np.random.default_rng(seed + 300)
    decided, targets = _decided_and_targets(rng, len(users), len(entries.owner))
    for mine, theirs in zip(
        rank_entries.full_ranks(partial, decided, targets, prepared.num_items),
        rank_entries.full_ranks(entries, decided, targets, prepared.num_items),
        strict=True,
    ):
        np.testing.assert_array_equal(mine, theirs)
    flipped = (held[0][::-1].copy(), held[1][::-1].copy())
    pairs, at = rank_entries.read_held(entries, *flipped, prepared.num_items)
    np.testing.assert_array_equal(pairs, np.arange(len(scores)))
    np.testing.assert_array_equal(at, entries.where(*flipped, prepared.num_items))
