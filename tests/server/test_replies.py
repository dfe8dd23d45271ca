"""Bad and missing replies through the strategy and the in-process federation: a rejected
reply changes nothing, a missing one is counted."""

from __future__ import annotations

import copy
import csv

import flower_rounds
import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Error, Message

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.results import TIMING_COLUMNS
from fedrec_flwr.server.strategy import FedRecStrategy
from fedrec_flwr.server_app import run_federation
from fedrec_lab.local_grid import LocalGrid

SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 30,
    "synthetic-items": 400,
    "synthetic-mean-degree": 12,
    "num-server-rounds": 3,
    "batch-size": 32,
    "item-lr": 0.5,
}


pytestmark = pytest.mark.usefixtures("private_cache")


def connected(tmp_path, nodes: int, **overrides) -> tuple[FedRecStrategy, LocalGrid]:
    """A strategy holding round 1's table, connected to ``nodes`` in-process nodes."""
    return flower_rounds.connected(tmp_path, nodes, SMALL, **overrides)


def read_rounds(tmp_path) -> list[dict[str, str]]:
    (run_dir,) = (tmp_path / "results").iterdir()
    with open(run_dir / "rounds.csv") as f:
        return list(csv.DictReader(f))


def without_seconds(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in rows]


def train_round(strategy, grid, server_round=1):
    return flower_rounds.train_round(strategy, grid, server_round)[1]


def tamper(reply: Message, key: str, change) -> None:
    """Apply ``change`` (in place) to the reply's array ``key``, packed or not."""
    flower_rounds.edit(reply, lambda arrays: change(arrays[key]))


def state_bytes(strategy) -> bytes:
    model = strategy.model
    return model.table.tobytes() + b"".join(v.tobytes() for v in model.dense.values())


@pytest.mark.parametrize("method", ["pfedrec", "fedncf"])
def test_a_rejected_reply_leaves_the_table_as_if_it_never_came(tmp_path, method, caplog):
    strategy, grid = connected(tmp_path, 3, method=method)
    replies = train_round(strategy, grid)
    without = copy.deepcopy(strategy)
    bad = next(r for r in replies if r.metadata.src_node_id == 1001)
    tamper(bad, "row-sums", lambda rows: rows.__setitem__((0, 0), np.nan))

    strategy.aggregate_train(1, replies)
    without.aggregate_train(1, [r for r in replies if r is not bad])
    assert state_bytes(strategy) == state_bytes(without)  # bit-identical
    assert strategy.round_log.rejected_replies == 1 and without.round_log.rejected_replies == 0
    assert strategy.round_log.train_failures == 0
    assert strategy.round_log.train_users == without.round_log.train_users
    assert "train reply of node 1001 (partition 1) rejected" in caplog.text
    assert "'row-sums' holds 1 NaN or inf values" in caplog.text


def test_when_every_reply_is_rejected_nothing_changes(tmp_path):
    strategy, grid = connected(tmp_path, 2)
    replies = train_round(strategy, grid)
    before, table = state_bytes(strategy), strategy.model.table
    for reply in replies:
        tamper(reply, "item-ids", lambda ids: ids.__setitem__(0, 400))  # out of range
    assert strategy.aggregate_train(1, replies) == (None, None)
    assert strategy.model.table is table and state_bytes(strategy) == before
    assert strategy.round_log.rejected_replies == 2


def test_missing_and_unexpected_replies(tmp_path, caplog):
    strategy, grid = connected(tmp_path, 3)
    replies = train_round(strategy, grid)
    dropped = replies[0].metadata.src_node_id
    strategy.aggregate_train(1, [*replies[1:], replies[1]])  # one missing, one twice
    assert strategy.round_log.train_failures == 1
    assert strategy.round_log.rejected_replies == 1
    assert f"no train reply within the round timeout from node(s) {dropped}" in caplog.text
    assert "was not sent a train message this round" in caplog.text


def test_bad_replies_in_a_run_are_counted_per_round(tmp_path, caplog):
    """Node 1 uploads an out-of-range id, node 2 a NaN validation metric, every round."""

    def corrupting(message, context):
        reply = client_app(message, context)
        partition = context.node_config["partition-id"]
        if message.metadata.message_type == "train" and partition == 1:
            tamper(reply, "item-ids", lambda ids: ids.__setitem__(-1, 10**6))
        if message.metadata.message_type == "evaluate" and partition == 2:
            reply.content["metrics"]["val-hr@10"] = float("nan")
        return reply

    run_config = {**SMALL, "results-dir": str(tmp_path / "results")}
    grid = LocalGrid(corrupting, run_config, num_nodes=3)
    summary = run_federation(grid, RunConfig.from_mapping(run_config))
    assert summary["rounds"] == 3
    rows = read_rounds(tmp_path)
    assert [r["rejected-replies"] for r in rows] == ["2"] * 3
    assert all(r["train-failures"] == "0" and r["eval-failures"] == "0" for r in rows)
    assert all(int(r["train-users"]) == 20 for r in rows)  # node 1's 10 users left out
    assert "holds ids outside [0, 400): 1000000" in caplog.text
    assert "metric 'val-hr@10' is not finite (nan)" in caplog.text


def _nan_rows_from(first_round: int, partitions: set[int]):
    """A ClientApp whose train replies hold NaN rows from ``first_round`` on (a diverged
    local update) on the nodes of ``partitions``."""

    def diverging(message, context):
        reply = client_app(message, context)
        server_round = int(message.content["config"]["server-round"])
        partition = context.node_config["partition-id"]
        if (
            message.metadata.message_type == "train"
            and server_round >= first_round
            and partition in partitions
        ):
            tamper(reply, "row-sums", lambda sums: sums.__setitem__((0, 0), float("nan")))
        return reply

    return diverging


