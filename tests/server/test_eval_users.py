"""``eval-users``: intermediate rounds evaluate a seeded sample of users, the last round all."""

import csv

import numpy as np
import pytest

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.messages import record_arrays
from fedrec_flwr.partition import eval_sample, participants
from fedrec_flwr.server.payloads import PayloadPlanner
from fedrec_flwr.server_app import run_federation
from fedrec_lab.local_grid import LocalGrid

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


def test_one_user_nodes_without_a_sampled_user_get_no_rows(tmp_path, monkeypatch):
    """Faithful mode with a sample: only nodes holding a sampled user receive rows; those
    that owe a next-round request get an empty message; the rest none. The figures are
    those of every node receiving the table (the sampled users are the same)."""
    overrides = {"eval-users": 8, "fraction-train": 0.25, "num-server-rounds": 4}

    def run(folder, grid_nodes=40):
        config = {**SMALL, "results-dir": str(tmp_path / folder), **overrides}
        grid = LocalGrid(client_app, config, num_nodes=grid_nodes, keep_messages=True)
        run_federation(grid, RunConfig.from_mapping(config))
        (run_dir,) = (tmp_path / folder).iterdir()
        with open(run_dir / "rounds.csv") as f:
            return list(csv.DictReader(f)), grid.sent

    pruned, sent = run("pruned")
    monkeypatch.setattr(PayloadPlanner, "eval_recipients", lambda self, r, n: (None, set()))
    everyone, sent_all = run("everyone")
    figures = [k for k in pruned[0] if k.startswith(("val-", "test-", "train-", "erank"))]
    for a, b in zip(pruned, everyone, strict=True):
        assert {k: a[k] for k in figures} == {k: b[k] for k in figures}
        assert a["eval-users"] == b["eval-users"]
    assert int(pruned[0]["bytes-down"]) < int(everyone[0]["bytes-down"])
    assert pruned[-1]["bytes-down"] == everyone[-1]["bytes-down"]  # last round: all users

    def evaluated(messages, server_round):
        return [
            m
            for m in messages
            if m.metadata.message_type == "evaluate"
            and m.content["config"]["server-round"] == server_round
        ]

    config = RunConfig.from_mapping({**SMALL, **overrides})
    for server_round in (1, 2, 3):
        chosen = set(eval_sample(config.training.seed, server_round, 40, 8).tolist())
        now = set(participants(config.training.seed, server_round, 40, 0.25).tolist())
        following = set(participants(config.training.seed, server_round + 1, 40, 0.25).tolist())
        owing = (following - now) - chosen
        got = {m.metadata.dst_node_id: m for m in evaluated(sent, server_round)}
        assert len(got) == len(chosen | owing) < 40
        assert len(evaluated(sent_all, server_round)) == 40
        rows = sorted(
            int(record_arrays(m.content["arrays"])["item-rows"].shape[0]) for m in got.values()
        )
        assert rows.count(0) == len(owing) and set(rows[len(owing) :]) == {300}
    assert len(evaluated(sent, 4)) == 40
    # every node trained after round 1 had sent its request: only the rows it asked for
    trained = [m for m in sent if m.metadata.message_type == "train"]
    assert all(
        "item-ids" in record_arrays(m.content["arrays"])
        for m in trained
        if m.content["config"]["server-round"] > 1
    )
