"""The handshake: wait for every partition's node and learn what each holds and needs.

Each node answers a ``query`` with what its data is (``config``: the ``data-*`` fields of
:class:`~fedrec_flwr.data.device.DataIdentity`: dataset, protocol, seed, split fingerprint,
number of users and items), its ``partition-id``/``num-partitions``, its users, the item
rows its evaluation needs (``eval-items``; absent = all of them) and the rows its users train
in round 1 (``next-items``). The server learns the federation's size from these answers and
reads no user's data; it refuses nodes whose data does not fit the run or each other
(another dataset, protocol, seed, split or catalogue, users held twice) with the reason.
Under ``secure-aggregation`` each node also sends the public half of the X25519 key pair it
made (``secagg-public``, :mod:`fedrec_flwr.privacy.secagg`); the server keeps the keys to
forward them with each round's train messages.
Nodes whose handshake fails (e.g. stale deployment nodes) are skipped; if all fail, the run
stops at once with the reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from logging import INFO, WARNING

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.device import DataIdentity, conflict, run_conflict
from fedrec_flwr.messages import ARRAYS, CONFIG, int_value, metric_record, record_arrays
from fedrec_flwr.privacy.secagg import SecAggKeys
from fedrec_flwr.privacy.secagg_trust import SIGNATURE_BYTES
from fedrec_flwr.server.nodes import NodeInfo

__all__ = ["Federation", "FederationError", "NodeInfo", "connect"]


#: Bytes an identity public key may take as OpenSSH text (EC P-384: about 200).
IDENTITY_BYTES = 256


class FederationError(RuntimeError):
    """The nodes of the federation do not match what the run needs."""


@dataclass
class Federation:
    """The nodes after the handshake and the data they agree on."""

    nodes: dict[int, NodeInfo]
    data: DataIdentity
    #: node id -> its X25519 public key, the key's signature and the node's identity key
    #: (``secure-aggregation``; else empty: :mod:`fedrec_flwr.privacy.secagg_trust`).
    public_keys: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)

    @property
    def num_users(self) -> int:
        return self.data.num_users

    @property
    def num_items(self) -> int:
        return self.data.num_items

    @property
    def sources(self) -> list[str]:
        """Where the nodes read their data, by partition: "shared" or "device <folder>"."""
        infos = sorted(self.nodes.values(), key=lambda info: info.partition_id)
        return [info.data.source for info in infos if info.data is not None]


def connect(grid: Grid, config: RunConfig, wait: float, timeout: float) -> Federation:
    """One node per partition, waiting up to ``wait`` seconds, and the data they agree on."""
    nodes: dict[int, NodeInfo] = {}
    deadline = time.monotonic() + wait
    expected: int | None = None
    failed: dict[int, str | None] = {}  # node id -> why its handshake failed
    keys: dict[int, dict[str, np.ndarray]] = {}  # node id -> its signed key (secure-aggregation)
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
                expected = _register(nodes, reply, expected, config)
                if config.group(SecAggKeys).secure_aggregation:
                    keys[reply.metadata.src_node_id] = _public_key(reply, nodes)
        if failed and not nodes:  # every node failed: no point in waiting
            raise FederationError(f"the nodes failed to start: {next(iter(failed.values()))}")
        covered = {info.partition_id for info in nodes.values()}
        if expected is not None and len(covered) == expected:
            break
        if time.monotonic() > deadline:
            raise FederationError(
                f"waited {wait:.0f} s for the nodes: "
                f"{len(covered)} of {expected or '?'} partitions connected"
                + (f", {len(failed)} failed ({next(iter(failed.values()))})" if failed else "")
                + ". In simulation every SuperNode is one partition (num-supernodes); in "
                "deployment start one flower-supernode per partition-id, or raise "
                "node-wait-timeout."
            )
        time.sleep(0.2)
    data = next(iter(nodes.values())).data
    assert data is not None
    held = sum(len(info.users) for info in nodes.values())
    if held != data.num_users:
        raise FederationError(
            f"the nodes hold {held} users, their data has {data.num_users}: "
            "do all nodes read the same data and configuration?"
        )
    log(INFO, "%d nodes connected, holding %d users", len(nodes), data.num_users)
    return Federation(nodes, data, keys)


def _public_key(reply: Message, nodes: dict[int, NodeInfo]) -> dict[str, np.ndarray]:
    """The X25519 public key of a handshake reply under secure aggregation, its signature
    and the node's identity key (checked by the other nodes, not by the server)."""
    arrays = record_arrays(reply.content[ARRAYS])
    key = arrays.get("secagg-public")
    signature, identity = arrays.get("secagg-signature"), arrays.get("secagg-identity")
    if (
        key is None
        or key.dtype != np.uint8
        or key.shape != (32,)
        or signature is None
        or signature.shape != (SIGNATURE_BYTES,)
        or identity is None
        or not 0 < len(identity) <= IDENTITY_BYTES
    ):
        partition = nodes[reply.metadata.src_node_id].partition_id
        raise FederationError(
            f"partition {partition} sent no signed X25519 public key although the run has "
            "secure-aggregation = true: does it run this version of fedrec_flwr?"
        )
    padded = np.zeros(IDENTITY_BYTES, dtype=np.uint8)
    padded[: len(identity)] = identity
    return {"key": np.array(key), "signature": np.array(signature), "identity": padded}


