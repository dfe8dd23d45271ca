"""The compiled host loops give the integers of the tensor ops they stand for: the counter
negatives and the counter shuffle (Philox words and redraws), each user's distinct items,
and the float64 row sums bit for bit."""

import numpy as np
import pytest
import torch

from fedrec_flwr.node import counter_rng, host_loops, lockstep
from fedrec_flwr.node.samples import sorted_unique
from fedrec_flwr.node.upload import float64_row_sums
from fedrec_flwr.seeding import STREAMS


def _case(seed):
    rng = np.random.default_rng(seed)
    users_count, num_items = int(rng.integers(1, 40)), int(rng.integers(5, 300))
    high = 1 << 33 if seed % 3 == 0 else 1000  # ids past 32 bits: the counter keeps the low word
    users = rng.integers(0, high, users_count)
    counts = rng.integers(0, num_items, users_count)  # up to all but one item excluded
    sizes = rng.integers(0, 70, users_count) * (rng.random(users_count) < 0.8)
    sets = [np.sort(rng.choice(num_items, c, replace=False)) for c in counts]
    return rng, users, sizes, counts, np.concatenate(sets), num_items


@pytest.mark.parametrize("seed", range(8))
def test_compiled_negatives_equal_the_tensor_ops(seed, monkeypatch):
    rng, users, sizes, counts, excluded, num_items = _case(seed)
    key, server_round = int(rng.integers(0, 1 << 63)), int(rng.integers(0, 1 << 33))
    args = (key, 3, server_round, users, sizes, counts, excluded, num_items)
    monkeypatch.setattr(counter_rng, "COMPILED_DRAWS", 1 << 62)
    tensor_ops = counter_rng.counter_negatives(*args)
    compiled = host_loops.counter_negatives(*args, counter_rng.MAX_ATTEMPTS)
    np.testing.assert_array_equal(compiled, tensor_ops)
    monkeypatch.setattr(counter_rng, "COMPILED_DRAWS", 0)  # the node's call takes the loop
    np.testing.assert_array_equal(counter_rng.counter_negatives(*args), tensor_ops)


def test_compiled_negatives_say_when_attempts_run_out():
    with pytest.raises(RuntimeError, match="attempts"):  # 1 of 5000 items allowed, 2 tries
        host_loops.counter_negatives(
            1, 3, 1, np.array([0]), np.array([50]), np.array([4999]), np.arange(4999), 5000, 2
        )


@pytest.mark.parametrize("seed", range(8))
def test_compiled_shuffle_equals_the_tensor_ops(seed, monkeypatch):
    rng, users, sizes, *_ = _case(seed)
    key, server_round, tag = int(rng.integers(0, 1 << 63)), int(rng.integers(0, 99)), seed
    args = (key, torch.from_numpy(users), torch.from_numpy(sizes), server_round, tag)
    monkeypatch.setattr(lockstep, "COMPILED_SAMPLES", 1 << 62)
    tensor_ops = lockstep.shuffled_order(*args).numpy()
    compiled = host_loops.shuffled_order(key, STREAMS["shuffle"], users, sizes, server_round, tag)
    np.testing.assert_array_equal(compiled, tensor_ops)
    monkeypatch.setattr(lockstep, "COMPILED_SAMPLES", 0)
    np.testing.assert_array_equal(lockstep.shuffled_order(*args).numpy(), tensor_ops)


def test_compiled_shuffle_of_users_past_the_bucketed_sort(monkeypatch):
    users, sizes = np.array([3, 9, 12, 40]), np.array([5000, 3, 4097, 4096])
    args = (11, torch.from_numpy(users), torch.from_numpy(sizes), 2, 0)
    monkeypatch.setattr(lockstep, "COMPILED_SAMPLES", 1 << 62)
    tensor_ops = lockstep.shuffled_order(*args).numpy()
    compiled = host_loops.shuffled_order(11, STREAMS["shuffle"], users, sizes, 2, 0)
    np.testing.assert_array_equal(compiled, tensor_ops)


