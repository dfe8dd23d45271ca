"""Popularity floor, checked against a direct computation."""

import numpy as np
import pytest

from fedrec_flwr.baselines import popularity
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path / "cache"))


def test_strict_popularity_matches_a_direct_loop():
    config = RunConfig(
        dataset="synthetic", synthetic_users=40, synthetic_items=300, synthetic_mean_degree=10
    )
    prepared = prepare(config)
    counts = np.bincount(prepared.train_items, minlength=prepared.num_items)
    ranks = []
    for user in range(prepared.num_users):
        target = prepared.test_item[user]
        excluded = set(prepared.train_positives(user)) | {prepared.valid_item[user], target}
        competitors = [i for i in range(prepared.num_items) if i not in excluded]
        ranks.append(sum(counts[i] >= counts[target] for i in competitors))
    ranks = np.array(ranks)
    test = popularity(config)["test"]
    assert test["hr@10"] == pytest.approx(np.mean(ranks < 10))
    assert test["mrr"] == pytest.approx(np.mean(1 / (ranks + 1)))
