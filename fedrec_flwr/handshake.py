"""The handshake: wait for every partition's node and learn what each holds and needs.

Each node answers a ``query`` with its ``partition-id``/``num-partitions``, its users, the
item rows its evaluation needs (``eval-items``; absent = all of them) and the rows its users
train in round 1 (``next-items``). Nodes whose handshake fails (e.g. stale deployment nodes)
are skipped; if all fail, the run stops at once with the reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from logging import INFO, WARNING

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from fedrec_flwr.messages import ARRAYS, CONFIG, METRICS


class FederationError(RuntimeError):
    """The nodes of the federation do not match what the run needs."""


@dataclass
class NodeInfo:
    """What the server knows of a node after the handshake."""

    partition_id: int
    num_partitions: int
    users: np.ndarray
    eval_items: np.ndarray | None  # None: the node ranks all items
    request_round: int = 0
    request_items: np.ndarray | None = None

    def remember_request(self, reply: Message) -> None:
        """Keep the ``next-items`` request of a reply, if it has one."""
        arrays, metrics = reply.content[ARRAYS], reply.content[METRICS]
        if "next-items" in arrays:
            self.request_round = int(metrics["next-round"])
            self.request_items = arrays["next-items"].numpy()


def connect(
    grid: Grid, num_users: int, num_items: int, wait: float, timeout: float
) -> dict[int, NodeInfo]:
    """Node id -> NodeInfo for one node per partition, waiting up to ``wait`` seconds."""
    nodes: dict[int, NodeInfo] = {}
    deadline = time.monotonic() + wait
    expected: int | None = None
    failed: dict[int, str] = {}  # node id -> why its handshake failed
    while True:
        new = [n for n in grid.get_node_ids() if n not in nodes and n not in failed]
        if new:
            query = RecordDict({CONFIG: ConfigRecord({"server-round": 0})})
            messages = [Message(query, dst_node_id=n, message_type=MessageType.QUERY) for n in new]
            for reply in grid.send_and_receive(messages, timeout=timeout):
                if reply.has_error():  # e.g. a dead node a SuperLink still lists
                    node, reason = reply.metadata.src_node_id, reply.error.reason
                    failed[node] = reason
                    log(WARNING, "node %d failed its handshake: %s", node, reason)
                    continue
                expected = _register(nodes, reply, expected, num_items)
        if failed and not nodes:  # every node failed: no point in waiting
            raise FederationError(f"the nodes failed to start: {next(iter(failed.values()))}")
        covered = {info.partition_id for info in nodes.values()}
        if expected is not None and len(covered) == expected:
            break
        if time.monotonic() > deadline:
            raise FederationError(
                f"waited {wait:.0f} s for the nodes: "
                f"{len(covered)} of {expected or '?'} partitions connected"
                + (f", {len(failed)} failed" if failed else "")
                + ". In simulation every SuperNode is one partition (num-supernodes); in "
                "deployment start one flower-supernode per partition-id, or raise "
                "node-wait-timeout."
            )
        time.sleep(0.2)
    held = np.concatenate([info.users for info in nodes.values()])
    if len(held) != num_users or len(np.unique(held)) != num_users:
        raise FederationError(
            f"the nodes hold {len(np.unique(held))} distinct users, the dataset has "
            f"{num_users}: do all nodes read the same data and configuration?"
        )
    log(INFO, "%d nodes connected, holding %d users", len(nodes), num_users)
    return nodes


def _register(
    nodes: dict[int, NodeInfo], reply: Message, expected: int | None, num_items: int
) -> int:
    metrics, arrays = reply.content[METRICS], reply.content[ARRAYS]
    partition, num_partitions = int(metrics["partition-id"]), int(metrics["num-partitions"])
    if expected is not None and num_partitions != expected:
        raise FederationError(
            f"nodes disagree on num-partitions ({expected} vs {num_partitions}): give every "
            "node the same num-partitions in its node config."
        )
    if int(metrics["num-items"]) != num_items:
        raise FederationError(
            f"node {partition} sees {int(metrics['num-items'])} items, the server "
            f"{num_items}: the node reads different data."
        )
    if any(info.partition_id == partition for info in nodes.values()):
        raise FederationError(f"two nodes claim partition-id={partition}.")
    info = NodeInfo(
        partition_id=partition,
        num_partitions=num_partitions,
        users=arrays["users"].numpy(),
        eval_items=arrays["eval-items"].numpy() if "eval-items" in arrays else None,
    )
    info.remember_request(reply)
    nodes[reply.metadata.src_node_id] = info
    return num_partitions