def _identity(reply: Message, config: RunConfig) -> DataIdentity:
    """The data identity of a handshake reply, refused if it does not fit the run."""
    node = reply.metadata.src_node_id
    try:
        data = DataIdentity.from_record(reply.content[CONFIG])
    except (KeyError, TypeError):
        raise FederationError(
            f"node {node} did not say what data it holds: does it run this version of fedrec_flwr?"
        ) from None
    why = run_conflict(data, config.data.dataset, config.training.protocol, config.training.seed)
    if why:
        raise FederationError(f"node {node} ({_where(data)}) cannot join this run: {why}.")
    return data


def _where(data: DataIdentity) -> str:
    return "the shared split" if data.source == "shared" else data.source


def _holders(nodes: dict[int, NodeInfo], users: np.ndarray) -> list[NodeInfo]:
    """The registered nodes that hold any of ``users``, in registration order (one pass
    over all registered users: a node-by-node check is quadratic in the nodes)."""
    if not nodes or not len(users):
        return []
    infos = list(nodes.values())
    held = np.concatenate([info.users for info in infos])
    owner = np.repeat(np.arange(len(infos)), [len(info.users) for info in infos])
    return [infos[i] for i in np.unique(owner[np.isin(held, users)])]


def _register(
    nodes: dict[int, NodeInfo], reply: Message, expected: int | None, config: RunConfig
) -> int:
    data = _identity(reply, config)
    metrics, arrays = metric_record(reply.content), record_arrays(reply.content[ARRAYS])
    partition = int_value(metrics, "partition-id")
    num_partitions = int_value(metrics, "num-partitions")
    first = next(iter(nodes.values()), None)  # the registered nodes agree with it
    if first is not None and first.data is not None and (why := conflict(first.data, data)):
        raise FederationError(
            f"nodes hold different data: partition {first.partition_id} "
            f"({_where(first.data)}) and partition {partition} ({_where(data)}) differ "
            f"({why}). Export every device's folder with one `fedrec export` command."
        )
    if expected is not None and num_partitions != expected:
        raise FederationError(
            f"nodes disagree on num-partitions ({expected} vs {num_partitions}): give every "
            "node the same num-partitions in its node config."
        )
    if int_value(metrics, "num-items") != data.num_items:
        raise FederationError(
            f"node {partition} sees {int_value(metrics, 'num-items')} items but reports data of "
            f"{data.num_items}: the node reads different data."
        )
    if any(info.partition_id == partition for info in nodes.values()):
        raise FederationError(f"two nodes claim partition-id={partition}.")
    users = arrays["users"]
    if len(users) and (users.min() < 0 or users.max() >= data.num_users):
        raise FederationError(
            f"partition {partition} holds users outside 0..{data.num_users - 1}: its data "
            "is not from the same export."
        )
    for info in _holders(nodes, users):
        shared = np.intersect1d(info.users, users)
        if len(shared):
            assert info.data is not None  # every registered node's (NodeInfo below)
            raise FederationError(
                f"partitions {info.partition_id} ({_where(info.data)}) and {partition} "
                f"({_where(data)}) both hold {len(shared)} users (e.g. {shared[:5].tolist()}): "
                "a user's data must live on one device only."
            )
    info = NodeInfo(
        partition_id=partition,
        num_partitions=num_partitions,
        users=users,
        eval_items=arrays.get("eval-items"),
        data=data,
    )
    info.remember_request(arrays, metrics)
    nodes[reply.metadata.src_node_id] = info
    return num_partitions
