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


def metrics_from_ranks(ranks: np.ndarray, protocol: str) -> dict[str, float]:
    """Sums over users of each metric (divide by the number of users for the mean)."""
    ranks = np.asarray(ranks, dtype=np.float64)
    gain = 1.0 / np.log2(ranks + 2.0)
    values = {
        "hr@10": (ranks < 10).sum(),
        "ndcg@10": np.where(ranks < 10, gain, 0.0).sum(),
        "recall@20": (ranks < 20).sum(),
        "ndcg@20": np.where(ranks < 20, gain, 0.0).sum(),
        "mrr": (1.0 / (ranks + 1.0)).sum(),
    }
    return {name: float(values[name]) for name in metric_names(protocol)}


def per_user_metrics(ranks: np.ndarray, protocol: str) -> np.ndarray:
    """Each user's value of each metric (float64 [users, metrics], ``metric_names`` order):
    the terms :func:`metrics_from_ranks` sums."""
    ranks = np.asarray(ranks, dtype=np.float64)
    gain = 1.0 / np.log2(ranks + 2.0)
    values = {
        "hr@10": (ranks < 10).astype(np.float64),
        "ndcg@10": np.where(ranks < 10, gain, 0.0),
        "recall@20": (ranks < 20).astype(np.float64),
        "ndcg@20": np.where(ranks < 20, gain, 0.0),
        "mrr": 1.0 / (ranks + 1.0),
    }
    names = metric_names(protocol)
    return np.stack([values[name] for name in names], axis=1).reshape(len(ranks), len(names))


def sampled_metrics_from_ranks(ranks: np.ndarray) -> dict[str, float]:
    """Sums over users of the ``s100-*`` metrics of ranks among 99 sampled negatives."""
    return {SAMPLED_PREFIX + k: v for k, v in metrics_from_ranks(ranks, "paper").items()}


def sampled_per_user_metrics(ranks: np.ndarray) -> np.ndarray:
    """Each user's ``s100-*`` values (float64 [users, 2], :data:`SAMPLED_METRICS` order)."""
    return per_user_metrics(ranks, "paper")
