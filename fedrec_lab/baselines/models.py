"""The centralized reference models: the binary train matrix, ItemKNN, EASE, BPR-MF and ALS."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedrec_flwr.data.prepared import PreparedData
from fedrec_lab.baselines.scoring import Scorer

FACTORS = 32  # d of BPR-MF and ALS, as the federated methods' embedding-dim
ALS_ITERATIONS = 15


def train_matrix(prepared: PreparedData):
    """The binary users x items train matrix (``scipy.sparse`` CSR, float32)."""
    import scipy.sparse as sp

    counts = np.diff(np.asarray(prepared.train_indptr))
    users = np.repeat(np.arange(prepared.num_users), counts)
    items = np.asarray(prepared.train_items)
    matrix = sp.csr_matrix(
        (np.ones(len(items), dtype=np.float32), (users, items)),
        shape=(prepared.num_users, prepared.num_items),
    )
    matrix.sum_duplicates()
    matrix.data[:] = 1.0
    return matrix


def knn_neighbours(train, max_k: int, block: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """Each item's ``max_k`` most cosine-similar other items, most similar first (ties: lower
    item id first): (ids [I, K], similarities [I, K] float32)."""
    train = train.tocsc().astype(np.float64)
    gram = (train.T @ train).tocsr()
    norms = np.sqrt(gram.diagonal())
    inverse = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    num_items = train.shape[1]
    k = min(max_k, num_items - 1)
    ids = np.empty((num_items, k), dtype=np.int64)
    sims = np.empty((num_items, k), dtype=np.float32)
    for lo in range(0, num_items, block):
        hi = min(lo + block, num_items)
        dense = gram[lo:hi].toarray() * inverse[lo:hi, None] * inverse[None, :]
        dense[np.arange(hi - lo), np.arange(lo, hi)] = -1.0  # never its own neighbour
        order = np.argsort(-dense, axis=1, kind="stable")[:, :k]
        ids[lo:hi] = order
        sims[lo:hi] = np.take_along_axis(dense, order, axis=1)
    return ids, sims


def itemknn_scorer(train, ids: np.ndarray, sims: np.ndarray, k: int) -> Scorer:
    """Scores ``sum_{i in N_k(j), i in train(u)} cos(i, j)`` from :func:`knn_neighbours`."""
    import scipy.sparse as sp

    k = min(k, ids.shape[1])
    num_items = ids.shape[0]
    neighbours = sp.csr_matrix(
        (sims[:, :k].ravel(), ids[:, :k].ravel(), np.arange(0, num_items * k + 1, k)),
        shape=(num_items, num_items),
    )  # row j: item j's neighbours i and cos(i, j)
    neighbours_t = neighbours.T.tocsr()
    return lambda users: (train[users] @ neighbours_t).toarray()


def ease_scores(train, lam: float) -> np.ndarray:
    """EASE scores ``X B`` (users x items), ``B = I - P / diag(P)``, ``P = (X^T X + lam I)^-1``.

    Woodbury: ``P = (I - X^T K^-1 X) / lam`` with ``K = X X^T + lam I`` (users x users), so
    ``X P = K^-1 X =: M``, ``diag(P) = (1 - sum_u X * M) / lam`` and ``X B = X - M / diag(P)``;
    ``diag(B) = 0`` holds by construction. With fewer items than users, ``P`` itself (items x
    items), the smaller system.
    """
    dense = train.toarray().astype(np.float64)
    if train.shape[1] < train.shape[0]:
        gram = (train.T @ train).toarray().astype(np.float64)
        gram[np.diag_indices_from(gram)] += lam
        inverse = np.linalg.inv(gram)
        weights = -inverse / np.diag(inverse)
        weights[np.diag_indices_from(weights)] = 0.0
        return dense @ weights
    gram = (train @ train.T).toarray().astype(np.float64)
    gram[np.diag_indices_from(gram)] += lam
    solved = np.linalg.solve(gram, dense)  # M = K^-1 X
    diag = (1.0 - (dense * solved).sum(axis=0)) / lam
    return dense - solved / diag


def implicit_scores(train, kind: str, seed: int, **params: Any) -> np.ndarray:
    """User x item scores (``user_factors @ item_factors.T``) of BPR-MF or ALS, one thread."""
    from threadpoolctl import threadpool_limits

    if kind == "bpr":
        from implicit.cpu.bpr import BayesianPersonalizedRanking as Model
    else:
        from implicit.cpu.als import AlternatingLeastSquares as Model

        params = {"iterations": ALS_ITERATIONS, **params}
    with threadpool_limits(1, "blas"):  # implicit warns about a multi-threaded BLAS
        model = Model(factors=FACTORS, num_threads=1, random_state=seed, **params)
        model.fit(train.tocsr(), show_progress=False)
    return np.asarray(model.user_factors) @ np.asarray(model.item_factors).T


def matrix_scorer(scores: np.ndarray) -> Scorer:
    return lambda users: scores[users]
