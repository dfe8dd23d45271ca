"""A seeded synthetic implicit-feedback dataset with power-law degrees and latent clusters.

Users have power-law (Lomax) degrees clipped to ``[min_degree, num_items // 2]`` and scaled so
their mean approaches ``mean_degree``; items have Zipf popularity. Users and items each belong
to one of ``num_clusters`` clusters: each interaction is drawn, with probability
``cluster_affinity``, from the popularity-weighted items of the user's own cluster, otherwise
from all items by popularity. A recommender that learns the clusters beats popularity ranking.
A user never gets the same item twice. Timestamps are whole days (in seconds), so a user's rows
share timestamps now and then, as in real data.
"""

from __future__ import annotations

import numpy as np

from fedrec_flwr.data.interactions import Interactions

_SEED_TAG = 0x5F17E7  # keeps this generator's stream apart from other uses of the same seed
_POPULARITY_ROUNDS = 8  # rounds of popularity draws before the last few rows are drawn uniformly
_SECONDS_PER_DAY = 86_400


def generate_synthetic(
    num_users: int = 1000,
    num_items: int = 2000,
    mean_degree: float = 50,
    min_degree: int = 5,
    seed: int = 0,
    *,
    num_clusters: int = 8,
    cluster_affinity: float = 0.7,
    degree_shape: float = 1.5,
    popularity_exponent: float = 1.0,
    num_days: int = 1000,
) -> Interactions:
    """Generate the dataset 'synthetic'; the same arguments always give the same rows.

    Every user has at least ``min_degree`` rows; the catalogue keeps all ``num_items`` items,
    even one nobody drew. Rows are grouped by user. ``degree_shape`` is the Pareto shape of the
    user degrees (smaller = heavier tail), ``popularity_exponent`` the Zipf exponent of item
    popularity.
    """
    if num_users < 1 or num_items < 2:
        raise ValueError("synthetic data needs at least 1 user and 2 items")
    if not 1 <= min_degree <= mean_degree <= num_items // 2:
        raise ValueError(
            f"synthetic data needs 1 <= min_degree ({min_degree}) <= mean_degree ({mean_degree})"
            f" <= num_items // 2 ({num_items // 2})"
        )
    if num_clusters < 1 or not 0.0 <= cluster_affinity <= 1.0:
        raise ValueError("num_clusters must be >= 1 and cluster_affinity within [0, 1]")
    if degree_shape <= 0 or popularity_exponent < 0 or num_days < 1:
        raise ValueError("degree_shape must be > 0, popularity_exponent >= 0, num_days >= 1")
    rng = np.random.default_rng(np.random.SeedSequence([seed, _SEED_TAG]))
    degrees = _user_degrees(rng, num_users, mean_degree, min_degree, num_items // 2, degree_shape)
    popularity = np.arange(1, num_items + 1, dtype=np.float64) ** -popularity_exponent
    popularity = popularity[rng.permutation(num_items)]
    item_cluster = rng.integers(0, num_clusters, num_items)
    user_cluster = rng.integers(0, num_clusters, num_users)
    sampler = _ItemSampler(popularity, item_cluster, num_clusters)
    user, item = _draw_distinct(rng, degrees, user_cluster, cluster_affinity, sampler)
    timestamp = rng.integers(0, num_days, len(user)) * _SECONDS_PER_DAY
    return Interactions(
        name="synthetic",
        user=user,
        item=item,
        timestamp=timestamp.astype(np.int64),
        num_users=num_users,
        num_items=num_items,
        raw_user_ids=np.arange(num_users, dtype=np.int64),
        raw_item_ids=np.arange(num_items, dtype=np.int64),
    )


def _user_degrees(
    rng: np.random.Generator,
    num_users: int,
    mean_degree: float,
    min_degree: int,
    max_degree: int,
    shape: float,
) -> np.ndarray:
    """Power-law degrees in [min_degree, max_degree] whose mean is close to mean_degree."""
    tail = rng.pareto(shape, num_users)

    def degrees(scale: float) -> np.ndarray:
        return np.clip(np.rint(min_degree + scale * tail), min_degree, max_degree)

    low, high = 0.0, 1.0
    while degrees(high).mean() < mean_degree and high < 1e12:
        high *= 2.0
    for _ in range(60):  # bisection: the mean degree grows with the scale
        middle = (low + high) / 2.0
        low, high = (middle, high) if degrees(middle).mean() < mean_degree else (low, middle)
    return degrees(high).astype(np.int64)


class _ItemSampler:
    """Popularity-weighted item draws, from all items or from one cluster's items."""

    def __init__(self, popularity: np.ndarray, item_cluster: np.ndarray, num_clusters: int):
        self.num_items = len(popularity)
        self.global_cdf = np.cumsum(popularity) / popularity.sum()
        self.global_cdf[-1] = 1.0
        # Items sorted by cluster; key = cluster + cumulative popularity share within it, so
        # cluster c's keys fill (c, c + 1] and one search finds a draw within any cluster.
        self.by_cluster = np.argsort(item_cluster, kind="stable")
        sizes = np.bincount(item_cluster, minlength=num_clusters)
        self.cluster_end = np.cumsum(sizes)
        self.cluster_key = np.empty(self.num_items)
        for c in np.flatnonzero(sizes):
            span = slice(self.cluster_end[c] - sizes[c], self.cluster_end[c])
            weights = popularity[self.by_cluster[span]]
            self.cluster_key[span] = c + np.cumsum(weights) / weights.sum()
            self.cluster_key[span.stop - 1] = c + 1.0
        self.nonempty = sizes > 0

    def draw(
        self, rng: np.random.Generator, cluster: np.ndarray, in_cluster: np.ndarray
    ) -> np.ndarray:
        """One item per entry: from ``cluster[k]`` where ``in_cluster[k]``, else from all."""
        in_cluster = in_cluster & self.nonempty[cluster]
        uniform = rng.random(len(cluster))
        items = np.searchsorted(self.global_cdf, uniform, side="right")
        chosen = cluster[in_cluster]
        pos = np.searchsorted(self.cluster_key, chosen + uniform[in_cluster], side="right")
        items[in_cluster] = self.by_cluster[np.minimum(pos, self.cluster_end[chosen] - 1)]
        return items


def _draw_distinct(
    rng: np.random.Generator,
    degrees: np.ndarray,
    user_cluster: np.ndarray,
    affinity: float,
    sampler: _ItemSampler,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``degrees[u]`` distinct items per user; rows grouped by user, in draw order."""
    num_items = sampler.num_items
    need = degrees.copy()
    kept: list[np.ndarray] = []  # user * num_items + item, in draw order
    round_ = 0
    while (need > 0).any():
        pending = np.flatnonzero(need > 0)
        draws = np.ceil(need[pending] * (1.25 * 2.0 ** min(round_, 10))).astype(np.int64) + 4
        user = np.repeat(pending, draws)
        if round_ < _POPULARITY_ROUNDS:
            item = sampler.draw(rng, user_cluster[user], rng.random(len(user)) < affinity)
        else:  # the heaviest users have exhausted the popular items: finish uniformly
            item = rng.integers(0, num_items, len(user))
        key = user * num_items + item
        _, first = np.unique(key, return_index=True)
        key = key[np.sort(first)]  # distinct, still grouped by user in draw order
        if kept:
            earlier = np.concatenate(kept)
            earlier = np.sort(earlier[need[earlier // num_items] > 0])
            if len(earlier):
                at = np.minimum(np.searchsorted(earlier, key), len(earlier) - 1)
                key = key[earlier[at] != key]
        user = key // num_items
        start = np.searchsorted(user, user, side="left")
        key = key[np.arange(len(key)) - start < need[user]]
        kept.append(key)
        need -= np.bincount(key // num_items, minlength=len(need))
        round_ += 1
    keys = np.concatenate(kept)
    keys = keys[np.argsort(keys // num_items, kind="stable")]
    return keys // num_items, keys % num_items
