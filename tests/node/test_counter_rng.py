"""The counter-based keyed generator (Philox4x32-10 in int64 tensor ops) and the negatives
drawn from it (``negative-sampler = "counter"``)."""

import numpy as np
import pytest
import torch
from scipy import stats

from fedrec_flwr.config import RunConfig
from fedrec_flwr.node.counter_rng import (
    counter_negatives,
    philox_blocks,
    random_words,
    uniform_floats,
    uniform_integers,
)
from fedrec_flwr.sampling import NegativeSampler


def _words(seed, user, server_round, n, stream=3, attempt=0):
    users = torch.full((n,), user, dtype=torch.int64)
    return random_words(seed, stream, users, server_round, torch.arange(n), attempt)


@pytest.mark.parametrize(
    ("counter", "key", "expected"),
    [  # Random123's known-answer vectors for philox4x32-10
        ((0, 0, 0, 0), 0, (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, 0xFFFFFFFFFFFFFFFF, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            0xA4093822 | 0x299F31D0 << 32,
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ],
)
def test_philox_matches_the_known_answers(counter, key, expected):
    words = philox_blocks(tuple(torch.tensor([c]) for c in counter), key)
    assert tuple(int(w) for w in words) == expected


def test_known_words_of_a_key():
    """The stream itself is fixed: these values change only with a deliberate new stream."""
    words = _words(seed=42, user=7, server_round=3, n=6).tolist()
    again = philox_blocks(
        (
            torch.tensor([0, 1]),
            torch.tensor([7, 7]),
            torch.tensor([3, 3]),
            torch.tensor([3 << 16] * 2),
        ),
        42,
    )
    block0 = [int(w[0]) for w in again]
    block1 = [int(w[1]) for w in again]
    assert words == block0 + block1[:2]
    assert words == [0x27500117, 0x75DAAD05, 0xAFC2DDF0, 0x114A46D7, 0xAF9989DF, 0x8C0B1FAE]
    assert uniform_integers(torch.tensor(words), 1682).tolist() == [258, 774, 1154, 113, 1153, 920]


def test_integers_and_floats_are_uniform():
    words = _words(seed=1, user=5, server_round=1, n=200_000)
    counts = np.bincount(uniform_integers(words, 50).numpy(), minlength=50)
    assert stats.chisquare(counts).pvalue > 1e-3
    floats = uniform_floats(words).numpy()
    assert floats.min() >= 0.0 and floats.max() < 1.0
    assert stats.kstest(floats, "uniform").pvalue > 1e-3
    bits = ((words.unsqueeze(-1) >> torch.arange(32)) & 1).double().mean(0)
    assert torch.all((bits - 0.5).abs() < 0.01)  # each of the 32 bits is fair


def test_keys_give_independent_streams():
    base = uniform_integers(_words(seed=1, user=5, server_round=1, n=50_000), 16).numpy()
    for other in (
        _words(seed=2, user=5, server_round=1, n=50_000),
        _words(seed=1, user=6, server_round=1, n=50_000),
        _words(seed=1, user=5, server_round=2, n=50_000),
        _words(seed=1, user=5, server_round=1, n=50_000, stream=4),
        _words(seed=1, user=5, server_round=1, n=50_000, attempt=1),
    ):
        table = np.zeros((16, 16))
        np.add.at(table, (base, uniform_integers(other, 16).numpy()), 1)
        assert stats.chi2_contingency(table).pvalue > 1e-3
        assert not np.array_equal(base, uniform_integers(other, 16).numpy())


def _exclusions(rng, users, num_items, size):
    sets = [np.sort(rng.choice(num_items, size, replace=False)) for _ in users]
    return np.full(len(users), size), np.concatenate(sets), sets


def test_negatives_avoid_the_exclusions_and_do_not_depend_on_the_packing():
    rng = np.random.default_rng(0)
    users = np.array([3, 10, 11, 40, 99])
    sizes = np.array([17, 0, 40, 5, 64])
    counts, flat, sets = _exclusions(rng, users, 30, 20)  # two in three items excluded
    together = counter_negatives(9, 3, 4, users, sizes, counts, flat, 30)
    parts = np.split(together, np.cumsum(sizes)[:-1])
    for j, user in enumerate(users):
        alone = counter_negatives(9, 3, 4, [user], [sizes[j]], [20], sets[j], 30)
        np.testing.assert_array_equal(alone, parts[j])
        assert not np.isin(parts[j], sets[j]).any()
    order = [4, 0, 2]  # another packing and order of a subset
    picked = counter_negatives(
        9,
        3,
        4,
        users[order],
        sizes[order],
        counts[order],
        np.concatenate([sets[j] for j in order]),
        30,
    )
    np.testing.assert_array_equal(picked, np.concatenate([parts[j] for j in order]))


def test_negatives_are_uniform_over_the_allowed_items():
    rng = np.random.default_rng(1)
    counts, flat, sets = _exclusions(rng, [7], 40, 10)
    draws = counter_negatives(2, 3, 1, [7], [60_000], counts, flat, 40)
    allowed = np.setdiff1d(np.arange(40), sets[0])
    observed = np.bincount(draws, minlength=40)[allowed]
    assert observed.sum() == 60_000
    assert stats.chisquare(observed).pvalue > 1e-3


def test_a_full_exclusion_set_says_what_to_do():
    with pytest.raises(ValueError, match="train-negatives"):
        counter_negatives(1, 3, 1, [0], [4], [5], np.arange(5), 5)


def test_the_option_draws_counter_negatives_in_the_node(tmp_path):
    from fedrec_flwr.data.prepared import prepare
    from fedrec_flwr.node.samples import user_round_items, users_round_items

    base = {
        "dataset": "synthetic",
        "synthetic-users": 40,
        "synthetic-items": 60,
        "synthetic-mean-degree": 8,
        "data-dir": str(tmp_path),
    }
    numpy_config = RunConfig.from_mapping(base)
    config = RunConfig.from_mapping({**base, "negative-sampler": "counter"})
    assert numpy_config.sampler.negative_sampler == NegativeSampler.KEYED_NUMPY  # the default
    prepared = prepare(config)
    users = np.arange(0, 40, 3)
    together = users_round_items(prepared, config, users, 2)
    for user, (items, labels) in zip(users, together, strict=True):
        alone_items, alone_labels = user_round_items(prepared, config, int(user), 2)
        np.testing.assert_array_equal(items, alone_items)
        np.testing.assert_array_equal(labels, alone_labels)
        negatives = items[labels == 0]
        assert not np.isin(negatives, prepared.negative_exclusion(int(user))).any()
    numpy_items = users_round_items(prepared, numpy_config, users, 2)
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(together, numpy_items, strict=True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (CPU==CUDA check)")
def test_cpu_and_cuda_give_the_same_stream():
    users = torch.arange(1000).repeat_interleave(50)
    indices = torch.arange(50).repeat(1000)
    cpu = random_words(123, 3, users, 7, indices)
    cuda = random_words(123, 3, users.cuda(), 7, indices.cuda())
    torch.testing.assert_close(cuda.cpu(), cpu, rtol=0, atol=0)
    rng = np.random.default_rng(2)
    counts, flat, _ = _exclusions(rng, range(200), 500, 100)
    sizes = rng.integers(0, 300, 200)
    args = (5, 3, 9, np.arange(200), sizes, counts, flat, 500)
    np.testing.assert_array_equal(counter_negatives(*args), counter_negatives(*args, device="cuda"))


def test_each_negative_is_its_first_allowed_attempt():
    """Attempts made several at a time give each draw the value of its first attempt outside
    the exclusion set, as trying them one by one would (two in three items excluded: many
    draws need more attempts than are made at once)."""
    rng = np.random.default_rng(4)
    users = np.array([2, 5, 9])
    sizes = np.array([50, 80, 33])
    counts, flat, sets = _exclusions(rng, users, 30, 20)
    drawn = np.split(
        counter_negatives(9, 3, 4, users, sizes, counts, flat, 30), np.cumsum(sizes)[:-1]
    )
    for j, user in enumerate(users):
        for index in range(sizes[j]):
            attempt = 0
            while True:
                word = random_words(
                    9, 3, torch.tensor([int(user)]), 4, torch.tensor([index]), attempt
                )
                value = int(uniform_integers(word, 30)[0])
                if value not in sets[j]:
                    break
                attempt += 1
            assert drawn[j][index] == value