@pytest.mark.parametrize("seed", range(8))
def test_compiled_distinct_items_equal_np_unique(seed):
    rng, users, sizes, _, _, num_items = _case(seed)
    owner = np.repeat(np.arange(len(users)), sizes)
    items = rng.integers(0, num_items, len(owner))
    if seed % 2:  # every user's items in a few 64-item words of the bitmap, the last included
        items = num_items - 1 - rng.integers(0, min(num_items, 130), len(owner))
    offsets = np.r_[0, np.cumsum(sizes)]
    row_counts, row_items, inverse = host_loops.user_rows(offsets, items, num_items)
    keys = np.repeat(np.arange(len(users)), row_counts) * num_items + row_items
    want_keys, want_inverse = sorted_unique(owner * num_items + items, len(users) * num_items)
    np.testing.assert_array_equal(keys, want_keys)
    np.testing.assert_array_equal(inverse, want_inverse)


@pytest.mark.parametrize("seed", range(4))
def test_compiled_row_sums_equal_index_add_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(3000, int(rng.integers(1, 40)))) * 10.0 ** rng.integers(
        -3, 6, (3000, 1)
    )
    rows = rows.astype(np.float32)
    rows[rng.random(rows.shape) < 0.05] = -0.0
    inverse = rng.integers(0, 60, len(rows))
    compiled = host_loops.float64_row_sums(inverse, rows, 60)
    index_add = float64_row_sums(inverse, rows, 60, min_rows=1 << 62).numpy()
    assert compiled.tobytes() == index_add.tobytes()


@pytest.mark.parametrize("seed", range(6))
def test_user_rows_are_the_same_on_both_paths(seed, monkeypatch):
    from fedrec_flwr.node import samples

    rng, _, sizes, _, _, num_items = _case(seed)
    offsets = np.r_[0, np.cumsum(sizes)]
    items = rng.integers(0, num_items, int(offsets[-1]))
    got = {}
    for compiled in (False, True):
        monkeypatch.setattr(samples, "COMPILED_KEYS", 0 if compiled else 1 << 62)
        got[compiled] = samples.user_rows(offsets, items, num_items)
    for sort, loop in zip(got[False], got[True], strict=True):
        assert sort.dtype == loop.dtype == np.int64
        np.testing.assert_array_equal(sort, loop)
    counts, row_items, inverse = got[True]
    assert counts.sum() == len(row_items) and np.array_equal(row_items[inverse], items)


@pytest.mark.parametrize("seed", range(6))
def test_compiled_pair_search_finds_what_the_keys_find(seed, monkeypatch):
    from fedrec_flwr.node import personal

    rng = np.random.default_rng(seed)
    users, num_items = int(rng.integers(1, 30)), int(rng.integers(1, 400))
    held = [
        np.sort(rng.choice(num_items, rng.integers(0, num_items + 1), replace=False))
        for _ in range(users)
    ]
    counts = np.array([len(h) for h in held])
    store = personal.PersonalRows(
        indptr=np.r_[0, np.cumsum(counts)].astype(np.int64),
        items=np.concatenate(held).astype(np.int64),
        rows=rng.normal(size=(int(counts.sum()), 3)).astype(np.float32),
    )
    positions = rng.integers(0, users, 5000)
    items = rng.integers(0, num_items, 5000)
    got = {}
    for compiled in (False, True):
        monkeypatch.setattr(personal, "COMPILED_PAIRS", 0 if compiled else 1 << 62)
        got[compiled] = store.find(positions, items)
    (where, hit), (want_where, want_hit) = got[True], got[False]
    np.testing.assert_array_equal(hit, want_hit)
    np.testing.assert_array_equal(where[hit], want_where[want_hit])
    assert hit.any() or not len(store.items)
