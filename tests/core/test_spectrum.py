"""The effective ranks of many matrices at once are each matrix's own, bit for bit."""

import numpy as np
import pytest
import torch

from fedrec_flwr.spectrum import effective_rank, effective_ranks


def _matrices(rng: np.random.Generator, count: int) -> list[torch.Tensor]:
    """Float32 rows as float64 matrices of repeated and varied shapes: some all zero, some
    with zero columns or repeated rows (zero singular values), some with fewer rows than
    columns."""
    out = []
    for _ in range(count):
        cols = int(rng.choice([32, 32, 32, 16, 8, 5, 48]))
        rows = int(rng.choice([int(rng.integers(1, 120)), 40, 32, 16, 2, 1, 0]))
        matrix = rng.standard_normal((rows, cols)).astype(np.float32) * rng.choice([1e-3, 1, 30])
        kind = rng.random()
        if kind < 0.05:
            matrix[:] = 0
        elif kind < 0.1:
            matrix[:, : cols // 2] = 0
        elif kind < 0.15 and rows > 1:
            matrix[1:] = matrix[:1]
        out.append(torch.as_tensor(matrix, dtype=torch.float64))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_effective_ranks_are_each_matrix_s_own(seed):
    matrices = _matrices(np.random.default_rng(seed), 150)
    got = effective_ranks(matrices)
    want = [effective_rank(m) for m in matrices]
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a == b or (np.isnan(a) and np.isnan(b))
    assert effective_ranks([]) == []
