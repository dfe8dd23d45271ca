"""Flower ClientApp: thin glue between Flower messages and :class:`NodeRuntime`."""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.device import DataIdentity, DeviceData, run_conflict, shared_identity
from fedrec_flwr.data.prepared import PreparedData, prepare
from fedrec_flwr.messages import (
    ARRAYS,
    CONFIG,
    PER_USER,
    array_record,
    config_record,
    dense_arrays,
    int_value,
    read_dense,
    read_rows,
    record_arrays,
    reply,
    round_of,
)
from fedrec_flwr.node import context_state, secure_node, state_store
from fedrec_flwr.node import timing as node_timing
from fedrec_flwr.node.faults import inject_fault
from fedrec_flwr.node.runtime import NodeRuntime, NodeState
from fedrec_flwr.privacy import secagg_dropout, secagg_trust
from fedrec_flwr.privacy.secagg import SecAggKeys

app = ClientApp(mods=node_timing.mods(lambda context: node_runtime(context)))
STATE_KEY = context_state.STATE_KEY
SECAGG_KEY = "secagg-key"  # the node's X25519 private key (secure-aggregation)
SECAGG_ROUND = "secagg-round"  # the round this node last answered, what its unmask needs
#: Node config: the identity key file (a SuperNode's authentication key serves) and the
#: roster folder of every partition's identity public key (``<partition>.pub``).
IDENTITY_KEY, ROSTER = "secagg-identity-key", "secagg-roster"
PINNED = "secagg-pinned"  # the identity keys first shown for each partition (no roster)
_RUNTIMES: dict[tuple, NodeRuntime] = {}
_DEVICES: dict[str, DeviceData] = {}


def node_data(context: Context) -> tuple[PreparedData, int, int]:
    """(data, partition-id, num-partitions) of this node.

    With node config ``data-path`` the node reads only that device folder (written by
    ``fedrec export``; its manifest gives the partition, and
    ``partition-id``/``num-partitions``, if given, must agree); else the shared prepared split
    of the run's dataset, and ``partition-id``/``num-partitions`` say which users are its own.
    """
    node_config = context.node_config
    path = str(node_config.get("data-path", "") or "")
    if not path:
        config = RunConfig.from_mapping(context.run_config)
        partition = int(node_config["partition-id"])
        return prepare(config), partition, int(node_config["num-partitions"])
    if path not in _DEVICES:
        _DEVICES[path] = DeviceData(path)
    data = _DEVICES[path]
    own = {"partition-id": data.partition_id, "num-partitions": data.num_partitions}
    for key, value in own.items():
        if key in node_config and int(node_config[key]) != value:
            raise ValueError(
                f"node config {key}={node_config[key]} but data-path {path} holds "
                f"{key}={value}: give the device its own folder, or drop {key}."
            )
    return data, data.partition_id, data.num_partitions


def data_identity(context: Context) -> DataIdentity:
    """What this node's data is (told to the server in the handshake)."""
    data, _, _ = node_data(context)
    if isinstance(data, DeviceData):
        return data.identity()
    return shared_identity(data, RunConfig.from_mapping(context.run_config).training.seed)


def node_runtime(context: Context) -> NodeRuntime:
    """This node's runtime (cached per process: data and config are loaded once)."""
    key = (
        tuple(sorted(context.node_config.items())),
        tuple(sorted(context.run_config.items())),
    )
    if key not in _RUNTIMES:
        config = RunConfig.from_mapping(context.run_config)
        if config.execution.torch_threads:
            torch.set_num_threads(config.execution.torch_threads)
        data, partition, num_partitions = node_data(context)
        _RUNTIMES[key] = NodeRuntime(config, data, partition, num_partitions)
    return _RUNTIMES[key]


def load_state(
    context: Context, runtime: NodeRuntime, msg: Message | None = None, max_round: int = 0
) -> NodeState:
    """The node's private state from ``context.state``; when that is empty, from disk if the
    node kept it there (:func:`fedrec_flwr.node.state_store.recover`, a state written after
    ``max_round`` at most), else fresh."""
    state = context_state.load(context)
    if state is not None:
        return state
    state = None if msg is None else state_store.recover(context, runtime, msg, max_round)
    if state is None:
        return runtime.initial_state()
    save_state(context, state)
    return state


def save_state(context: Context, state: NodeState) -> None:
    """Write ``state`` into ``context.state`` (:mod:`fedrec_flwr.node.context_state`)."""
    context_state.save(context, state)


def _with_request(runtime: NodeRuntime, server_round: int, arrays: dict, metrics: dict) -> None:
    """Add the ids of the rows this node's users train next round (if there is one; none
    when its upload chain has every node sent the full table: secure aggregation)."""
    if runtime.uploads.full_table:
        return
    next_round = server_round + 1
    if next_round <= runtime.config.training.num_server_rounds:
        arrays["next_items"] = runtime.train_request(next_round)
        metrics["next-round"] = next_round
    else:
        metrics["next-round"] = 0


