"""Negative sampling never returns an item of the protocol's exclusion set."""

import numpy as np
import pytest

from fedrec_flwr.config import RunConfig
from fedrec_flwr.node.samples import user_round_items
from fedrec_flwr.sampling import is_member, sample_excluding
from fedrec_flwr.seeding import keyed_rng


def test_is_member():
    assert is_member(np.array([1, 4, 9, 0]), np.array([0, 4, 5])).tolist() == [
        False,
        True,
        False,
        True,
    ]
    assert is_member(np.array([3]), np.array([], dtype=np.int64)).tolist() == [False]


@pytest.mark.parametrize("distinct", [False, True])
def test_draws_avoid_the_exclusion_set(distinct):
    excluded = np.array([0, 2, 3, 7, 8])
    draws = sample_excluding(np.random.default_rng(1), 10, excluded, 5, distinct=distinct)
    assert len(draws) == 5
    assert not np.isin(draws, excluded).any()
    assert draws.min() >= 0 and draws.max() < 10
    if distinct:
        assert sorted(draws.tolist()) == [1, 4, 5, 6, 9]  # the only five allowed items


def test_distinct_draws_by_rejection_are_distinct():
    excluded = np.arange(0, 1000, 7)
    draws = sample_excluding(np.random.default_rng(0), 1000, excluded, 198, distinct=True)
    assert len(np.unique(draws)) == 198 and not np.isin(draws, excluded).any()


def test_too_few_items_is_a_clear_error():
    with pytest.raises(ValueError, match="only 2 of 4 items"):
        sample_excluding(np.random.default_rng(0), 4, np.array([0, 1]), 3, distinct=True)


def test_keyed_generators_are_reproducible_and_independent():
    a = keyed_rng(3, "train-negatives", 5, 1).integers(0, 10**9, 4)
    assert (a == keyed_rng(3, "train-negatives", 5, 1).integers(0, 10**9, 4)).all()
    assert (a != keyed_rng(3, "train-negatives", 5, 2).integers(0, 10**9, 4)).any()
    assert (a != keyed_rng(3, "shuffle", 5, 1).integers(0, 10**9, 4)).any()


class FakePrepared:
    """One user: train items {0, 1, 2}, validation 3, test 4, among 8 items."""

    num_items = 8

    def __init__(self, protocol):
        self.protocol = protocol

    def train_positives(self, user):
        return np.array([0, 1, 2, 1])

    def negative_exclusion(self, user):
        from fedrec_flwr.data.prepared import PreparedData

        return PreparedData.negative_exclusion(self, user)

    def interacted(self, user):
        return np.array([0, 1, 2, 3, 4])


def test_paper_negatives_avoid_held_out_items_strict_negatives_may_use_them():
    seen_strict = set()
    for round_ in range(1, 40):
        for protocol in ("paper", "strict"):
            config = RunConfig.from_fields(protocol=protocol, num_negatives=4)
            items, labels = user_round_items(FakePrepared(protocol), config, 0, round_)
            negatives = items[labels == 0]
            assert len(negatives) == 16 and labels.sum() == 4
            assert not np.isin(negatives, [0, 1, 2]).any()  # never a train positive
            if protocol == "paper":
                assert not np.isin(negatives, [3, 4]).any()  # the leak the papers' code has
            else:
                seen_strict.update(negatives.tolist())
    assert {3, 4} <= seen_strict  # strict: held-out items are ordinary negatives


@pytest.mark.parametrize("protocol", ["paper", "strict"])
@pytest.mark.parametrize("items", [40, 400])
def test_batched_round_items_are_the_per_user_draws(protocol, items):
    """users_round_items draws exactly what user_round_items draws for each user, in any
    order of the users, including users whose first draw hits their exclusion set (few
    items: most users redraw) and the round's samples built from them."""
    from fedrec_flwr.data.prepared import prepare
    from fedrec_flwr.node.samples import build_round_samples, users_round_items

    config = RunConfig.from_mapping(
        {
            "dataset": "synthetic",
            "protocol": protocol,
            "synthetic-users": 30,
            "synthetic-items": items,
            "synthetic-mean-degree": 8,
            "num-negatives": 3,
        }
    )
    prepared = prepare(config)
    users = np.random.default_rng(items).permutation(prepared.num_users)[:20]
    counts, excluded = prepared.exclusions_of(users)
    wanted = [prepared.negative_exclusion(int(u)) for u in users]
    assert np.array_equal(excluded, np.concatenate(wanted))
    assert counts.tolist() == [len(w) for w in wanted]
    for round_ in (1, 2, 7):
        batched = users_round_items(prepared, config, users, round_)
        for user, (got_items, got_labels) in zip(users, batched, strict=True):
            want_items, want_labels = user_round_items(prepared, config, int(user), round_)
            assert np.array_equal(got_items, want_items)
            assert np.array_equal(got_labels, want_labels)
            assert got_items.dtype == want_items.dtype and got_labels.dtype == want_labels.dtype
        samples = build_round_samples(prepared, config, users, np.arange(len(users)), round_)
        offset = 0
        for j, (got_items, got_labels) in enumerate(batched):  # the per-user layout
            distinct, inverse = np.unique(got_items, return_inverse=True)
            lo, hi = samples.row_offsets[j], samples.row_offsets[j + 1]
            assert np.array_equal(samples.row_items[lo:hi], distinct)
            s_lo, s_hi = samples.sample_offsets[j], samples.sample_offsets[j + 1]
            assert np.array_equal(samples.sample_rows[s_lo:s_hi], inverse + offset)
            assert np.array_equal(samples.sample_labels[s_lo:s_hi], got_labels)
            offset += len(distinct)
    assert users_round_items(prepared, config, np.empty(0, np.int64), 1) == []
    (one,) = users_round_items(prepared, config, users[:1], 3)
    assert np.array_equal(one[0], user_round_items(prepared, config, int(users[0]), 3)[0])


