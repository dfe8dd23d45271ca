"""Flower's floor: a ServerApp that sends, per round, one train message to each of
``train-messages`` nodes and one evaluate message to each of ``evaluate-messages`` nodes,
with ``<kind>-down-floats`` float32 values, and a ClientApp that answers each with
``<kind>-up-floats`` values and does nothing else (no data, no torch, no state). The server
keeps at most ``max-in-flight`` messages in flight (0: all at once), as ours does. The
server writes the cumulative seconds at the end of each round to ``<results-dir>/echo-rounds.json``.

In-process, :mod:`fedrec_lab.scaling.runner` drives :data:`server` and :data:`client` on a
LocalGrid; through ``flwr run``, ``bench/echo_app`` is the Flower app that names them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedrec_flwr.messages import config_record, int_value
from fedrec_flwr.server.in_flight import send_and_receive

server = ServerApp()
client = ClientApp()


def _content(floats: int, config: ConfigRecord | None = None) -> RecordDict:
    """``floats`` float32 zeros (``arrays``) and ``config`` (none: empty)."""
    values = ArrayRecord({"values": Array(np.zeros(int(floats), dtype=np.float32))})
    return RecordDict({"arrays": values, "config": ConfigRecord() if config is None else config})


def _echo(msg: Message, context: Context) -> Message:
    """A reply carrying as many float32 zeros as the message asks (``up-floats``)."""
    up = int_value(config_record(msg.content), "up-floats")  # what the server asks for
    return Message(_content(up), reply_to=msg)


@client.train()
def train(msg: Message, context: Context) -> Message:
    return _echo(msg, context)


@client.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return _echo(msg, context)


def _wait_for_nodes(grid: Grid, nodes: int, timeout: float) -> list[int]:
    """The ids of the first ``nodes`` nodes connected (``RuntimeError`` after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    ids = sorted(grid.get_node_ids())
    while len(ids) < nodes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"echo: {len(ids)} of {nodes} nodes after {timeout} s")
        time.sleep(0.5)
        ids = sorted(grid.get_node_ids())
    return ids


def _exchange(
    grid: Grid, ids: list[int], kind: str, config: Mapping[str, Any], server_round: int
) -> None:
    """One message of ``kind`` to each node of ``ids`` and their replies, all checked."""
    if not ids:
        return
    down, up = int(config[f"{kind}-down-floats"]), int(config[f"{kind}-up-floats"])
    # One record for every message of the kind, as ours sends one table to every node that
    # ranks all items: building a fresh payload per message would be the floor's own cost.
    content = _content(down, ConfigRecord({"up-floats": up}))
    messages = [
        Message(
            RecordDict({"arrays": content["arrays"], "config": content["config"]}),
            dst_node_id=node,
            message_type=kind,
        )
        for node in ids
    ]
    window = int(config.get("max-in-flight", 0))
    replies = send_and_receive(grid, messages, timeout=None, window=window)
    failed = [r for r in replies if r.has_error()]
    if len(replies) != len(messages) or failed:
        reason = failed[0].error.reason if failed else "missing replies"
        raise RuntimeError(f"echo round {server_round} {kind}: {reason}")


@server.main()
def main(grid: Grid, context: Context) -> None:
    """The rounds of the run config; their cumulative seconds to ``echo-rounds.json``."""
    config = context.run_config
    ids = _wait_for_nodes(grid, int(config["nodes"]), float(config["node-wait-timeout"]))
    started = time.perf_counter()
    elapsed = []
    for server_round in range(1, int(config["num-server-rounds"]) + 1):
        _exchange(grid, ids[: int(config["train-messages"])], "train", config, server_round)
        _exchange(grid, ids[: int(config["evaluate-messages"])], "evaluate", config, server_round)
        elapsed.append(time.perf_counter() - started)
    out = Path(str(config["results-dir"]))
    out.mkdir(parents=True, exist_ok=True)
    (out / "echo-rounds.json").write_text(json.dumps({"seconds": elapsed}) + "\n")
