"""Ranking metrics, hand-computed, with ties and NaN scores."""

import math

import numpy as np
import pytest
import torch

from fedrec_flwr.evaluation import metrics_from_ranks, ranks_from_scores


def test_rank_counts_candidates_scoring_at_least_the_target():
    target = torch.tensor([0.5, 0.5, 2.0])
    candidates = torch.tensor([[0.1, 0.9, 0.5], [0.1, 0.2, 0.3], [3.0, 2.0, 2.0]])
    assert ranks_from_scores(target, candidates).tolist() == [2, 0, 3]  # ties count against


def test_excluded_candidates_do_not_compete():
    target = torch.tensor([0.5])
    candidates = torch.tensor([[0.9, 0.8, 0.1]])
    valid = torch.tensor([[False, True, True]])
    assert ranks_from_scores(target, candidates, valid).tolist() == [1]


def test_nan_scores_count_as_worst():
    target = torch.tensor([float("nan"), 0.0])
    candidates = torch.tensor([[0.1, 0.2], [float("nan"), -1.0]])
    assert ranks_from_scores(target, candidates).tolist() == [2, 1]


def test_hr_ndcg_mrr_by_hand():
    ranks = np.array([0, 1, 9, 10, 19, 25])
    strict = metrics_from_ranks(ranks, "strict")
    assert strict["hr@10"] == 3
    assert strict["ndcg@10"] == pytest.approx(1 + 1 / math.log2(3) + 1 / math.log2(11))
    assert strict["recall@20"] == 5
    assert strict["ndcg@20"] == pytest.approx(
        1 + 1 / math.log2(3) + 1 / math.log2(11) + 1 / math.log2(12) + 1 / math.log2(21)
    )
    assert strict["mrr"] == pytest.approx(1 + 1 / 2 + 1 / 10 + 1 / 11 + 1 / 20 + 1 / 26)
    assert set(metrics_from_ranks(ranks, "paper")) == {"hr@10", "ndcg@10"}