def test_a_run_whose_every_update_is_nan_stops_as_diverged(tmp_path, caplog):
    run_config = {**SMALL, "num-server-rounds": 4, "results-dir": str(tmp_path / "results")}
    grid = LocalGrid(_nan_rows_from(2, {0, 1}), run_config, num_nodes=2)
    summary = run_federation(grid, RunConfig.from_mapping(run_config))
    assert summary["diverged_round"] == 2 and summary["partial_rounds"] == []
    assert summary["rounds"] == 2  # round 2 is recorded, rounds 3 and 4 never run
    assert summary["best_round"] == 1
    assert "training diverged" in caplog.text and "Lower the learning rates" in caplog.text
    rows = read_rounds(tmp_path)
    assert rows[-1]["rejected-replies"] == "2" and rows[-1]["val-hr@10"] == ""


def test_one_diverged_node_is_left_out_and_the_run_goes_on(tmp_path):
    run_config = {**SMALL, "results-dir": str(tmp_path / "results")}
    grid = LocalGrid(_nan_rows_from(1, {1}), run_config, num_nodes=2)
    summary = run_federation(grid, RunConfig.from_mapping(run_config))
    assert summary["diverged_round"] is None
    assert summary["rounds"] == 3
    assert [r["rejected-replies"] for r in read_rounds(tmp_path)] == ["1"] * 3
    # every round left node 1's users out: summary.json and the run's verdict say so
    assert summary["partial_rounds"] == [1, 2, 3] and summary["void_rounds"] == []
    from fedrec_lab.launch import run_folder

    (folder,) = (tmp_path / "results").iterdir()
    verdict = run_folder.judge(folder)
    assert verdict.state == run_folder.COMPLETED and verdict.partial_rounds == (1, 2, 3)
    assert "3 partial, a node's reply left out" in verdict.describe()
    assert "(rounds 1, 2, 3: rejected-replies" in verdict.describe()


def test_an_unavailable_node_counts_once_for_the_node_it_answers_for(tmp_path, caplog):
    """Flower's SuperLink answers for a node that stopped sending heartbeats with an error
    reply of its own (sender: the SuperLink): one failure, the node's."""
    strategy, grid = connected(tmp_path, 3)
    messages = list(strategy.configure_train(1, ArrayRecord(), ConfigRecord(), grid))
    replies = list(grid.send_and_receive(messages, timeout=600))
    lost = messages[0]
    unavailable = Message(Error(code=5, reason="Error: Node Unavailable"), reply_to=lost)
    unavailable.metadata.__dict__["_src_node_id"] = 1  # the SuperLink
    kept = [r for r in replies if r.metadata.src_node_id != lost.metadata.dst_node_id]
    strategy.aggregate_train(1, [*kept, unavailable])
    assert strategy.round_log.train_failures == 1
    assert f"node {lost.metadata.dst_node_id} failed to train" in caplog.text
    assert "no train reply within the round timeout" not in caplog.text


@pytest.mark.parametrize("value", [1e300, 1e6])
def test_a_finite_value_beyond_the_update_limit_is_refused_not_clipped(tmp_path, value, caplog):
    """One finite 1e300 or 1e6 in a node's row-sums: that reply is left out whole, the table
    is the other replies' alone, and stays finite."""
    strategy, grid = connected(tmp_path, 3)
    replies = train_round(strategy, grid)
    without = copy.deepcopy(strategy)
    bad = next(r for r in replies if r.metadata.src_node_id == 1001)
    tamper(bad, "row-sums", lambda rows: rows.__setitem__((0, 0), value))
    strategy.aggregate_train(1, replies)
    without.aggregate_train(1, [r for r in replies if r is not bad])
    assert state_bytes(strategy) == state_bytes(without)
    assert np.isfinite(strategy.model.table).all() and np.abs(strategy.model.table).max() < 10
    assert strategy.round_log.rejected_replies == 1
    assert "train reply of partition 1 rejected" in caplog.text
    assert "beyond update-limit=10000" in caplog.text


def test_a_node_reporting_other_user_counts_is_refused(tmp_path, caplog):
    strategy, grid = connected(tmp_path, 3)
    replies = train_round(strategy, grid)
    replies[0].content["metrics"]["num-users"] = 1  # the node trained 10
    strategy.aggregate_train(1, replies)
    assert strategy.round_log.rejected_replies == 1
    assert "num-users=1 but the server selected 10 users" in caplog.text


def test_a_run_with_void_rounds_is_not_a_plain_completed_one(tmp_path):
    """Every node fails round 2: the round changes nothing shared, summary.json lists it and
    the run folder's verdict says so."""
    from fedrec_lab.launch import run_folder

    def failing(message, context):
        server_round = int(message.content["config"]["server-round"])
        if message.metadata.message_type == "train" and server_round == 2:
            raise RuntimeError("this node fails round 2")
        return client_app(message, context)

    run_config = {**SMALL, "results-dir": str(tmp_path / "results")}
    grid = LocalGrid(failing, run_config, num_nodes=2)
    summary = run_federation(grid, RunConfig.from_mapping(run_config))
    assert summary["diverged_round"] is None and summary["void_rounds"] == [2]
    assert summary["partial_rounds"] == []  # a void round is no partial one
    (folder,) = (tmp_path / "results").iterdir()
    verdict = run_folder.judge(folder)
    assert verdict.state == run_folder.COMPLETED and verdict.void_rounds == (2,)
    assert "1 of them void, no shared update applied (rounds 2" in verdict.describe()
