"""Statistics over users: bootstrap intervals of a run's mean metrics and paired comparisons
of two runs on the same users (plain numpy, no Flower).

A run writes ``per-user.csv`` (:mod:`fedrec_flwr.results`): one row per user evaluated at the
best validation round, ``user,<val-...>,<test-...>``. Its column means are the metrics of
``summary.json``; the users are the sample these intervals resample.

- :func:`bootstrap_ci`: percentile interval of the mean over users (users resampled with
  replacement).
- :func:`seeds_bootstrap_ci`: the same for the mean over seeds of the per-seed means.
- :func:`paired_difference`: the mean difference of two runs on their common users, its
  paired bootstrap interval and a sign-flip permutation p-value.

Every draw comes from ``np.random.default_rng(seed)``: the same inputs and seed give the same
interval. Draws are made in fixed blocks of resamples, so memory stays bounded whatever the
number of users, and the result does not depend on the memory available.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

PER_USER_FILE = "per-user.csv"
_BLOCK_ELEMENTS = 1 << 22  # indices drawn at once (32 MiB of int64)


def read_per_user(run_dir: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(users, {column: values})`` of ``<run_dir>/per-user.csv``: the user ids (int64, the
    prepared data's user index) and each metric column (float64, e.g. ``test-hr@10``)."""
    path = Path(run_dir) / PER_USER_FILE
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or not rows[0] or rows[0][0] != "user":
        raise ValueError(f"{path}: expected a header starting with 'user'")
    header, body = rows[0], rows[1:]
    if any(len(row) != len(header) for row in body):
        raise ValueError(f"{path}: every row must have {len(header)} fields")
    users = np.array([int(row[0]) for row in body], dtype=np.int64)
    columns = {
        name: np.array([float(row[j]) for row in body], dtype=np.float64)
        for j, name in enumerate(header[1:], start=1)
    }
    return users, columns