@pytest.mark.parametrize("protocol", ["paper", "strict"])
@pytest.mark.parametrize("compiled", [False, True])
def test_flat_keyed_round_draws_are_the_per_user_draws(protocol, compiled, monkeypatch):
    """round_draws under keyed-numpy (every user at once, flat) holds what users_round_items
    draws user by user, on the compiled and the lockstep path."""
    from fedrec_flwr.data.prepared import prepare
    from fedrec_flwr.node import samples
    from fedrec_flwr.node.samples import RoundDraws, round_draws, users_round_items

    monkeypatch.setattr(samples, "COMPILED_DRAWS", 0 if compiled else 1 << 62)
    config = RunConfig.from_mapping(
        {
            "dataset": "synthetic",
            "protocol": protocol,
            "synthetic-users": 30,
            "synthetic-items": 50,  # few items: many draws are redrawn
            "synthetic-mean-degree": 8,
            "num-negatives": 3,
        }
    )
    prepared = prepare(config)
    users = np.sort(np.random.default_rng(2).permutation(prepared.num_users)[:20])
    for round_ in (1, 4):
        got = round_draws(prepared, config, users, round_)
        want = RoundDraws.from_pairs(users, users_round_items(prepared, config, users, round_))
        for name in ("users", "offsets", "items", "labels"):
            value, wanted = getattr(got, name), getattr(want, name)
            assert value.dtype == wanted.dtype
            np.testing.assert_array_equal(value, wanted)


@pytest.mark.parametrize("size", [0, 1, 50, 5000])
def test_distinct_items_is_np_unique_with_its_inverse(size):
    from fedrec_flwr.node.samples import distinct_items

    items = np.random.default_rng(size).integers(0, 300, size)
    ids, inverse = distinct_items(items, 300)
    want_ids, want_inverse = np.unique(items.astype(np.int64), return_inverse=True)
    assert np.array_equal(ids, want_ids) and ids.dtype == want_ids.dtype
    assert np.array_equal(inverse, want_inverse) and inverse.dtype == np.int64


@pytest.mark.parametrize("compiled_keys", [0, 1 << 30])
@pytest.mark.parametrize("seed", range(6))
def test_user_rows_are_np_unique_of_the_keys(compiled_keys, seed, monkeypatch):
    """The compiled loop (from 0 keys) and the sort give ``np.unique``'s sorted (user, item)
    keys and inverse; users without samples in between included, dense keys and sparse ones."""
    from fedrec_flwr.node import samples

    monkeypatch.setattr(samples, "COMPILED_KEYS", compiled_keys)
    rng = np.random.default_rng(seed)
    users = int(rng.integers(1, 40))
    num_items = int(rng.integers(1, 8)) if seed % 2 else int(rng.integers(100, 5000))
    counts = rng.integers(0, 60, users) * (rng.random(users) < 0.7)
    owner = np.repeat(np.arange(users, dtype=np.int64), counts)
    items = rng.integers(0, num_items, len(owner)).astype(np.int64)
    row_counts, row_items, inverse = samples.user_rows(
        np.r_[0, np.cumsum(counts)], items, num_items
    )
    keys = np.repeat(np.arange(users, dtype=np.int64), row_counts) * num_items + row_items
    want_keys, want_inverse = np.unique(owner * num_items + items, return_inverse=True)
    assert np.array_equal(keys, want_keys) and keys.dtype == want_keys.dtype
    assert np.array_equal(inverse, want_inverse) and inverse.dtype == np.int64
