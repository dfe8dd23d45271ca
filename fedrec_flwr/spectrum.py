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
    return _entropy_rank(torch.linalg.svdvals(torch.as_tensor(matrix, dtype=torch.float64)))


#: Singular values per matrix from which :func:`effective_ranks` takes the entropy of a
#: group's rows at once: a multiple of every CPU vector width, so each value takes the same
#: (vectorised) path as in :func:`effective_rank`.
BATCHED_VALUES = 16


def effective_ranks(matrices: list[torch.Tensor]) -> list[float]:
    """``[effective_rank(m) for m in matrices]`` (float64 CPU tensors), bit for bit: the
    singular values of matrices of one shape in one batched call (LAPACK on each matrix, as
    alone), and the entropies of all sets of as many values, if a multiple of
    ``BATCHED_VALUES``, in a few tensor operations (the same reductions row by row)."""
    values: list[torch.Tensor] = [torch.empty(0, dtype=torch.float64)] * len(matrices)
    shapes: dict[tuple[int, ...], list[int]] = {}
    for k, matrix in enumerate(matrices):
        shapes.setdefault(tuple(matrix.shape), []).append(k)
    for members in shapes.values():
        batch = torch.linalg.svdvals(torch.stack([matrices[k] for k in members]))
        for k, row in zip(members, batch, strict=True):
            values[k] = row
    out = [0.0] * len(matrices)
    widths: dict[int, list[int]] = {}
    for k, row in enumerate(values):
        if len(row) and len(row) % BATCHED_VALUES == 0:
            widths.setdefault(len(row), []).append(k)
        else:
            out[k] = _entropy_rank(row)
    for members in widths.values():
        stacked = torch.stack([values[k] for k in members])
        total = stacked.sum(-1)
        p = stacked / total.unsqueeze(-1)
        entropy = (p * p.log()).sum(-1)
        usable = ((total > 0) & (p > 0).all(-1)).tolist()
        for i, k in enumerate(members):
            out[k] = float(torch.exp(-entropy[i])) if usable[i] else _entropy_rank(values[k])
    return out


def _entropy_rank(values: torch.Tensor) -> float:
    """exp of the entropy of the normalised ``values`` (float64 [k]; 0.0 if they sum to
    at most zero): :func:`effective_rank` after its singular values."""
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
