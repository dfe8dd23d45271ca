"""The server's side of a secure-aggregation round (:mod:`fedrec_flwr.privacy.secagg`).

The train message of every participant carries the full table, the round's cohort
(``secagg-cohort``: every participant's partition id) and the node's neighbours on the
round's graph with itself (``secagg-peers``), their X25519 public keys from the handshake,
the keys' signatures and identity keys (:mod:`fedrec_flwr.privacy.secagg_trust`). Each node
replies with one masked vector (``secure``, uint64) and its self-mask seed's shares sealed for
their holders (``secagg-shares``), nothing else. The server adds the vectors modulo 2^64,
asks every node that answered for what removes the masks (the ``unmask`` query: the shares
it holds of its surviving neighbours' self-masks, its pairwise masks with the neighbours that
dropped; :mod:`fedrec_flwr.privacy.secagg_dropout`), and hands the survivors' sum
(:class:`SecureReader`) to the plug-in's stage of the server's chain, which decodes it
(:class:`~fedrec_flwr.privacy.secure_upload.SecureDecode`) into one upload for
:meth:`~fedrec_flwr.server.model.ServerModel.apply`.

A participant that fails, does not answer in time or sends a malformed vector is a dropout:
the round aggregates the others, exactly. The round is void (the table and shared-dense
parameters stay as they are; a warning says why) when a survivor's self-mask cannot be
rebuilt (fewer than ``t`` of its share holders answered the unmask step), when a survivor
with a dropped neighbour does not answer it, or when the sum does not decode.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from logging import WARNING
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common.logger import log

from fedrec_flwr.messages import ARRAYS, CONFIG, array_record, record_arrays
from fedrec_flwr.methods import Method
from fedrec_flwr.privacy import secagg, secagg_dropout
from fedrec_flwr.privacy.bounded.keys import bounds_of
from fedrec_flwr.privacy.secagg import SecAggKeys
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.schema import ConfigError
from fedrec_flwr.server.bounded_rounds import BoundedRounds, bounded_uploads
from fedrec_flwr.server.global_model import GlobalModel
from fedrec_flwr.server.nodes import NodeInfo
from fedrec_flwr.server.payloads import TrainOrder
from fedrec_flwr.server.replies import ReplyReader
from fedrec_flwr.server.statistics import secure_statistics
from fedrec_flwr.server.validation import ReplySchema
from fedrec_flwr.stages import NodeUpload, SecureSum

__all__ = ["SecureReader", "SecureRounds", "masked_vectors", "unmasked_total"]


class SecureRounds:
    """The server's side of secure aggregation: the participants' public keys each train
    message carries (:meth:`peers`), and a reader of each round's masked replies (calling
    it makes one, as :class:`~fedrec_flwr.server.replies.ReplyReader` is made)."""

    def __init__(self, federation: Any, config: RunGroups) -> None:
        self.nodes: Mapping[int, NodeInfo] = federation.nodes
        self.keys: Mapping[int, dict[str, np.ndarray]] = federation.public_keys
        self.num_users: int = federation.num_users
        self.config = config
        self.graph: dict[int, np.ndarray] = {}  # the round's: partition -> its neighbours
        self.threshold = 0
        self.grid: Any = None  # the round's (peers)
        self.by_partition: dict[int, int] = {}
        #: Under ``secure-aggregation-bound``: the bounds, the helper, and the model whose
        #: table the users' proven changes apply to (set by the strategy).
        self.bounded: BoundedRounds | None = None
        self.model: GlobalModel | None = None

    @staticmethod
    def check_size(config: RunGroups, num_partitions: int) -> None:
        """Refuse a federation too small for ``secure-aggregation-min-peers``."""
        min_peers = config.group(SecAggKeys).secure_aggregation_min_peers
        if num_partitions - 1 < min_peers:
            raise ConfigError(
                f"secure aggregation with {num_partitions} nodes leaves each "
                f"{num_partitions - 1} other participants, fewer than "
                f"secure-aggregation-min-peers={min_peers} "
                "(every node would refuse every round): run more nodes, or lower it"
            )

    def peers(self, node_ids: Iterable[int], server_round: int, grid: Any) -> dict[int, dict]:
        """Each participant's secure-aggregation arrays: ``secagg_cohort`` (every
        participant's partition id, sorted), ``secagg_peers`` (the node and its neighbours
        on the round's graph, sorted), their public keys (``[p, 32]`` uint8), the keys'
        signatures and the nodes' identity keys, as the handshake gave them. ``grid``: where
        the round's unmask step goes (:class:`SecureReader`)."""
        by_partition = {self.nodes[node_id].partition_id: node_id for node_id in node_ids}
        cohort = np.array(sorted(by_partition), dtype=np.int64)
        secure = self.config.group(SecAggKeys)
        k = secagg_dropout.degree(len(cohort), secure.secure_aggregation_neighbours)
        self.graph = secagg_dropout.neighbours(self.config.training.seed, server_round, cohort, k)
        self.threshold, self.grid, self.by_partition = (
            secagg_dropout.threshold(k),
            grid,
            by_partition,
        )
        parts = (("key", "keys"), ("signature", "signatures"), ("identity", "identities"))
        out = {}
        for partition, node_id in by_partition.items():
            listed = np.array(sorted([partition, *self.graph[partition].tolist()]), np.int64)
            arrays = {"secagg_cohort": cohort, "secagg_peers": listed}
            for part, name in parts:
                arrays[f"secagg_{name}"] = np.stack(
                    [self.keys[by_partition[int(p)]][part] for p in listed]
                )
            if self.bounded is not None:
                arrays.update(self.bounded.helper_arrays())
            out[node_id] = arrays
        return out

    def hold(self, method: Method, model: GlobalModel) -> None:
        """Make ``model`` hold only what a user can encode (:meth:`value_limit`); under
        ``secure-aggregation-bound``, the round's bounds and helper (refused for a method
        they cannot cover: :func:`~fedrec_flwr.privacy.bounded.keys.bounds_of`)."""
        model.limit_values(self.value_limit())
        bounds = bounds_of(self.config, method, model.num_items, model.row_dim)
        if bounds is not None:
            self.bounded = BoundedRounds(bounds, self.config, self.num_users, len(self.nodes))
            self.model = model

    def value_limit(self) -> float:
        """The largest magnitude a value of the table may have: what a user can encode."""
        return secagg.value_limit(self.num_users)

    def __call__(self, server_round: int, nodes, sent, round_log) -> SecureReader:
        reader = SecureReader(server_round, nodes, sent, round_log)
        reader.rounds = self
        return reader


