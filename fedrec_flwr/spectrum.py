"""Dimensional collapse, measured: the effective rank of embedding tables.

``erank(M) = exp(H(p))`` with ``p_k = s_k / sum_j s_j`` over the singular values ``s`` of ``M``
(Roy and Vetterli, 2007): 1 for a rank-one matrix, ``r`` for ``r`` equal singular values. A
table whose rows span few directions (collapsed) has a low effective rank.
"""

from __future__ import annotations

import numpy as np
import torch

from fedrec_flwr.seeding import keyed_rng

#: Users whose personal rows are measured (``erank-personal``): this many, keyed by the seed.
ERANK_USERS = 100


def effective_rank(matrix: np.ndarray | torch.Tensor) -> float:
    """exp of the entropy of the normalised singular values (0.0 for an all-zero matrix)."""
    values = torch.linalg.svdvals(torch.as_tensor(matrix, dtype=torch.float64))
    total = values.sum()
    if len(values) == 0 or total <= 0:
        return 0.0
    p = values / total
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def erank_users(seed: int, num_users: int) -> np.ndarray:
    """The seeded sample of users whose personal rows are measured (sorted): the first
    ``ERANK_USERS`` of a permutation keyed by the seed, the same on every node."""
    order = keyed_rng(seed, "erank-sample").permutation(num_users)
    return np.sort(order[:ERANK_USERS])
