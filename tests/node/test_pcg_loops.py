"""The ``keyed-numpy`` sampler's compiled loops draw what NumPy's generators draw: each
user's PCG64 generator (keyed by (seed, stream, keys)) stepped in the loop gives the same
negatives as ``sample_excluding`` and the same shuffles as ``Generator.permutation``, and
the node's batched draws and shuffles are the same on both paths."""

import numpy as np
import pytest

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.node import host_loops, samples, training
from fedrec_flwr.node.samples import build_round_samples, users_round_items
from fedrec_flwr.sampling import sample_excluding
from fedrec_flwr.seeding import keyed_pcg64_states, keyed_rng


def _keys(rng, users: int, seed: int) -> np.ndarray:
    keys = np.stack([rng.integers(0, 1 << 20, users), rng.integers(0, 99, users)], 1)
    if seed % 3 == 0:  # a key past 32 bits: the generators built one by one
        keys[0, 0] = 1 << 40
    return keys


@pytest.mark.parametrize("seed", range(6))
def test_pcg64_states_are_the_keyed_generators(seed):
    rng = np.random.default_rng(seed)
    keys, key = _keys(rng, int(rng.integers(1, 40)), seed), int(rng.integers(0, 1 << 32))
    states = keyed_pcg64_states(key, "shuffle", keys)
    assert states.dtype == np.uint64 and states.shape == (len(keys), 4)
    for row, (state_hi, state_lo, inc_hi, inc_lo) in zip(keys.tolist(), states, strict=True):
        want = keyed_rng(key, "shuffle", *row).bit_generator.state["state"]
        assert (int(state_hi) << 64) | int(state_lo) == want["state"]
        assert (int(inc_hi) << 64) | int(inc_lo) == want["inc"]


@pytest.mark.parametrize("seed", range(6))
def test_compiled_negatives_are_sample_excluding(seed):
    rng = np.random.default_rng(seed)
    users, num_items = int(rng.integers(1, 25)), int(rng.integers(1, 3000))
    keys, key = _keys(rng, users, seed), int(rng.integers(0, 1 << 31))
    counts = rng.integers(0, num_items, users)  # up to all but one item excluded
    sets = [np.sort(rng.choice(num_items, c, replace=False)) for c in counts]
    sizes = rng.integers(0, 400, users)
    states = keyed_pcg64_states(key, "train-negatives", keys)
    got = host_loops.keyed_negatives(states, sizes, counts, np.concatenate(sets), num_items)
    want = [
        sample_excluding(keyed_rng(key, "train-negatives", *row), num_items, excluded, int(size))
        for row, excluded, size in zip(keys.tolist(), sets, sizes, strict=True)
    ]
    np.testing.assert_array_equal(got, np.concatenate(want))


@pytest.mark.parametrize("seed", range(6))
def test_compiled_permutations_are_the_generators(seed):
    rng = np.random.default_rng(seed)
    users = int(rng.integers(1, 25))
    keys, key = _keys(rng, users, seed), int(rng.integers(0, 1 << 31))
    counts = rng.integers(0, 700, users)
    got = host_loops.keyed_permutations(keyed_pcg64_states(key, "shuffle", keys), counts)
    want = [
        keyed_rng(key, "shuffle", *row).permutation(int(count))
        for row, count in zip(keys.tolist(), counts, strict=True)
    ]
    np.testing.assert_array_equal(got, np.concatenate(want))


@pytest.mark.parametrize("protocol", ["paper", "strict"])
def test_batched_draws_and_shuffles_are_the_same_on_both_paths(protocol, monkeypatch):
    config = RunConfig.from_mapping(
        {
            "dataset": "synthetic",
            "protocol": protocol,
            "synthetic-users": 40,
            "synthetic-items": 60,  # few items: many draws are redrawn
            "synthetic-mean-degree": 12,
            "num-negatives": 4,
        }
    )
    prepared = prepare(config)
    users = np.sort(np.random.default_rng(1).permutation(prepared.num_users)[:30])
    got = {}
    for compiled in (False, True):
        threshold = 0 if compiled else 1 << 62
        monkeypatch.setattr(samples, "COMPILED_DRAWS", threshold)
        monkeypatch.setattr(training, "COMPILED_SHUFFLE", threshold)
        drawn = users_round_items(prepared, config, users, 3)
        built = build_round_samples(prepared, config, users, users, 3)
        orders = [
            training.shuffled_order(built, 7, 3, epoch, stage) for epoch, stage in ((0, 0), (1, 2))
        ]
        got[compiled] = (drawn, orders)
    for (items, labels), (want_items, want_labels) in zip(got[True][0], got[False][0], strict=True):
        np.testing.assert_array_equal(items, want_items)
        np.testing.assert_array_equal(labels, want_labels)
    for order, want in zip(got[True][1], got[False][1], strict=True):
        np.testing.assert_array_equal(order, want)
