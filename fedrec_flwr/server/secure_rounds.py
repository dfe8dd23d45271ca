"""The server's side of a secure-aggregation round (:mod:`fedrec_flwr.privacy.secagg`).

The train message of every participant carries the full table and the round's participants
(``secagg-peers``: their partition ids, ``secagg-keys``: their X25519 public keys from the
handshake). Each replies with one masked vector (``secure``, uint64) and nothing else; the
server adds the vectors modulo 2^64, the pairwise masks cancel, and only the sum is decoded
(:func:`~fedrec_flwr.privacy.secagg.decode`) into one upload for
:meth:`~fedrec_flwr.server.model.ServerModel.apply` (:class:`SecureReader`).

A participant that fails, does not answer in time or sends a malformed vector leaves its
masks in the others' vectors: the round's shared update is void (the table and shared-dense
parameters stay as they are; a warning names the nodes). SecAgg+'s recovery of a dropped
node's masks by secret sharing of its key (Bonawitz et al., CCS 2017; Bell et al., CCS 2020)
is not implemented.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from logging import WARNING
from typing import Any

import numpy as np
from flwr.app import Message
from flwr.common.logger import log

from fedrec_flwr.messages import ARRAYS, record_arrays
from fedrec_flwr.privacy import secagg
from fedrec_flwr.schema import ConfigError
from fedrec_flwr.server.nodes import NodeInfo
from fedrec_flwr.server.payloads import TrainOrder
from fedrec_flwr.server.replies import NodeUpload, ReplyReader
from fedrec_flwr.server.validation import ReplySchema

__all__ = ["SecureReader", "SecureRounds", "masked_total"]


class SecureRounds:
    """The server's side of secure aggregation: the participants' public keys each train
    message carries (:meth:`peers`), and a reader of each round's masked replies (calling
    it makes one, as :class:`~fedrec_flwr.server.replies.ReplyReader` is made)."""

    def __init__(self, federation: Any) -> None:
        self.nodes: Mapping[int, NodeInfo] = federation.nodes
        self.keys: Mapping[int, dict[str, np.ndarray]] = federation.public_keys
        self.num_users: int = federation.num_users

    @staticmethod
    def check_size(config: Any, num_partitions: int) -> None:
        """Refuse a federation too small for ``secure-aggregation-min-peers``."""
        if num_partitions - 1 < config.secure_aggregation_min_peers:
            raise ConfigError(
                f"secure aggregation with {num_partitions} nodes leaves each "
                f"{num_partitions - 1} other participants, fewer than "
                f"secure-aggregation-min-peers={config.secure_aggregation_min_peers} "
                "(every node would refuse every round): run more nodes, or lower it"
            )

    def peers(self, node_ids: Iterable[int]) -> dict[str, np.ndarray]:
        """The round's participants: ``secagg_peers`` (their partition ids, sorted),
        ``secagg_keys`` (their public keys, ``[p, 32]`` uint8), the keys' signatures and the
        nodes' identity keys, as the handshake gave them."""
        order = sorted((self.nodes[node_id].partition_id, node_id) for node_id in node_ids)
        out = {"secagg_peers": np.array([partition for partition, _ in order], dtype=np.int64)}
        parts = (("key", "keys"), ("signature", "signatures"), ("identity", "identities"))
        for part, name in parts:
            out[f"secagg_{name}"] = np.stack([self.keys[node_id][part] for _, node_id in order])
        return out

    def value_limit(self) -> float:
        """The largest magnitude a value of the table may have: what a user can encode."""
        return secagg.value_limit(self.num_users)

    def __call__(self, server_round: int, nodes, sent, round_log) -> SecureReader:
        reader = SecureReader(server_round, nodes, sent, round_log)
        reader.total_users = self.num_users
        return reader


class SecureReader(ReplyReader):
    """Reads a round's masked train replies into one upload: their unmasked sum."""

    total_users = 0  # the federation's users (the encoding's range)

    def train_uploads(
        self, replies: Iterable[Message], orders: dict[int, TrainOrder], schema: ReplySchema
    ) -> list[NodeUpload]:
        """The round's sum as one upload (partition -1) with its loss and sample sums, or
        none when a participant's vector is missing (the round is void)."""
        layout = secagg.Layout.of(schema.num_items, schema.row_dim, schema.dense_shapes)
        num_users = sum(len(order.users) for order in orders.values())
        total = masked_total(self, replies, orders, layout.length)
        if total is None:
            return []
        try:
            aggregate = secagg.decode(layout, total, num_users, self.total_users)
        except secagg.SecureAggregationError as error:
            log(WARNING, "round %d: secure aggregation void: %s", self.server_round, error)
            return []
        metrics = {"loss-sum": aggregate.loss_sum, "num-samples": aggregate.num_samples}
        return [NodeUpload(-1, aggregate.upload, metrics)]

    def admissible(self, uploads, refusals) -> list[NodeUpload]:
        """The round's sum unless it lies beyond what its users may upload (then the round
        is void: which participant's vector made it so cannot be told)."""
        for why in refusals:
            if why is not None:
                log(
                    WARNING,
                    "round %d: secure aggregation void: the round's sum lies beyond what its "
                    "users may upload (%s); which participant sent it cannot be told",
                    self.server_round,
                    why,
                )
                return []
        return list(uploads)


def masked_total(
    reader: ReplyReader,
    replies: Iterable[Message],
    orders: dict[int, TrainOrder],
    length: int,
) -> np.ndarray | None:
    """The sum modulo 2^64 of the round's masked vectors (``orders``: the participants,
    consumed), or None when a participant's vector is missing or malformed (the round is
    void: logged). Replies are counted in the reader's round log as the plain path does."""
    round_log, server_round = reader.round_log, reader.server_round
    vectors, lost = [], []
    for reply in replies:
        node_id = reader.sender(reply)
        order = orders.pop(node_id, None)
        if reply.has_error():
            round_log.train_failures += 1
            lost.append(f"node {node_id} failed ({reply.error.reason})")
            continue
        try:
            arrays = record_arrays(reply.content[ARRAYS])
            round_log.bytes_up += reply.content[ARRAYS].count_bytes()
            vector = arrays.get("secure")
            if set(arrays) != {"secure"} or vector is None:
                raise ValueError(f"it carries {sorted(arrays)}, not one 'secure' vector")
            if vector.dtype != np.uint64 or vector.shape != (length,):
                raise ValueError(
                    f"'secure' is {vector.dtype} {vector.shape}, not uint64 ({length},)"
                )
        except ValueError as error:
            round_log.rejected_replies += 1
            log(
                WARNING,
                "round %d: train reply of node %d rejected: %s",
                server_round,
                node_id,
                error,
            )
            if order is not None:  # a participant: its masks are missing from the sum
                lost.append(f"node {node_id} sent a malformed vector")
            continue
        if order is None:  # not a participant: its vector holds no mask of this round
            round_log.rejected_replies += 1
            log(WARNING, "round %d: node %d was sent no train message", server_round, node_id)
            continue
        vectors.append(vector)
    missing = sorted(orders)
    round_log.train_failures += len(missing)
    lost.extend(f"node {node_id} did not answer in time" for node_id in missing)
    if lost or not vectors:
        log(
            WARNING,
            "round %d: secure aggregation: %s; that participant's masks do not cancel, so the "
            "round's shared update is void (table and shared-dense parameters unchanged; "
            "dropout recovery by secret sharing is not implemented)",
            server_round,
            "; ".join(lost) or "no vector arrived",
        )
        return None
    return secagg.ring_sum(vectors)