def bootstrap_ci(
    values: np.ndarray, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap ``1 - alpha`` interval of the mean of ``values`` (one per user):
    ``n_boot`` resamples of the users with replacement."""
    values = _values(values, "values")
    _check(n_boot, alpha)
    means = _resampled_means(values, n_boot, np.random.default_rng(seed))
    return _interval(means, alpha)


def seeds_bootstrap_ci(
    per_seed: list[tuple[np.ndarray, np.ndarray]],
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean over seeds of each seed's mean over users;
    ``per_seed``: one ``(users, values)`` per seed.

    Each resample draws users with replacement and averages the seeds' means over the drawn
    users. When every seed evaluated the same users, the same users are drawn for every seed
    (the paired design): the leave-one-out split does not depend on the seed
    (:func:`fedrec_flwr.data.prepared.leave_one_out` ranks each user's rows by timestamp and
    file order, no random draw), so runs of different seeds on the same data and protocol hold
    the same users, and a user's held-out items are the same in every seed. Otherwise (e.g. a
    best round evaluated on an ``eval-users`` sample, which is drawn with the seed) each seed's
    users are drawn on their own. The seeds themselves are not resampled: the interval is the
    uncertainty from the finite set of users, not from training randomness (report the seed
    spread beside it).
    """
    _check(n_boot, alpha)
    if not per_seed:
        raise ValueError("seeds_bootstrap_ci: no seeds given")
    aligned = [_by_user(users, values, f"seed {i}") for i, (users, values) in enumerate(per_seed)]
    rng = np.random.default_rng(seed)
    first = aligned[0][0]
    if all(np.array_equal(users, first) for users, _ in aligned):
        # same users drawn for every seed: mean over seeds of the drawn users' values
        per_user = np.mean([values for _, values in aligned], axis=0)
        means = _resampled_means(per_user, n_boot, rng)
    else:
        means = np.mean([_resampled_means(values, n_boot, rng) for _, values in aligned], axis=0)
    return _interval(means, alpha)


def paired_difference(
    a_users: np.ndarray,
    a_values: np.ndarray,
    b_users: np.ndarray,
    b_values: np.ndarray,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict[str, float | int]:
    """Run A minus run B on the users both evaluated.

    Returns ``mean`` (mean over the common users of A's value minus B's), ``low`` and ``high``
    (paired percentile bootstrap ``1 - alpha`` interval: users resampled with replacement,
    each keeping its pair of values), ``p_value`` (two-sided sign-flip permutation test:
    under the null hypothesis that A and B are exchangeable for each user, each per-user
    difference's sign is flipped at random ``n_boot`` times; ``p = (1 + #{|mean flipped| >=
    |mean|}) / (1 + n_boot)``) and ``users`` (the number of common users). Raises
    ``ValueError`` when the runs share no user.
    """
    _check(n_boot, alpha)
    a_users, a_values = _by_user(a_users, a_values, "run A")
    b_users, b_values = _by_user(b_users, b_values, "run B")
    common, in_a, in_b = np.intersect1d(a_users, b_users, return_indices=True)
    if len(common) == 0:
        raise ValueError(
            f"paired_difference: the runs share no user (A has {len(a_users)} users, B "
            f"{len(b_users)}): a paired comparison needs runs evaluated on the same users "
            "(same dataset, protocol and evaluated users)"
        )
    diff = a_values[in_a] - b_values[in_b]
    rng = np.random.default_rng(seed)
    low, high = _interval(_resampled_means(diff, n_boot, rng), alpha)
    observed = abs(diff.mean())
    flipped = _sign_flipped_means(diff, n_boot, rng)
    # a tolerance so that float rounding of equal sums does not count as smaller
    extreme = np.abs(flipped) >= observed - 1e-12 * max(1.0, observed)
    return {
        "mean": float(diff.mean()),
        "low": low,
        "high": high,
        "p_value": float((1 + extreme.sum()) / (1 + n_boot)),
        "users": len(common),
    }


def seed_averaged(
    per_seed: list[tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray]:
    """(users, values): each user's value averaged over the seeds, for the users every seed
    evaluated (the per-user values a paired comparison of two rows over seeds takes)."""
    if not per_seed:
        raise ValueError("seed_averaged: no seeds given")
    common = np.asarray(per_seed[0][0], dtype=np.int64)
    for users, _ in per_seed[1:]:
        common = np.intersect1d(common, users)
    total = np.zeros(len(common))
    for users, values in per_seed:
        users = np.asarray(users, dtype=np.int64)
        order = np.argsort(users)
        total += np.asarray(values, float)[order][np.searchsorted(users[order], common)]
    return common, total / len(per_seed)


def _values(values: np.ndarray, what: str) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or len(values) == 0:
        raise ValueError(f"{what}: expected a non-empty 1-D array, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{what}: holds NaN or inf")
    return values


def _by_user(users: np.ndarray, values: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Users sorted (unique) and their values aligned."""
    users = np.asarray(users, dtype=np.int64)
    values = _values(values, f"{what} values")
    if users.shape != values.shape:
        raise ValueError(f"{what}: {users.shape} users but {values.shape} values")
    order = np.argsort(users, kind="stable")
    users, values = users[order], values[order]
    if np.any(users[1:] == users[:-1]):
        raise ValueError(f"{what}: a user appears more than once")
    return users, values


def _check(n_boot: int, alpha: float) -> None:
    if int(n_boot) < 1:
        raise ValueError(f"n_boot={n_boot} must be >= 1")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha={alpha} must be in (0, 1)")


def _blocks(n_boot: int, n: int):
    """Sizes of the blocks of resamples drawn at once (fixed by n_boot and n only)."""
    size = max(1, _BLOCK_ELEMENTS // max(n, 1))
    for start in range(0, n_boot, size):
        yield min(size, n_boot - start)


def _resampled_means(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``n_boot`` resamples of ``values`` with replacement."""
    n = len(values)
    parts = [values[rng.integers(0, n, size=(k, n))].mean(axis=1) for k in _blocks(n_boot, n)]
    return np.concatenate(parts)


def _sign_flipped_means(diff: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``diff`` with each sign flipped at random, ``n_boot`` times."""
    n = len(diff)
    parts = []
    for k in _blocks(n_boot, n):
        signs = rng.integers(0, 2, size=(k, n)) * 2 - 1
        parts.append((signs * diff).mean(axis=1))
    return np.concatenate(parts)


def _interval(means: np.ndarray, alpha: float) -> tuple[float, float]:
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)
