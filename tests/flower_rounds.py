"""Helpers of the tests that drive the strategy round by round against in-process nodes
(:class:`~fedrec_lab.local_grid.LocalGrid`): a strategy connected to its nodes, a round's
train messages and replies, and edits of a message's arrays."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.messages import array_record, record_arrays
from fedrec_flwr.methods import build_method
from fedrec_flwr.server.handshake import connect
from fedrec_flwr.server.model import ServerModel
from fedrec_flwr.server.strategy import FedRecStrategy
from fedrec_lab.local_grid import LocalGrid

#: A small synthetic federation, three rounds, no checkpoints.
SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 30,
    "synthetic-items": 300,
    "synthetic-mean-degree": 10,
    "num-server-rounds": 3,
    "checkpoint-every": 0,
}


def connected(
    tmp_path, nodes: int, base: Mapping[str, Any] = SMALL, **overrides: Any
) -> tuple[FedRecStrategy, LocalGrid]:
    """A strategy holding round 1's table, connected to ``nodes`` in-process nodes, of the
    run config ``base`` with ``overrides`` (results under ``tmp_path``)."""
    run_config = {**base, "results-dir": str(tmp_path / "results"), **overrides}
    config = RunConfig.from_mapping(run_config)
    grid = LocalGrid(client_app, run_config, num_nodes=nodes)
    federation = connect(grid, config, config.execution.node_wait_timeout, timeout=600)
    method = build_method(config, federation.num_items)
    model = ServerModel.initial(config, method, federation.num_items)
    return FedRecStrategy(config, method, model, federation), grid


def train_round(
    strategy: FedRecStrategy, grid: LocalGrid, server_round: int = 1
) -> tuple[list[Message], list[Message]]:
    """The round's train messages and their replies."""
    messages = list(strategy.configure_train(server_round, ArrayRecord(), ConfigRecord(), grid))
    return messages, list(grid.send_and_receive(messages, timeout=600))


def edit(message: Message, change: Callable[[dict[str, np.ndarray]], None]) -> None:
    """Apply ``change`` (in place) to the message's arrays (numpy arrays, by wire name)."""
    arrays = record_arrays(message.content["arrays"])
    change(arrays)
    message.content["arrays"] = array_record(arrays)
