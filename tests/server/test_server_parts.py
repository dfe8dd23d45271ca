"""The strategy's parts without Flower: payload plans, evaluation rounds, the best round and
early stopping, round reports; and their state dicts."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from fedrec_flwr.config import RunConfig
from fedrec_flwr.partition import participants
from fedrec_flwr.server.evaluation_rounds import EvaluationRounds, NodeEvaluation
from fedrec_flwr.server.nodes import NodeInfo
from fedrec_flwr.server.payloads import PayloadPlanner
from fedrec_flwr.server.recording import RoundLog, RoundReporter
from fedrec_flwr.server.stopping import RunStopping

FLOWER_FREE = (
    "model",
    "defences",
    "nodes",
    "payloads",
    "evaluation_rounds",
    "stopping",
    "recording",
)


def test_the_parts_import_without_flower():
    modules = ", ".join(f"fedrec_flwr.server.{name}" for name in FLOWER_FREE)
    code = f"import sys, {modules}; print(sorted(m for m in sys.modules if m.startswith('flwr')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def nodes(num_users: int = 12, num_nodes: int = 3) -> dict[int, NodeInfo]:
    """Node ``100 + p`` holds users p, p + 3, ...; node 101 ranks only items 0 and 5."""
    return {
        100 + p: NodeInfo(
            partition_id=p,
            num_partitions=num_nodes,
            users=np.arange(p, num_users, num_nodes, dtype=np.int64),
            eval_items=np.array([0, 5], dtype=np.int64) if p == 1 else None,
        )
        for p in range(num_nodes)
    }


def config(**keys) -> RunConfig:
    return RunConfig.from_mapping({"num-server-rounds": 4, **keys})


def through_a_checkpoint(state: dict) -> dict:
    """``state`` as a checkpoint reads it back: arrays as they are, the rest through JSON."""
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    tag = json.loads(json.dumps({k: v for k, v in state.items() if k not in arrays}))
    return {**tag, **arrays}


def test_train_orders_give_the_selected_users_and_a_fresh_request_only():
    planner = PayloadPlanner(config(**{"fraction-train": 0.5}), nodes(), 12)
    planner.nodes[100].request_round, planner.nodes[100].request_items = 2, np.array([3, 4])
    planner.nodes[101].request_round, planner.nodes[101].request_items = 1, np.array([7])
    orders = planner.train_orders(2)
    selected = participants(planner.config.training.seed, 2, 12, 0.5)
    for node_id, info in planner.nodes.items():
        mine = np.intersect1d(info.users, selected)
        if len(mine) == 0:
            assert node_id not in orders
            continue
        np.testing.assert_array_equal(orders[node_id].users, mine)
    assert orders[100].item_ids.tolist() == [3, 4]  # asked for round 2
    assert orders[101].item_ids is None  # a stale request: the full table


def test_evaluation_plan_with_and_without_a_user_sample():
    planner = PayloadPlanner(config(), nodes(), 12)
    everyone = planner.evaluation_plan(1, 0)
    assert list(everyone) == [100, 101, 102]
    assert everyone[100] is None and everyone[101].tolist() == [0, 5]

    planner = PayloadPlanner(config(**{"fraction-train": 0.25}), nodes(40, 40), 40)
    sampled, owing = planner.eval_recipients(1, 4)
    plan = planner.evaluation_plan(1, 4)
    assert len(sampled) == 4 and set(plan) == sampled | owing
    assert all(len(plan[node]) == 0 for node in owing)  # no rows, just the chance to reply
    assert not sampled & owing


def test_pending_requests_round_trip_through_the_state_dict():
    planner = PayloadPlanner(config(), nodes(), 12)
    planner.nodes[102].request_round, planner.nodes[102].request_items = 3, np.array([1, 2])
    state = planner.state_dict()
    assert state["requests"] == {"0": 0, "1": 0, "2": 3}
    assert set(state) == {"requests", "request/2"}
    restored = PayloadPlanner(config(), nodes(), 12)
    restored.load_state_dict(through_a_checkpoint(state))
    assert restored.nodes[102].request_round == 3
    assert restored.nodes[102].request_items.tolist() == [1, 2]
    assert restored.nodes[100].request_items is None
    with pytest.raises(ValueError, match="no request of partition 2"):
        restored.load_state_dict({"requests": {"0": 1, "1": 1}})


def test_evaluation_rounds_are_due_every_eval_every_and_at_the_last():
    rounds = EvaluationRounds(config(**{"eval-every": 3, "eval-users": 5}))
    assert [r for r in range(1, 5) if rounds.due(r)] == [3, 4]
    assert [rounds.sample_size(r) for r in (3, 4)] == [5, 0]


def evaluation(partition: int, users: list[int], names: list[str], value: float):
    metrics = {"num-users": len(users), **dict.fromkeys(names, value * len(users))}
    per_user = np.full((len(users), len(names)), value)
    return NodeEvaluation(partition, metrics, np.array(users, dtype=np.int64), per_user)


def test_evaluation_means_over_users_and_per_user_metrics_by_user():
    rounds = EvaluationRounds(config(protocol="paper"))
    names = rounds.metric_names
    # arrival order: partition 1 first; the sums run in partition order all the same
    late = evaluation(1, [5, 1], names, 0.25)
    early = evaluation(0, [0, 3, 4], names, 0.5)
    early.metrics.update({"erank-personal-sum": 6.0, "erank-personal-users": 3})
    outcome = rounds.combine([late, early], np.eye(3))
    assert outcome.means["val-hr@10"] == (1.5 + 0.5) / 5
    assert outcome.means["eval-users"] == 5
    assert outcome.means["erank-global"] == pytest.approx(3.0)
    assert outcome.means["erank-personal"] == 2.0
    ids, values = outcome.per_user
    assert ids.tolist() == [0, 1, 3, 4, 5]
    assert values[:, 0].tolist() == [0.5, 0.25, 0.5, 0.5, 0.25]
    assert rounds.combine([evaluation(0, [], names, 0.0)], np.eye(3)) is None


def test_the_best_round_is_the_earliest_and_patience_counts_evaluated_rounds():
    stopping = RunStopping(patience=2)
    per_user = (np.array([1]), np.array([[0.5]]))
    assert not stopping.observe(1, 0.3, per_user)
    assert not stopping.observe(2, 0.3, None)  # a tie is no improvement
    assert stopping.best_val == (0.3, 1) and stopping.best_per_user is per_user
    assert stopping.observe(3, float("nan"), None)  # NaN never improves
    assert not RunStopping(patience=0).observe(1, float("nan"), None)
    stopping.stop_early(3, 10)
    assert stopping.stopped_early_round == 3 and stopping.diverged_round is None


def test_the_best_round_round_trips_through_a_checkpoint_tag():
    stopping = RunStopping(patience=3)
    stopping.observe(1, 0.25, (np.array([4, 7]), np.array([[1.0], [0.0]])))
    stopping.observe(2, 0.125, None)
    restored = RunStopping(patience=3)
    restored.load_state_dict(through_a_checkpoint(stopping.state_dict()))
    assert restored.best_val == (0.25, 1) and restored.evals_since_best == 1
    assert restored.best_per_user[0].tolist() == [4, 7]
    empty = RunStopping(patience=0)
    empty.load_state_dict(through_a_checkpoint(RunStopping(patience=0).state_dict()))
    assert empty.best_val is None and empty.best_per_user is None


def test_a_round_report_holds_the_rounds_csv_figures():
    reported = []
    reporter = RoundReporter(reported.append)
    log = RoundLog(round=2, bytes_down=10, bytes_up=4, train_failures=1, rejected_replies=2)
    log.metrics.update({"train-loss": 0.5, "val-hr@10": 0.25})
    figures = reporter.report(log, num_rounds=5, touched_total=7, diverged_round=None)
    assert reported == [figures]
    assert figures["round"] == 2 and figures["val-hr@10"] == 0.25
    assert figures["bytes-down"] == 10 and figures["touched-items-total"] == 7
    assert figures["train-failures"] == 1 and figures["rejected-replies"] == 2
    assert figures["diverged-round"] is None and figures["seconds"] >= 0


def test_the_round_clock_continues_after_a_restore(monkeypatch):
    from types import SimpleNamespace

    from fedrec_flwr.server import recording

    now = [5.0]  # the module's clock, moved by hand: no wall time is measured
    clock = SimpleNamespace(perf_counter=lambda: now[0], process_time=lambda: 0.0)
    monkeypatch.setattr(recording, "time", clock)
    reporter = RoundReporter()
    reporter.load_state_dict({"round-seconds": 100.0})
    now[0] += 2.5
    assert reporter.state_dict()["round-seconds"] == 102.5


def test_the_strategy_refuses_the_flower_options_it_has_no_use_for():
    from flwr.app import ConfigRecord

    from fedrec_flwr.server.strategy import refuse_flower_options

    refuse_flower_options(None, None, None)
    with pytest.raises(ValueError, match=r"takes no evaluate_fn: .* the nodes evaluate"):
        refuse_flower_options(None, None, lambda server_round, arrays: None)
    with pytest.raises(ValueError, match="takes no train_config, evaluate_config:"):
        refuse_flower_options(ConfigRecord(), ConfigRecord(), None)
