"""Flower's floor: a ServerApp that sends, per round, one train message to each of
``train-messages`` nodes and one evaluate message to each of ``evaluate-messages`` nodes,
with ``<kind>-down-floats`` float32 values, and a ClientApp that answers each with
``<kind>-up-floats`` values and does nothing else (no data, no torch, no state). The server
keeps at most ``max-in-flight`` messages in flight (0: all at once), as ours does. The
server writes the cumulative seconds at the end of each round to ``<results-dir>/echo-rounds.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedrec_flwr.server.in_flight import send_and_receive

server = ServerApp()
client = ClientApp()


def _content(floats: int, **config: int) -> RecordDict:
    values = ArrayRecord({"values": Array(np.zeros(int(floats), dtype=np.float32))})
    return RecordDict({"arrays": values, "config": ConfigRecord(config)})


def _echo(msg: Message, context: Context) -> Message:
    up = int(msg.content["config"]["up-floats"])  # what the server asks this reply to carry
    return Message(_content(up), reply_to=msg)


@client.train()
def train(msg: Message, context: Context) -> Message:
    return _echo(msg, context)


@client.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return _echo(msg, context)


def _wait_for_nodes(grid: Grid, nodes: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    ids = sorted(grid.get_node_ids())
    while len(ids) < nodes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"echo: {len(ids)} of {nodes} nodes after {timeout} s")
        time.sleep(0.5)
        ids = sorted(grid.get_node_ids())
    return ids


def _exchange(grid: Grid, ids: list[int], kind: str, config, server_round: int) -> None:
    if not ids:
        return
    down, up = int(config[f"{kind}-down-floats"]), int(config[f"{kind}-up-floats"])
    # One record for every message of the kind, as ours sends one table to every node that
    # ranks all items: building a fresh payload per message would be the floor's own cost.
    content = _content(down, **{"up-floats": up})
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
