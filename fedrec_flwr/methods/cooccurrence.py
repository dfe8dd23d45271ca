"""Item-item models from a sum over users of their co-occurrences (plain NumPy and PyTorch).

Every model here needs only two sums over the users ``u`` with binary history ``x_u``:

- the Gram matrix ``G = sum_u w_u x_u x_u^T`` (``w_u = 1``; GF-CF: ``1 / d_u``, the user's
  degree), whose diagonal is, for ``w_u = 1``, each item's number of users;
- the item counts ``n = sum_u x_u``.

Each model is a matrix ``W`` [items, items] that scores user ``u``'s items as ``x_u W``:

- **EASE** (Steck, WWW 2019): ``P = (G + lambda I)^-1``, ``W = I - P diag(1 / diag P)``
  (zero diagonal);
- **ItemKNN** (cosine): ``cos(i, j) = G_ij / (sqrt(G_ii G_jj) + shrink)``; column ``j`` of
  ``W`` keeps item ``j``'s ``k`` most similar other items (ties: the lower item id);
- **GF-CF** (Shen et al., CIKM 2021): with ``D = diag(n)`` and the user-degree-normalised
  Gram ``G`` (``w_u = 1 / d_u``), the normalised item-item matrix is
  ``S = D^-1/2 G D^-1/2`` (``R~^T R~`` of the paper) and
  ``W = S + alpha D^-1/2 V V^T D^1/2``, ``V`` the top ``rank`` eigenvectors of ``S`` (the
  ideal low-pass filter).

The inputs are float64 and may be noisy (the Gaussian mechanism): a count at or below zero
counts as absent. With ``itemitem-gram-rank`` = ``r`` > 0 every model reads, in place of
``G``, its best rank-``r`` positive semidefinite approximation ``G_r = V_r diag(l_r) V_r^T``
(the ``r`` largest eigenvalues, those below zero set to zero): a sum of co-occurrences is
positive semidefinite and, on real data, close to low-rank, while the mechanism's noise
spreads evenly over every direction, so the projection drops the noise outside the top
directions. It reads the released sums only (post-processing: no privacy cost).

The mechanism's noise on the released Gram is a symmetric Gaussian matrix of standard
deviation ``sigma`` per entry, whose eigenvalues lie within ``+-2 sigma sqrt(m)`` over ``m``
items: with ``itemitem-dp-ridge`` = ``c`` > 0, EASE's lambda is ``itemitem-lambda + c 2 sigma
sqrt(m)``, so that ``c >= 1`` keeps ``G + lambda I`` positive definite (:func:`noise_ridge`;
post-processing too).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fedrec_flwr.methods.itemitem import ItemItemKeys

#: Items at or below which GF-CF's top eigenvectors come from a full eigendecomposition;
#: above, from a keyed randomised subspace iteration.
FULL_EIGEN_LIMIT = 4096
SUBSPACE_ITERATIONS = 12
OVERSAMPLING = 64


def symmetric_from_upper(upper: np.ndarray, num_items: int) -> np.ndarray:
    """The symmetric [I, I] float64 matrix whose upper triangle (row-major, diagonal
    included, ``np.triu_indices`` order) is ``upper`` (row by row: no index arrays of the
    triangle's size)."""
    out = np.zeros((num_items, num_items), dtype=np.float64)
    start = 0
    for i in range(num_items):
        segment = upper[start : start + num_items - i]
        out[i, i:] = segment
        out[i:, i] = segment
        start += num_items - i
    return out


def ease_weights(gram: np.ndarray, lam: float) -> np.ndarray:
    """EASE's ``W = I - P / diag(P)`` (columns), ``P = (G + lam I)^-1``, float64."""
    matrix = torch.from_numpy(np.array(gram, dtype=np.float64))
    matrix.diagonal().add_(lam)
    inverse = torch.linalg.inv(matrix)  # noisy sums may make it indefinite: no Cholesky
    del matrix
    inverse.div_(inverse.diagonal().clone().unsqueeze(0)).neg_()
    inverse.diagonal().zero_()
    return inverse.numpy()


def itemknn_weights(gram: np.ndarray, k: int, shrink: float = 0.0, block: int = 512):
    """Cosine ItemKNN's ``W`` (float64 [I, I]): column ``j`` holds ``cos(i, j)`` for item
    ``j``'s ``k`` most similar other items ``i`` (most similar first, ties: lower id first;
    the others 0). A noisy diagonal at or below zero gives the item a zero norm."""
    num_items = len(gram)
    norms = np.sqrt(np.clip(np.diagonal(gram), 0.0, None))
    inverse = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    k = min(k, num_items - 1)
    weights = np.zeros((num_items, num_items), dtype=np.float64)
    for lo in range(0, num_items, block):
        hi = min(lo + block, num_items)
        if shrink > 0:
            dense = gram[lo:hi] / (norms[lo:hi, None] * norms[None, :] + shrink)
        else:
            dense = gram[lo:hi] * inverse[lo:hi, None] * inverse[None, :]
        dense[np.arange(hi - lo), np.arange(lo, hi)] = -1.0  # never its own neighbour
        order = np.argsort(-dense, axis=1, kind="stable")[:, :k]
        sims = np.take_along_axis(dense, order, axis=1).astype(np.float32)
        rows = np.repeat(np.arange(lo, hi), k)
        weights[order.ravel(), rows] = sims.ravel()  # column j: j's neighbours
    return weights


def gfcf_weights(gram: np.ndarray, counts: np.ndarray, alpha: float, rank: int, seed: int):
    """GF-CF's ``W = S + alpha D^-1/2 V V^T D^1/2`` from the user-degree-normalised Gram
    ``gram`` and the item counts (float64 [I, I])."""
    counts = np.clip(np.asarray(counts, dtype=np.float64), 0.0, None)
    root = np.sqrt(counts)
    inverse_root = np.divide(1.0, root, out=np.zeros_like(root), where=root > 0)
    normalised = gram * inverse_root[:, None] * inverse_root[None, :]
    weights = normalised.copy()
    if alpha != 0 and rank > 0:
        vectors = numerical_range(*top_eigenpairs(normalised, min(rank, len(gram)), seed))
        weights += alpha * (inverse_root[:, None] * vectors) @ (vectors.T * root[None, :])
    return weights


def numerical_range(values: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """The eigenvectors whose eigenvalue is above the numerical-rank tolerance (the largest
    times the size times machine epsilon, as :func:`numpy.linalg.matrix_rank`). The others
    span the Gram's null space: a user's history is orthogonal to them, so in exact arithmetic
    they add nothing to a score, but which basis of that space an eigensolver returns depends
    on the BLAS kernels of the machine, and their rounding noise would break ties in ranks
    differently from one machine to another."""
    if not len(values):
        return vectors
    tolerance = max(float(values.max()), 0.0) * len(vectors) * np.finfo(np.float64).eps
    return vectors[:, values > tolerance]


def top_eigenpairs(matrix: np.ndarray, rank: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``rank`` largest eigenvalues of the symmetric ``matrix`` ([rank], largest first)
    and their eigenvectors ([I, rank]): a full eigendecomposition for small catalogues, else
    a randomised subspace iteration started from a generator keyed by ``seed``."""
    size = len(matrix)
    if size <= FULL_EIGEN_LIMIT or rank + OVERSAMPLING >= size:
        values, vectors = np.linalg.eigh(matrix)
        return values[::-1][:rank], vectors[:, ::-1][:, :rank]
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 39, rank]))
    basis = np.linalg.qr(matrix @ rng.standard_normal((size, rank + OVERSAMPLING)))[0]
    for _ in range(SUBSPACE_ITERATIONS):
        basis = np.linalg.qr(matrix @ basis)[0]
    values, small = np.linalg.eigh(basis.T @ matrix @ basis)
    order = np.argsort(-values, kind="stable")[:rank]
    return values[order], basis @ small[:, order]


def low_rank_gram(gram: np.ndarray, rank: int, seed: int) -> np.ndarray:
    """``gram``'s best rank-``rank`` positive semidefinite approximation (float64 [I, I]):
    its ``rank`` largest eigenvalues, those below zero set to zero, with their eigenvectors
    (the module doc). A ``rank`` at or above the size keeps every eigenvector: the nearest
    positive semidefinite matrix."""
    values, vectors = top_eigenpairs(gram, min(rank, len(gram)), seed)
    return (vectors * np.clip(values, 0.0, None)) @ vectors.T


def noise_ridge(keys: ItemItemKeys, noise_std: float, size: int) -> float:
    """EASE's lambda: ``itemitem-lambda`` plus ``itemitem-dp-ridge`` times the largest
    eigenvalue of the mechanism's symmetric noise over ``size`` items, ``2 sigma sqrt(size)``
    (a Wigner matrix's spectral edge), so that ``G + lambda I`` stays positive definite
    whatever the noise (the module doc)."""
    return keys.itemitem_lambda + keys.itemitem_dp_ridge * 2.0 * noise_std * math.sqrt(size)


def model_weights(
    kind: str,
    gram: np.ndarray,
    counts: np.ndarray,
    keys: ItemItemKeys,
    seed: int,
    noise_std: float = 0.0,
) -> np.ndarray:
    """The item-item matrix ``W`` of ``kind`` (``itemitem-model``) from the sums, with the
    run's item-item keys and seed (the randomised eigenvectors of GF-CF and of a large
    catalogue's ``itemitem-gram-rank`` projection) and the standard deviation of the noise
    on each released entry (``itemitem-dp-ridge``)."""
    if keys.itemitem_gram_rank > 0:
        gram = low_rank_gram(gram, keys.itemitem_gram_rank, seed)
    if kind == "ease":
        return ease_weights(gram, noise_ridge(keys, noise_std, len(gram)))
    if kind == "itemknn":
        return itemknn_weights(gram, keys.itemitem_neighbours, keys.itemitem_shrink)
    if kind == "gfcf":
        return gfcf_weights(gram, counts, keys.itemitem_alpha, keys.itemitem_rank, seed)
    raise ValueError(f"unknown item-item model '{kind}' (ease, itemknn, gfcf)")