@app.query()
def hello(msg: Message, context: Context) -> Message:
    """Handshake: what data this node holds, its users and the rows it needs.

    Data that does not fit the run (dataset, protocol, seed) is reported without the rest:
    the server refuses it with the reason.
    """
    identity = data_identity(context)
    run = RunConfig.from_mapping(context.run_config)
    known = {CONFIG: ConfigRecord({**identity.to_record()})}
    if run_conflict(identity, run.data.dataset, run.training.protocol, run.training.seed):
        return _reply(msg, {}, {}, records=known)
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
    # Secure aggregation: a fresh key pair; the public key signed, to the server.
    if run.group(SecAggKeys).secure_aggregation:
        signer = str(context.node_config.get(IDENTITY_KEY, "") or "")
        private, public = secure_node.handshake_keys(
            run, runtime.partition_id, int(msg.metadata.run_id), signer
        )
        context.state[SECAGG_KEY] = array_record(private=private)
        arrays.update(public)
    return _reply(msg, arrays, metrics, records=known)


def _received(msg: Message) -> tuple[int, np.ndarray | None, np.ndarray, dict, dict]:
    """(server round, item ids or None for the full table, item rows, shared-dense
    parameters, every array by name) of a message (rows sent as zero ids come back as zero
    rows)."""
    received = record_arrays(msg.content[ARRAYS])
    item_ids, item_rows = read_rows(received)
    return (
        round_of(msg),
        item_ids,
        item_rows,
        read_dense(received),
        received,
    )


def _reply(
    msg: Message, arrays: dict[str, np.ndarray], metrics: dict, dense=None, records=None
) -> Message:
    out = reply(msg, array_record(dense_arrays(dense or {}), **arrays), metrics)
    for name, extra in (records or {}).items():
        out.content[name] = extra
    return out


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train the selected users on the rows received; upload their summed tuned rows
    (unless ``fault-fraction`` draws this node to fail: :mod:`fedrec_flwr.node.faults`)."""
    runtime = node_runtime(context)
    inject_fault(runtime.config, round_of(msg), runtime.partition_id)
    server_round, item_ids, item_rows, dense, received = _received(msg)
    users = received["train-users"]
    if runtime.config.group(SecAggKeys).secure_aggregation:  # refused before any training
        _check_train(msg, context, runtime, received)
    result, state = runtime.train(
        load_state(context, runtime, msg, server_round - 1),
        server_round,
        users,
        item_ids,
        item_rows,
        dense,
        received.get("itemitem-support"),
    )
    save_state(context, state)
    state_store.persist_latest(context, runtime, msg, state, server_round)
    if result.user_changes is not None:  # a proven report per user, nothing else
        run_key = (int(msg.metadata.run_id), server_round)
        roster = _roster(context, runtime)
        bounded = secure_node.bounded_upload(
            runtime.config,
            item_rows,
            _private(context),
            run_key,
            received,
            result.user_changes,
            roster,
        )
        context.state[PINNED] = ConfigRecord({**roster.pinned})
        return _reply(msg, bounded, {})
    if result.secure is not None:  # one masked vector and its sealed shares, nothing else
        bound = {**dense, **_support(received)}  # the masks hold what was received
        secure = _masked(msg, context, runtime, received, result.secure, (item_rows, bound))
        return _reply(msg, secure, {})
    arrays = (
        dict(result.statistics)
        if result.statistics is not None  # a method that sums co-occurrences
        else {
            "item_ids": result.item_ids,
            "row_sums": result.row_sums,
            "row_counts": result.row_counts,
        }
    )
    if len(result.zero_ids):
        arrays.update(zero_ids=result.zero_ids, zero_counts=result.zero_counts)
    metrics = {
        "num-users": result.num_users,
        "num-samples": result.num_samples,
        "loss-sum": result.loss_sum,
    }
    if result.row_shrink:  # weight-decay-rows = "all" (fedrec_flwr/node/dense_decay.py)
        metrics["row-shrink-sum"] = result.row_shrink
    _with_request(runtime, server_round, arrays, metrics)
    return _reply(msg, arrays, metrics, result.dense_sums)


def _support(received: dict) -> dict[str, np.ndarray]:
    """The item-item support a train message names (as ``float32``, for the round's digest:
    a server that sends two nodes different supports makes their masks disagree)."""
    support = received.get("itemitem-support")
    return {} if support is None else {"itemitem-support": support.astype(np.float32)}


def _keep(context: Context, name: str, arrays: dict[str, np.ndarray]) -> None:
    context.state[name] = array_record(**{k.replace("-", "_"): v for k, v in arrays.items()})


def _secure_state(context: Context, name: str) -> dict[str, np.ndarray]:
    record = context.state.get(name)
    return {} if record is None else record_arrays(record)


def _private(context: Context) -> np.ndarray:
    if SECAGG_KEY not in context.state:
        raise RuntimeError(
            "secure aggregation: this node lost the key pair it made at the handshake (its "
            "state was reset), so its masks cannot cancel: restart the run"
        )
    return _secure_state(context, SECAGG_KEY)["private"]


def _check_train(msg: Message, context: Context, runtime: NodeRuntime, received: dict) -> None:
    """The node's checks of a secure round before any training (:mod:`secure_node`)."""
    run_id, server_round = int(msg.metadata.run_id), round_of(msg)
    roster = _roster(context, runtime)
    saved = _secure_state(context, SECAGG_ROUND)
    private = _private(context)
    secure_node.check_train(runtime, run_id, server_round, private, received, saved, roster)
    context.state[PINNED] = ConfigRecord({**roster.pinned})
    context.state[SECAGG_ROUND] = array_record(round=np.array([run_id, server_round], np.uint64))


