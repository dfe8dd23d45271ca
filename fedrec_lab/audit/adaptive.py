"""Attacks that know the defence (plain NumPy): each returns a score per requested or uploaded
item of one user (higher = more likely a positive), scored like :mod:`.attacks`.

On the uploads (what the user sent back, ``U``, against what it was sent, ``G``):

- ``unchanged``: 1 for a row that differs from the row the server sent, 0 for one that comes
  back exactly as sent (a decoy under ``decoy-updates = "unchanged"`` with noise off);
- ``distribution``: the server simulates the user's round with its shadow copy (the method,
  its rates, the decoy rule and the number of positives, negatives and decoys known), learns
  how positives' changes look against the other rows' (log-norm and the signed cosine with
  the changes' main direction) and scores each real row by the positive share among its
  nearest simulated rows;
- ``pubpara``: after PubPara (TOIS 2025): a user's preference sits in the public
  parameters it uploads, not in its private ones. The server estimates the user's score
  direction from the changes (their first singular vector), then scores the *uploaded* rows
  (not their changes) along it and refines the direction a few times as the difference of
  the mean uploaded rows of the current top guesses and of the rest. The paper's exact
  procedure is not reproduced (no code is public): this keeps its idea and its cost (no
  shadow training);
- ``multi-round``: the user's changes summed over its uploads of the last rounds (a window
  ending at the attacked round), projected on their first singular vector: a positive moves
  the same way every round, a fresh negative once.

On the requests (the item ids alone):

- ``popularity``: how many of the round's users request the item (positives are popular,
  uniform decoys and negatives are not);
- ``consistency``: the share of the neighbouring rounds' requests of the user that contain
  the item (positives and fixed decoys come back every round, fresh negatives do not).
"""

from __future__ import annotations

import numpy as np

from fedrec_lab.audit.attacks import Shadow

ADAPTIVE_ATTACKS = (
    "unchanged",
    "popularity",
    "consistency",
    "distribution",
    "pubpara",
    "multi-round",
)


def unchanged_scores(sent: np.ndarray, uploaded: np.ndarray) -> np.ndarray:
    """1 where the uploaded row differs from the row sent, else 0."""
    return np.any(uploaded.astype(np.float64) != sent, axis=1).astype(np.float64)


def popularity_scores(items: np.ndarray, request_counts: np.ndarray) -> np.ndarray:
    """The number of the round's users requesting each item."""
    return request_counts[items].astype(np.float64)


def consistency_scores(items: np.ndarray, other_requests: list[np.ndarray]) -> np.ndarray:
    """Share of ``other_requests`` (the user's requests of other rounds) holding each item."""
    if not other_requests:
        return np.zeros(len(items))
    return np.mean([np.isin(items, request) for request in other_requests], axis=0)


def _oriented_direction(changes: np.ndarray) -> np.ndarray:
    """The first right singular vector of ``changes``, signed so that fewer rows project
    positively on it (the positive side is the smaller one); zeros when nothing moved."""
    if not np.any(changes):
        return np.zeros(changes.shape[1])
    _, _, vt = np.linalg.svd(changes, full_matrices=False)
    projection = changes @ vt[0]
    return vt[0] if (projection > 0).sum() <= (projection < 0).sum() else -vt[0]


def pubpara_scores(
    sent: np.ndarray, uploaded: np.ndarray, expected: int, iterations: int = 3
) -> np.ndarray:
    """The uploaded rows scored along the user's estimated preference direction (above)."""
    rows = uploaded.astype(np.float64)
    direction = _oriented_direction(rows - sent)
    scores = rows @ direction
    k = min(max(expected, 1), len(rows) - 1)
    for _ in range(iterations):
        if k <= 0:
            break
        top = np.zeros(len(rows), dtype=bool)
        top[np.argsort(-scores, kind="stable")[:k]] = True
        direction = rows[top].mean(0) - rows[~top].mean(0)
        scores = rows @ direction
    return scores


def multiround_scores(
    items: np.ndarray, history: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> np.ndarray:
    """Projection of each of ``items``' summed changes over ``history`` (the user's uploads:
    items, uploaded rows, sent rows) on their first singular vector (smaller side positive)."""
    dim = history[0][1].shape[1]
    where = {int(item): j for j, item in enumerate(items)}
    total = np.zeros((len(items), dim))
    for round_items, rows, sent in history:
        change = rows.astype(np.float64) - sent
        for j, item in enumerate(round_items):
            slot = where.get(int(item))
            if slot is not None:
                total[slot] += change[j]
    return total @ _oriented_direction(total)


def _features(sent: np.ndarray, uploaded: np.ndarray) -> np.ndarray:
    """Per row: log of the change's norm and its signed cosine with the main direction."""
    changes = uploaded.astype(np.float64) - sent
    norms = np.linalg.norm(changes, axis=1)
    cosine = (changes @ _oriented_direction(changes)) / np.maximum(norms, 1e-300)
    return np.c_[np.log(norms + 1e-12), cosine]


def distribution_scores(
    sent: np.ndarray,
    uploaded: np.ndarray,
    shadow: Shadow,
    roles: tuple[int, int, int],
    decoy_label: float | None,
    rng: np.random.Generator,
    neighbours: int = 25,
) -> np.ndarray:
    """Positive share among the ``neighbours`` nearest simulated rows (features above).
    ``roles``: (positives, negatives, decoys) in the simulated round; ``decoy_label``: the
    label decoys train with (None: they come back unchanged)."""
    positives, negatives, decoys = roles
    k = len(sent)
    role = np.full(k, 1)  # 0 positive, 1 negative, 2 decoy, on a random assignment of rows
    order = rng.permutation(k)
    role[order[:positives]] = 0
    role[order[positives + negatives : positives + negatives + decoys]] = 2
    labels = (role == 0).astype(np.float64)
    if decoy_label is not None:
        labels[role == 2] = decoy_label
    simulated = shadow.train(sent, labels, rng)
    if decoy_label is None:
        simulated[role == 2] = sent[role == 2]
    reference, query = _features(sent, simulated), _features(sent, uploaded)
    scale = np.maximum(reference.std(0), 1e-12)
    reference, query = reference / scale, query / scale
    count = min(neighbours, k)
    scores = np.empty(k)
    for lo in range(0, k, 512):
        distance = ((query[lo : lo + 512, None, :] - reference[None]) ** 2).sum(-1)
        nearest = np.argpartition(distance, count - 1, axis=1)[:, :count]
        scores[lo : lo + 512] = (role[nearest] == 0).mean(1)
    return scores