class SecureReader(ReplyReader):
    """Reads a round's masked train replies into the survivors' sum, their masks removed,
    for the secure-aggregation stage to decode."""

    rounds: SecureRounds  # the round's graph, threshold and grid

    def train_uploads(
        self, replies: Iterable[Message], orders: dict[int, TrainOrder], schema: ReplySchema
    ) -> list[NodeUpload]:
        """The survivors' sum as one upload (partition -1), still encoded, or none when the
        masks cannot be removed (the round is void); an item-item method's sums are decoded
        here (:meth:`_statistics`)."""
        if schema.statistics:  # a method that sums co-occurrences
            return self._statistics(replies, orders, schema.layout)
        if self.rounds.bounded is not None and self.rounds.model is not None:  # a report a user
            keys, table = self.rounds.keys, self.rounds.model.table
            return bounded_uploads(self, replies, orders, keys, table)
        layout = secagg.Layout.of(schema.num_items, schema.row_dim, schema.dense_shapes)
        users = {self.nodes[n].partition_id: len(order.users) for n, order in orders.items()}
        answered = masked_vectors(self, replies, orders, layout.length)
        try:
            if not answered:
                raise secagg_dropout.DropoutError("no masked vector arrived")
            total = unmasked_total(self, answered)
        except (secagg.SecureAggregationError, secagg_dropout.DropoutError) as error:
            log(WARNING, "round %d: secure aggregation void: %s", self.server_round, error)
            return []
        survivors = sum(users[p] for p in answered)
        summed = SecureSum(self.server_round, total, survivors, self.rounds.num_users)
        return [NodeUpload(-1, summed, {})]

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

    def _statistics(
        self, replies: Iterable[Message], orders: dict[int, TrainOrder], layout
    ) -> list[NodeUpload]:
        """The round's co-occurrence sums as one upload, the survivors' (a dropped node's
        users are not counted: :mod:`fedrec_flwr.server.statistics`)."""
        answered = masked_vectors(self, replies, orders, layout.length)
        try:
            if not answered:
                raise secagg_dropout.DropoutError("no masked vector arrived")
            upload = secure_statistics(unmasked_total(self, answered), layout)
        except (secagg.SecureAggregationError, secagg_dropout.DropoutError) as error:
            log(WARNING, "round %d: secure aggregation void: %s", self.server_round, error)
            return []
        return [NodeUpload(-1, upload, {"loss-sum": 0.0, "num-samples": 0})]