def _roster(context: Context, runtime: NodeRuntime) -> secagg_trust.Roster:
    """The identity keys this node checks signed keys against (its roster folder, or the
    seed's keys, or the keys it pinned)."""
    config = runtime.config
    folder = str(context.node_config.get(ROSTER, "") or "")
    return secagg_trust.Roster(
        config.training.seed,
        config.group(SecAggKeys).secure_aggregation_keys,
        folder,
        _pinned(context),
    )


def _pinned(context: Context) -> dict[str, bytes]:
    """The identity keys this node pinned (``context.state``), by partition."""
    if PINNED not in context.state:
        return {}
    record = config_record(context.state, PINNED)
    pinned = {partition: key for partition, key in record.items() if isinstance(key, bytes)}
    if len(pinned) != len(record):
        raise ValueError(f"'{PINNED}' in the node's state holds a value that is no key (bytes)")
    return pinned


def _masked(
    msg: Message, context: Context, runtime: NodeRuntime, received: dict, vector, model
) -> dict[str, np.ndarray]:
    """The masked vector and its self-mask's sealed shares (``model``: the table and
    shared-dense parameters received, which the masks' derivation holds)."""
    run_id, server_round = int(msg.metadata.run_id), round_of(msg)
    cohort = received["secagg-cohort"]
    digest = secagg_trust.round_digest(run_id, server_round, cohort, *model)
    k = secagg_dropout.degree(
        len(cohort), runtime.config.group(SecAggKeys).secure_aggregation_neighbours
    )
    arrays, state = secure_node.masked_upload(
        vector, _private(context), runtime.partition_id, received, digest, k, (run_id, server_round)
    )
    _keep(context, SECAGG_ROUND, state)
    return arrays


@app.query("unmask")
def unmask(msg: Message, context: Context) -> Message:
    """Secure aggregation's unmask step (:func:`secure_node.unmask`), answered once a round."""
    runtime = node_runtime(context)
    saved = _secure_state(context, SECAGG_ROUND)
    if secure_node.UNMASKED in saved:  # answered once, whatever the answer
        flagged = {**saved, secure_node.UNMASKED: np.ones(1, dtype=np.int64)}
        _keep(context, SECAGG_ROUND, flagged)
    answer = secure_node.unmask(
        _private(context),
        runtime.partition_id,
        int(msg.metadata.run_id),
        round_of(msg),
        saved,
        record_arrays(msg.content[ARRAYS]),
    )
    return _reply(msg, answer, {"partition-id": runtime.partition_id})


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Score this node's users (all, or those of the round's ``eval-users`` sample) under
    the run's protocol; reply with metric sums, and each evaluated user's metrics in the
    ``per-user`` record."""
    runtime = node_runtime(context)
    server_round, item_ids, item_rows, dense, _ = _received(msg)
    state = load_state(context, runtime, msg, server_round)
    sample = int_value(config_record(msg.content), "eval-users", 0)
    users = runtime.eval_positions(server_round, sample)
    metrics, user_ids, user_metrics = runtime.evaluate_users(
        state, item_ids, item_rows, dense, users
    )
    arrays: dict[str, np.ndarray] = {}
    if not runtime.trains_in(server_round):  # else its train reply already asked
        _with_request(runtime, server_round, arrays, metrics)
    per_user = array_record(user_ids=user_ids, user_metrics=user_metrics)
    return _reply(msg, arrays, metrics, records={PER_USER: per_user})


@app.query("checkpoint")
def checkpoint(msg: Message, context: Context) -> Message:
    """The server checkpoints round ``server-round``: write this node's state after it
    (:mod:`fedrec_flwr.node.state_store`); reply with the bytes written."""
    runtime = node_runtime(context)
    state = load_state(context, runtime, msg, round_of(msg))
    written = state_store.write_checkpoint(context, runtime, msg, state)
    return _reply(msg, {}, {"partition-id": runtime.partition_id, "bytes": written})


@app.query("restore")
def restore(msg: Message, context: Context) -> Message:
    """A resumed run starts: load this node's state of the checkpoint round (refused, with
    the reason, if it does not belong to this run, partition, configuration or data)."""
    runtime = node_runtime(context)
    save_state(context, state_store.restore(context, runtime, msg))
    return _reply(msg, {}, {"partition-id": runtime.partition_id})
