"""What one user uploads: its tuned rows, its decoy rows, under LDP (plain NumPy).

A node calls :func:`user_uploads` on its round's users before it sums their rows, so that
clipping, noise and decoys are per user, as if each user were its own node (faithful mode).

Why the aggregate is unbiased. The server's ``round-mean`` rule moves row ``i`` by the sum
of the uploaders' changes ``(uploaded row - global row)`` divided by the number of users in
the round, which does not depend on how many users uploaded row ``i``. A decoy row is the
global row plus zero-mean noise: with noise off it adds exactly zero change (the table is
the same up to float64 rounding), with noise on it adds zero-mean noise (variance, no bias).
``toucher-mean`` divides by the number of uploaders of the row, which decoys would inflate
(shrinking every step of the rows they hit) without the server being able to tell them
apart, so the configuration refuses decoys with it. Clipping is the one bias LDP brings:
changes longer than ``ldp-clip`` are shortened, as in DP-SGD. Decoys trained with the
user's samples (``decoy-updates``) are already among its tuned rows: they upload a real
change, and bias the aggregate as extra training samples would (see
:mod:`fedrec_flwr.privacy.decoys`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import PreparedData
from fedrec_flwr.privacy.decoys import user_decoys
from fedrec_flwr.privacy.ldp import privatize
from fedrec_flwr.seeding import keyed_rng

#: Called with (user, round, items, uploaded rows, sent rows) of every user upload a node
#: builds while it is set: the privacy audit's view of one user's upload (faithful mode).
Observer = Callable[[int, int, np.ndarray, np.ndarray, np.ndarray], None]
OBSERVERS: list[Observer] = []


def privacy_active(config: RunConfig) -> bool:
    """Does the configuration change what a user uploads (LDP or decoys)?"""
    return config.ldp_mechanism != "none" or config.ldp_laplace_lambda > 0 or config.decoy_ratio > 0


def per_user_uploads(config: RunConfig) -> bool:
    """Must a node build each user's upload on its own (privacy on, or an observer set)?"""
    return privacy_active(config) or bool(OBSERVERS)


def with_decoys(
    prepared: PreparedData, config: RunConfig, user: int, items: np.ndarray
) -> np.ndarray:
    """The sorted rows a user requests: ``items`` (what it trains) and its decoys."""
    decoys = user_decoys(prepared, config, user)
    return np.union1d(items, decoys).astype(np.int64) if len(decoys) else items


def user_uploads(
    prepared: PreparedData,
    config: RunConfig,
    server_round: int,
    users: np.ndarray,
    row_offsets: np.ndarray,
    row_items: np.ndarray,
    tuned: np.ndarray,
    sent: np.ndarray,
    lookup: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """(flat items, flat uploaded rows) of the round's users, user after user, each user's
    block sorted by item. ``tuned`` and ``sent`` are the flat tuned and received rows of
    ``row_items``; ``lookup(items)`` gives the received rows of other items (decoys)."""
    items_out, rows_out = [], []
    for j, user in enumerate(np.asarray(users, dtype=np.int64)):
        lo, hi = int(row_offsets[j]), int(row_offsets[j + 1])
        items, rows, base = row_items[lo:hi], tuned[lo:hi], sent[lo:hi]
        decoys = np.setdiff1d(user_decoys(prepared, config, int(user)), items)
        if len(decoys):
            decoy_rows = lookup(decoys)
            order = np.argsort(np.r_[items, decoys], kind="stable")
            items = np.r_[items, decoys][order]
            rows = np.concatenate([rows, decoy_rows])[order]
            base = np.concatenate([base, decoy_rows])[order]
        rng = keyed_rng(config.seed, "ldp-noise", int(user), server_round)
        rows = privatize(
            base,
            rows,
            rng,
            config.ldp_mechanism,
            config.ldp_epsilon,
            config.ldp_delta,
            config.ldp_clip,
            config.ldp_laplace_lambda,
        )
        for observer in OBSERVERS:
            observer(int(user), server_round, items, rows, base)
        items_out.append(items)
        rows_out.append(rows)
    if not items_out:
        return row_items[:0], tuned[:0]
    return np.concatenate(items_out), np.concatenate(rows_out).astype(np.float32)
