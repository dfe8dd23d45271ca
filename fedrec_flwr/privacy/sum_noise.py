"""The Gaussian mechanism on the co-occurrence sums, at user-level sensitivity.

A user contributes once (:mod:`fedrec_flwr.node.statistics`), at most
``k = itemitem-max-degree`` items. Before a round's sums enter the model the server adds
``N(0, (z * sensitivity)^2)`` to every released entry; the model and everything computed
from it are post-processing. Neighbouring datasets replace one user's contribution by any
other (as the LDP accountant's ``2C``), so the sensitivities are the L2 distances of two
users' contributions:

- the co-occurrences of EASE and ItemKNN, the upper triangle of ``x_u x_u^T`` (its diagonal
  is the item counts): 0/1 entries on at most ``k (k + 1) / 2`` positions each, or, under
  ``itemitem-degree-bound`` = ``scale``, ``w_u`` on the ``d (d + 1) / 2`` positions of all
  ``d`` items with ``w_u^2 d (d + 1) / 2 <= k (k + 1) / 2``: non-negative vectors of L2 norm
  at most ``sqrt(k (k + 1) / 2)`` either way, so ``sqrt(k (k + 1))``;
- those of GF-CF, the upper triangle of ``x_u x_u^T / d_u`` (L2 norm at most 1 for any
  ``d_u``): 2, by the triangle inequality;
- the item counts ``x_u`` (GF-CF's degrees, and the support of ``itemitem-min-count``): 0/1
  on at most ``k`` positions, or, under ``itemitem-degree-bound`` = ``scale``, ``w_u`` on all
  ``d`` positions with ``w_u^2 d <= k (k + 1) / (d + 1) <= k``: non-negative vectors of L2
  norm at most ``sqrt(k)`` either way, so ``sqrt(2k)``.

One release (``itemitem-min-count`` <= 1): the co-occurrences (GF-CF: with the counts, at
their joint sensitivity). Two (> 1): the counts, from which the support is fixed, then the
co-occurrences over the support. ``releases`` Gaussians of noise multiplier ``z`` each
compose to one of ``z / sqrt(releases)``, whose (epsilon, delta) Google's dp-accounting
computes exactly (the analytic Gaussian of Balle and Wang, 2018; the accountant of the LDP
rows, :mod:`fedrec_flwr.privacy.accounting`); ``z`` is calibrated so that it is
``itemitem-dp-epsilon`` at ``itemitem-dp-delta``. A user is in one round's sums only, so this
is its guarantee over the run.

The number of users in a round is not noised: who takes part is public (the server sends
the train messages). The noise is drawn from a generator keyed by (seed, round), so that runs
reproduce: whoever knows the seed can remove it (in a deployment the seed is the server's
secret). Under plain aggregation the server sees each contribution before it adds noise;
under ``secure-aggregation`` it sees the exact sum: the guarantee is about what the model
tells anyone who sees it (every client downloads it), not about what the server saw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedrec_flwr.methods.itemitem import ItemItemKeys
from fedrec_flwr.privacy.accounting import INSTALL
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.seeding import keyed_rng

NOISE_BLOCK = 256  # rows of noise drawn at a time


def gram_sensitivity(kind: str, max_degree: int) -> float:
    """L2 distance between two users' co-occurrence contributions (the module doc)."""
    if kind == "gfcf":
        return 2.0
    k = float(max_degree)
    return math.sqrt(k * (k + 1.0))


def counts_sensitivity(max_degree: int) -> float:
    """L2 distance between two users' item counts (non-negative, L2 norm at most
    ``sqrt(k)`` each: 0/1 on at most ``k`` items, or ``w_u`` on all of them)."""
    return math.sqrt(2.0 * max_degree)


def _gaussian():
    try:
        from dp_accounting import gaussian_mechanism
    except ImportError as error:
        raise ImportError(f"the privacy accountant is not installed: {INSTALL}") from error
    return gaussian_mechanism


def epsilon_of(noise_multiplier: float, delta: float) -> float:
    """Epsilon at ``delta`` of one Gaussian release with this noise multiplier."""
    return float(_gaussian().get_epsilon_gaussian(noise_multiplier, delta))


def noise_multiplier(epsilon: float, delta: float) -> float:
    """The smallest noise multiplier whose release is (``epsilon``, ``delta``)-DP (the
    analytic Gaussian's calibration, the inverse of :func:`epsilon_of`)."""
    return float(_gaussian().get_sigma_gaussian(epsilon, delta))


