"""Ranking metrics and the two evaluation protocols.

A held-out item's rank is the number of competing candidates that score at least as high as
it: ties count against the held-out item, and a NaN score (a diverged model) counts as the
worst. Scores are compared as logits (before the sigmoid), where float32 cannot saturate.

``paper``: 100 candidates (the held-out item and 99 negatives never interacted with, drawn
once per user); HR@10, NDCG@10. ``strict``: every item except the user's train positives
(and, for test, the validation item); HR@10, NDCG@10, Recall@20, NDCG@20, MRR, and from the
same scores the sampled-100 HR@10 and NDCG@10 (``s100-*``: the held-out item ranked among the
99 negatives ``paper`` would give it).
"""

from __future__ import annotations

import numpy as np
import torch

PAPER_METRICS = ("hr@10", "ndcg@10")
STRICT_METRICS = ("hr@10", "ndcg@10", "recall@20", "ndcg@20", "mrr")
#: Under ``strict``, the paper protocol's metrics of the same scores, ranked among the
#: split's 99 sampled negatives (``PreparedData.eval_negatives``).
SAMPLED_PREFIX = "s100-"
SAMPLED_METRICS = tuple(SAMPLED_PREFIX + name for name in PAPER_METRICS)
SPLITS = ("val", "test")


def metric_names(protocol: str) -> tuple[str, ...]:
    """The metrics a protocol computes from a held-out item's rank among its candidates."""
    return PAPER_METRICS if protocol == "paper" else STRICT_METRICS


def reported_metrics(protocol: str) -> tuple[str, ...]:
    """The metrics a protocol's evaluation reports (``rounds.csv``, ``summary.json``,
    ``per-user.csv``, replies): :func:`metric_names`, then under ``strict`` the sampled-100
    ones (:data:`SAMPLED_METRICS`)."""
    return metric_names(protocol) + (SAMPLED_METRICS if protocol == "strict" else ())


def ranks_from_scores(
    target: torch.Tensor, candidates: torch.Tensor, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """0-based rank of each target among its candidates: #valid candidates scoring >= it.

    ``target`` [a], ``candidates`` [a, k] (the target itself excluded), ``valid`` [a, k]
    marks the candidates that compete (all if None).
    """
    beats = candidates >= target.unsqueeze(-1)
    beats |= torch.isnan(candidates)
    if valid is not None:
        beats &= valid
    rank = beats.sum(-1)
    num_valid = valid.sum(-1) if valid is not None else torch.full_like(rank, candidates.shape[1])
    return torch.where(torch.isnan(target), num_valid, rank)


def metric_terms(ranks: np.ndarray, protocol: str) -> dict[str, np.ndarray]:
    """Each user's value of each of the protocol's metrics (float64 [users] per metric, in
    ``metric_names`` order)."""
    ranks = np.asarray(ranks, dtype=np.float64)
    gain = 1.0 / np.log2(ranks + 2.0)
    values = {
        "hr@10": (ranks < 10).astype(np.float64),
        "ndcg@10": np.where(ranks < 10, gain, 0.0),
        "recall@20": (ranks < 20).astype(np.float64),
        "ndcg@20": np.where(ranks < 20, gain, 0.0),
        "mrr": 1.0 / (ranks + 1.0),
    }
    return {name: values[name] for name in metric_names(protocol)}


def metrics_from_ranks(ranks: np.ndarray, protocol: str) -> dict[str, float]:
    """Sums over users of each metric (divide by the number of users for the mean)."""
    return {name: float(v.sum()) for name, v in metric_terms(ranks, protocol).items()}


def per_user_metrics(ranks: np.ndarray, protocol: str) -> np.ndarray:
    """Each user's value of each metric (float64 [users, metrics], ``metric_names`` order):
    the terms :func:`metrics_from_ranks` sums."""
    return stacked(metric_terms(ranks, protocol), len(ranks))


def stacked(terms: dict[str, np.ndarray], num_users: int) -> np.ndarray:
    """:func:`metric_terms` as one float64 [users, metrics] array."""
    return np.stack(list(terms.values()), axis=1).reshape(num_users, len(terms))


def sampled_metric_terms(ranks: np.ndarray) -> dict[str, np.ndarray]:
    """Each user's ``s100-*`` values from ranks among 99 sampled negatives
    (:data:`SAMPLED_METRICS` order)."""
    return {SAMPLED_PREFIX + k: v for k, v in metric_terms(ranks, "paper").items()}
