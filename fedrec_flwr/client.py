"""Flower ClientApp: thin glue between Flower messages and :class:`NodeRuntime`."""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.faults import inject_fault
from fedrec_flwr.messages import (
    ARRAYS,
    CONFIG,
    array_record,
    dense_arrays,
    read_dense,
    read_rows,
    reply,
)
from fedrec_flwr.node import NodeRuntime, NodeState

app = ClientApp()
STATE_KEY = "node-state"
_RUNTIMES: dict[tuple, NodeRuntime] = {}


def node_runtime(context: Context) -> NodeRuntime:
    """This node's runtime (cached per process: data and config are loaded once)."""
    partition = int(context.node_config["partition-id"])
    num_partitions = int(context.node_config["num-partitions"])
    key = (partition, num_partitions, tuple(sorted(context.run_config.items())))
    if key not in _RUNTIMES:
        config = RunConfig.from_mapping(context.run_config)
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        _RUNTIMES[key] = NodeRuntime(config, prepare(config), partition, num_partitions)
    return _RUNTIMES[key]


def load_state(context: Context, runtime: NodeRuntime) -> NodeState:
    """The node's private state from ``context.state`` (fresh on first use)."""
    if STATE_KEY not in context.state:
        return runtime.initial_state()
    record = context.state[STATE_KEY]
    return NodeState.from_arrays({name: array.numpy() for name, array in record.items()})


def save_state(context: Context, state: NodeState) -> None:
    context.state[STATE_KEY] = array_record(**state.to_arrays())


def _with_request(runtime: NodeRuntime, server_round: int, arrays: dict, metrics: dict) -> None:
    """Add the ids of the rows this node's users train next round (if there is one)."""
    next_round = server_round + 1
    if next_round <= runtime.config.num_server_rounds:
        arrays["next_items"] = runtime.train_request(next_round)
        metrics["next-round"] = next_round
    else:
        metrics["next-round"] = 0


@app.query()
def hello(msg: Message, context: Context) -> Message:
    """Handshake: which users this node holds and which rows it needs."""
    runtime = node_runtime(context)
    arrays: dict[str, np.ndarray] = {"users": runtime.users}
    eval_items = runtime.eval_items()
    if eval_items is not None:
        arrays["eval_items"] = eval_items
    metrics = {
        "partition-id": runtime.partition_id,
        "num-partitions": runtime.num_partitions,
        "num-items": runtime.prepared.num_items,
    }
    _with_request(runtime, 0, arrays, metrics)
    return _reply(msg, arrays, metrics)


def _received(msg: Message) -> tuple[int, np.ndarray | None, np.ndarray, dict]:
    """(server round, item ids or None for the full table, item rows, shared-dense
    parameters) of a message (rows sent as zero ids come back as zero rows)."""
    received = msg.content[ARRAYS]
    item_ids, item_rows = read_rows(received)
    return (
        int(msg.content[CONFIG]["server-round"]),
        item_ids,
        item_rows,
        read_dense(received),
    )


def _reply(msg: Message, arrays: dict[str, np.ndarray], metrics: dict, dense=None) -> Message:
    record = array_record(**arrays)
    for name, array in dense_arrays(dense or {}).items():
        record[name] = array
    return reply(msg, record, metrics)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train the selected users on the rows received; upload their summed tuned rows
    (unless ``fault-fraction`` draws this node to fail: :mod:`fedrec_flwr.faults`)."""
    runtime = node_runtime(context)
    inject_fault(runtime.config, int(msg.content[CONFIG]["server-round"]), runtime.partition_id)
    server_round, item_ids, item_rows, dense = _received(msg)
    users = msg.content[ARRAYS]["train-users"].numpy()
    result, state = runtime.train(
        load_state(context, runtime), server_round, users, item_ids, item_rows, dense
    )
    save_state(context, state)
    arrays = {
        "item_ids": result.item_ids,
        "row_sums": result.row_sums,
        "row_counts": result.row_counts,
    }
    if len(result.zero_ids):
        arrays.update(zero_ids=result.zero_ids, zero_counts=result.zero_counts)
    metrics = {
        "num-users": result.num_users,
        "num-samples": result.num_samples,
        "loss-sum": result.loss_sum,
    }
    _with_request(runtime, server_round, arrays, metrics)
    return _reply(msg, arrays, metrics, result.dense_sums)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Score every user of this node under the run's protocol; reply with metric sums."""
    runtime = node_runtime(context)
    server_round, item_ids, item_rows, dense = _received(msg)
    metrics = runtime.evaluate(load_state(context, runtime), item_ids, item_rows, dense)
    arrays: dict[str, np.ndarray] = {}
    if not runtime.trains_in(server_round):  # else its train reply already asked
        _with_request(runtime, server_round, arrays, metrics)
    return _reply(msg, arrays, metrics)
