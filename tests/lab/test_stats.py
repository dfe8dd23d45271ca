"""fedrec_lab.stats: user bootstrap intervals and paired comparisons."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays as np_arrays

from fedrec_lab.stats import (
    bootstrap_ci,
    paired_difference,
    read_per_user,
    seeds_bootstrap_ci,
)

unit_values = np_arrays(
    np.float64,
    st.integers(1, 60),
    elements=st.floats(0.0, 1.0, allow_nan=False, allow_infinity=False),
)


def test_bootstrap_ci_covers_a_known_mean_about_95_percent():
    """Bernoulli(p) users: the 95 % interval of the mean holds p in about 95 % of 200
    repeats (loose bounds: the percentile bootstrap undercovers a little at n = 200)."""
    p, n, repeats = 0.3, 200, 200
    rng = np.random.default_rng(123)
    covered = 0
    for repeat in range(repeats):
        values = (rng.random(n) < p).astype(np.float64)
        low, high = bootstrap_ci(values, n_boot=500, seed=repeat)
        covered += low <= p <= high
    assert 0.88 * repeats <= covered <= 0.99 * repeats


def test_bootstrap_ci_width_shrinks_as_one_over_sqrt_n():
    rng = np.random.default_rng(7)
    widths = {}
    for n in (400, 1600, 6400):
        values = (rng.random(n) < 0.4).astype(np.float64)
        low, high = bootstrap_ci(values, n_boot=1000)
        widths[n] = high - low
    # 4x the users: half the width (within 20 %)
    assert widths[400] / widths[1600] == pytest.approx(2.0, rel=0.2)
    assert widths[1600] / widths[6400] == pytest.approx(2.0, rel=0.2)
    # and close to the normal interval's width 2 * 1.96 * sd / sqrt(n)
    assert widths[1600] == pytest.approx(2 * 1.96 * np.sqrt(0.24 / 1600), rel=0.15)


@settings(max_examples=50, deadline=None)
@given(values=unit_values, seed=st.integers(0, 2**31))
def test_bootstrap_ci_is_an_ordered_interval_within_the_values_and_keyed(values, seed):
    low, high = bootstrap_ci(values, n_boot=200, seed=seed)
    assert values.min() - 1e-12 <= low <= high <= values.max() + 1e-12
    assert bootstrap_ci(values, n_boot=200, seed=seed) == (low, high)


def test_bootstrap_ci_of_a_constant_is_that_constant():
    low, high = bootstrap_ci(np.full(50, 0.25))
    assert low == pytest.approx(0.25) and high == pytest.approx(0.25)


def test_bootstrap_ci_refuses_bad_input():
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_ci(np.array([]))
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci(np.array([0.1, np.nan]))
    with pytest.raises(ValueError, match="alpha"):
        bootstrap_ci(np.array([0.1, 0.2]), alpha=1.5)


@settings(max_examples=40, deadline=None)
@given(values=unit_values, seed=st.integers(0, 1000))
def test_paired_difference_of_identical_runs_is_zero(values, seed):
    users = np.arange(len(values)) * 3 + 1
    result = paired_difference(users, values, users[::-1], values[::-1], n_boot=200, seed=seed)
    assert result["mean"] == 0.0
    assert (result["low"], result["high"]) == (0.0, 0.0)
    assert result["p_value"] == 1.0
    assert result["users"] == len(values)


def test_paired_difference_detects_a_known_shift():
    rng = np.random.default_rng(3)
    n = 500
    base = rng.random(n)
    users = rng.permutation(10 * n)[:n]
    shifted = base + 0.05 + rng.normal(0, 0.05, n)  # paired noise much smaller than spread
    result = paired_difference(users, shifted, users, base)
    assert result["mean"] == pytest.approx(0.05, abs=0.01)
    assert result["low"] < 0.05 < result["high"]
    assert result["low"] > 0
    assert result["p_value"] < 0.01
    # no shift: not significant, the interval holds 0
    null = paired_difference(users, base + rng.normal(0, 0.05, n), users, base)
    assert null["low"] < 0 < null["high"]
    assert null["p_value"] > 0.01


def test_paired_difference_uses_only_common_users():
    a_users, b_users = np.array([1, 2, 3, 4]), np.array([3, 4, 5])
    result = paired_difference(
        a_users, np.array([0.0, 0.0, 1.0, 0.5]), b_users, np.array([0.0, 0.5, 1.0])
    )
    assert result["users"] == 2
    assert result["mean"] == pytest.approx(0.5)  # users 3: 1 - 0, 4: 0.5 - 0.5


def test_paired_difference_refuses_disjoint_users():
    with pytest.raises(ValueError, match="share no user"):
        paired_difference(np.array([0, 1]), np.ones(2), np.array([2, 3]), np.ones(2))
    with pytest.raises(ValueError, match="more than once"):
        paired_difference(np.array([0, 0]), np.ones(2), np.array([0, 1]), np.ones(2))


def test_seeds_bootstrap_ci_of_one_seed_is_bootstrap_ci():
    rng = np.random.default_rng(0)
    values = rng.random(300)
    users = np.arange(300)
    assert seeds_bootstrap_ci([(users, values)], seed=4) == bootstrap_ci(values, seed=4)


def test_seeds_bootstrap_ci_draws_the_same_users_for_every_seed():
    """Two seeds anti-correlated per user: drawing the same users for both cancels the user
    variance, drawing them independently does not."""
    rng = np.random.default_rng(1)
    n = 400
    x = rng.random(n)
    users = np.arange(n)
    same = seeds_bootstrap_ci([(users, x), (users[::-1], (1 - x)[::-1])])
    assert same[0] == pytest.approx(0.5) and same[1] == pytest.approx(0.5)
    other = seeds_bootstrap_ci([(users, x), (users + n, 1 - x)])  # different user sets
    assert other[0] < 0.49 and other[1] > 0.51
    # mean over seeds lies in it
    y = rng.random(n)
    low, high = seeds_bootstrap_ci([(users, x), (users, y)])
    assert low < (x.mean() + y.mean()) / 2 < high


def test_read_per_user(tmp_path: Path):
    (tmp_path / "per-user.csv").write_text("user,val-hr@10,test-hr@10\n2,1.0,0.0\n5,0.0,0.25\n")
    users, columns = read_per_user(tmp_path)
    assert users.dtype == np.int64 and users.tolist() == [2, 5]
    assert list(columns) == ["val-hr@10", "test-hr@10"]
    assert columns["test-hr@10"].tolist() == [0.0, 0.25]
