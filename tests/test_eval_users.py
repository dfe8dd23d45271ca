"""``eval-users``: intermediate rounds evaluate a seeded sample of users, the last round all."""

import csv

import numpy as np
import pytest

from fedrec_flwr.client import app as client_app
from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.local_grid import LocalGrid
from fedrec_flwr.partition import eval_sample
from fedrec_flwr.server import run_federation

SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 40,
    "synthetic-items": 300,
    "synthetic-mean-degree": 10,
    "num-server-rounds": 3,
    "batch-size": 32,
    "item-lr": 0.5,
}

pytestmark = pytest.mark.usefixtures("private_cache")


def rounds(tmp_path, nodes, **overrides):
    config = {**SMALL, "results-dir": str(tmp_path / "results"), **overrides}
    run_federation(LocalGrid(client_app, config, num_nodes=nodes), RunConfig.from_mapping(config))
    (run_dir,) = (tmp_path / "results").iterdir()
    with open(run_dir / "rounds.csv") as f:
        return list(csv.DictReader(f))


def test_sample_is_seeded_sorted_distinct_and_all_when_zero():
    a = eval_sample(3, 2, 100, 10)
    assert np.array_equal(a, eval_sample(3, 2, 100, 10))
    assert not np.array_equal(a, eval_sample(3, 3, 100, 10))  # a new draw each round
    assert len(np.unique(a)) == 10 and np.all(np.diff(a) > 0)
    assert np.array_equal(eval_sample(3, 2, 100, 0), np.arange(100))
    assert np.array_equal(eval_sample(3, 2, 100, 500), np.arange(100))


def test_negative_eval_users_is_refused():
    with pytest.raises(ConfigError, match="eval-users"):
        RunConfig.from_mapping({**SMALL, "eval-users": -1})


def test_intermediate_rounds_evaluate_the_sample_and_the_last_round_everyone(tmp_path):
    full = rounds(tmp_path / "full", 1)
    sampled = rounds(tmp_path / "sampled", 1, **{"eval-users": 12})
    assert [r["train-loss"] for r in sampled] == [r["train-loss"] for r in full]
    assert [int(r["eval-users"]) for r in sampled] == [12, 12, 40]
    assert sampled[-1]["test-hr@10"] == full[-1]["test-hr@10"]  # last round: all users


def test_the_sample_does_not_depend_on_the_packing(tmp_path):
    one = rounds(tmp_path / "one", 1, **{"eval-users": 12})
    five = rounds(tmp_path / "five", 5, **{"eval-users": 12})
    for a, b in zip(one, five, strict=True):
        assert a["val-hr@10"] == b["val-hr@10"] and a["test-ndcg@10"] == b["test-ndcg@10"]