#: A block of a Gram's entries: two slices (over the whole catalogue), or an ``np.ix_`` grid
#: (over a support).
Block = tuple[slice, slice] | tuple[np.ndarray, ...]


def block_indices(lo: int, hi: int, coords: np.ndarray | None) -> tuple[Block, Block]:
    """Where rows ``lo:hi`` of a Gram over ``coords`` (None: every item) meet columns
    ``lo:`` (the block's upper part), and the mirror of that (rows ``lo:``, columns
    ``lo:hi``)."""
    if coords is None:
        return (slice(lo, hi), slice(lo, None)), (slice(lo, None), slice(lo, hi))
    return np.ix_(coords[lo:hi], coords[lo:]), np.ix_(coords[lo:], coords[lo:hi])


@dataclass(frozen=True)
class SumNoise:
    """The mechanism of a run (see the module doc)."""

    kind: str
    max_degree: int
    epsilon: float
    delta: float
    releases: int  # 1: the sums at once; 2: the counts, then the co-occurrences (support)
    seed: int
    degree_bound: str = "sample"  # itemitem-degree-bound

    @classmethod
    def of(cls, config: RunGroups) -> SumNoise | None:
        """The run's mechanism (None: ``itemitem-dp-epsilon`` is 0)."""
        keys = config.group(ItemItemKeys)
        if keys.itemitem_dp_epsilon <= 0:
            return None
        return cls(
            str(keys.itemitem_model),
            keys.itemitem_max_degree,
            keys.itemitem_dp_epsilon,
            keys.itemitem_dp_delta,
            2 if keys.itemitem_min_count > 1 else 1,
            config.training.seed,
            str(keys.itemitem_degree_bound),
        )

    @property
    def multiplier(self) -> float:
        """Each release's noise multiplier: ``releases`` Gaussians of multiplier ``z`` compose
        to one of ``z / sqrt(releases)``, which is calibrated to the stated epsilon."""
        return noise_multiplier(self.epsilon, self.delta) * math.sqrt(self.releases)

    @property
    def joint(self) -> bool:
        """Are GF-CF's counts released with its co-occurrences (one release)?"""
        return self.releases == 1 and self.kind == "gfcf"

    @property
    def gram_std(self) -> float:
        if self.joint:
            return self.multiplier * math.hypot(2.0, counts_sensitivity(self.max_degree))
        return self.multiplier * gram_sensitivity(self.kind, self.max_degree)

    @property
    def counts_std(self) -> float:
        """The noise of a counts release (GF-CF's joint one: the same as the Gram's)."""
        if self.joint:
            return self.gram_std
        return self.multiplier * counts_sensitivity(self.max_degree)

    def add_to_gram(
        self, gram: np.ndarray, server_round: int, coords: np.ndarray | None = None
    ) -> None:
        """Add the noise to a round's symmetric Gram in place (over ``coords``, the support;
        None: all), one draw per entry of the upper triangle, diagonal included, mirrored
        below; drawn a block of rows at a time, keyed by (seed, round)."""
        rng = keyed_rng(self.seed, "itemitem-dp", server_round, 1)
        size = len(gram) if coords is None else len(coords)
        for lo in range(0, size, NOISE_BLOCK):
            hi = min(lo + NOISE_BLOCK, size)
            part = rng.normal(0.0, self.gram_std, size=(hi - lo, size - lo))
            square = part[:, : hi - lo]
            square[np.tril_indices(hi - lo, -1)] = 0.0  # the block's upper triangle only
            upper, lower = block_indices(lo, hi, coords)
            gram[upper] += part
            np.fill_diagonal(square, 0.0)  # mirrored without the diagonal
            gram[lower] += part.T

    def add_to_counts(self, counts: np.ndarray, server_round: int) -> None:
        rng = keyed_rng(self.seed, "itemitem-dp", server_round, 0)
        counts += rng.normal(0.0, self.counts_std, size=counts.shape)

    def record(self) -> dict:
        """``summary.json``'s ``dp_user_level``: the guarantee, recomputed by the accountant
        from the releases' multiplier."""
        return {
            "mechanism": "gaussian on the round's co-occurrence sums",
            "epsilon": epsilon_of(self.multiplier / math.sqrt(self.releases), self.delta),
            "delta": self.delta,
            "releases": self.releases,
            "noise_multiplier": self.multiplier,
            "gram_noise_std": self.gram_std,
            "counts_noise_std": self.counts_std,
            "max_degree": self.max_degree,
            "degree_bound": self.degree_bound,
            "accountant": "dp-accounting analytic Gaussian",
        }