def masked_vectors(
    reader: SecureReader, replies: Iterable[Message], orders: dict[int, TrainOrder], length: int
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The participants' masked vectors and sealed shares, by partition (``orders``: the
    participants, consumed). A failed, missing or malformed reply is a dropout, counted in
    the reader's round log as the plain path counts it
    (:meth:`~fedrec_flwr.server.replies.ReplyReader.train_replies`)."""
    graph, nodes = reader.rounds.graph, reader.nodes

    def check(node_id: int, arrays: dict, _metrics, _order) -> int:
        partition = nodes[node_id].partition_id
        _check_shapes(arrays, length, len(graph[partition]) + 1)
        return partition

    answered = reader.train_replies(replies, orders, check)
    return {
        partition: (arrays["secure"], arrays["secagg-shares"])
        for arrays, _, partition in answered.values()
    }


def _check_shapes(arrays: dict, length: int, holders: int) -> None:
    if set(arrays) != {"secure", "secagg-shares"}:
        raise ValueError(f"it carries {sorted(arrays)}, not 'secure' and 'secagg-shares'")
    vector, sealed = arrays["secure"], arrays["secagg-shares"]
    if vector.dtype != np.uint64 or vector.shape != (length,):
        raise ValueError(f"'secure' is {vector.dtype} {vector.shape}, not uint64 ({length},)")
    if sealed.dtype != np.uint8 or sealed.shape != (holders, secagg_dropout.SEALED_BYTES):
        raise ValueError(f"'secagg-shares' is {sealed.dtype} {sealed.shape}, not ({holders}, ...)")


def unmasked_total(reader: SecureReader, answered: dict[int, tuple]) -> np.ndarray:
    """The survivors' exact sum: their vectors added, then the unmask step's answers
    (:func:`~fedrec_flwr.privacy.secagg_dropout.recover`)."""
    rounds = reader.rounds
    graph, survivors = rounds.graph, set(answered)
    messages = []
    for partition in sorted(survivors):
        alive = [int(p) for p in graph[partition] if p in survivors]
        senders = sorted([partition, *alive])
        sealed = np.stack([answered[j][1][_holder_row(graph, j, partition)] for j in senders])
        arrays = {"survivors": np.array(alive, np.int64), "senders": np.array(senders, np.int64)}
        content = RecordDict(
            {
                ARRAYS: array_record(**arrays, sealed=sealed),
                CONFIG: ConfigRecord({"server-round": reader.server_round}),
            }
        )
        node_id = rounds.by_partition[partition]
        messages.append(Message(content, dst_node_id=node_id, message_type="query.unmask"))
    shares: dict[int, list[bytes]] = {p: [] for p in survivors}
    pairs: dict[tuple[int, int], bytes] = {}
    timeout = rounds.config.execution.round_timeout
    for reply in rounds.grid.send_and_receive(messages, timeout=timeout):
        if reply.has_error():
            log(
                WARNING,
                "round %d: an unmask answer failed: %s",
                reader.server_round,
                reply.error.reason,
            )
            continue
        arrays = record_arrays(reply.content[ARRAYS])
        node = int(reply.content["metrics"]["partition-id"])
        for owner, share in zip(arrays["share-of"].tolist(), arrays["shares"], strict=True):
            if owner in shares:
                shares[owner].append(share.tobytes())
        for dropped, seed in zip(arrays["pair-with"].tolist(), arrays["pair-seeds"], strict=True):
            if dropped not in survivors and dropped in graph[node]:
                pairs[(node, dropped)] = seed.tobytes()
    missing = [
        (u, d)
        for u in survivors
        for d in graph[u].tolist()
        if d not in survivors and (u, d) not in pairs
    ]
    if missing:
        raise secagg_dropout.DropoutError(
            f"partition {missing[0][0]} did not hand over its mask with dropped partition "
            f"{missing[0][1]}"
        )
    total = secagg.ring_sum([vector for vector, _ in answered.values()])
    return secagg_dropout.recover(total, sorted(survivors), shares, pairs, rounds.threshold)


def _holder_row(graph: dict[int, np.ndarray], sender: int, holder: int) -> int:
    """The row of ``holder``'s share in ``sender``'s sealed shares (itself, then its
    neighbours sorted)."""
    if holder == sender:
        return 0
    return 1 + int(np.searchsorted(graph[sender], holder))
