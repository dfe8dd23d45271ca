"""The server strategy: holds the global item table (and shared-dense parameters) and
aggregates sparse row uploads.

Message flow of a run (keys in :mod:`fedrec_flwr.messages`):

- ``query`` (once, to every node as it registers; :mod:`fedrec_flwr.server.handshake`).
- ``train`` (nodes holding a user selected this round): ``train-users``, only the rows the
  node asked for (``item-ids`` + ``item-rows``; the full table, without ids, if it has no
  fresh request) and the shared-dense parameters. Reply: ``item-ids``, ``row-sums``,
  ``row-counts``, ``dense.<name>`` sums (see :mod:`fedrec_flwr.aggregation`) and
  ``next-items`` for the next round.
- ``evaluate`` (every node): the rows (and shared-dense parameters) its evaluation reads.
  Reply: metric sums and ``next-items``.

What a reply may carry follows the method's parameter roles; private parameters never appear
in a reply. Every reply is checked (:mod:`fedrec_flwr.server.validation`) before any of it is used:
a malformed one is logged and rejected (``rejected-replies``); error replies and nodes that did
not answer within the round timeout are logged and counted (``train-failures``,
``eval-failures``). The aggregated change goes through the server optimiser
(:mod:`fedrec_flwr.server.optimizer`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from logging import INFO, WARNING

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from fedrec_flwr.aggregation import dense_changes, row_changes
from fedrec_flwr.config import RunConfig
from fedrec_flwr.messages import (
    ARRAYS,
    CONFIG,
    array_record,
    dense_arrays,
    read_dense,
    read_reply,
    record_arrays,
    sparse_rows,
)
from fedrec_flwr.methods import Method
from fedrec_flwr.partition import participants
from fedrec_flwr.privacy.denoise import denoised
from fedrec_flwr.server.checkpoint import Checkpoints
from fedrec_flwr.server.evaluation_rounds import EvaluationRounds
from fedrec_flwr.server.handshake import FederationError, NodeInfo, connect
from fedrec_flwr.server.optimizer import ServerOptimizer
from fedrec_flwr.server.validation import (
    NonFiniteReplyError,
    ReplyError,
    ReplySchema,
    TrainOrder,
    check_train_reply,
)

__all__ = ["FedRecStrategy", "FederationError", "NodeInfo", "RoundLog", "array_record"]


@dataclass
class RoundLog:
    """Traffic and training figures of one round (filled while the round runs)."""

    round: int
    bytes_down: int = 0
    bytes_up: int = 0
    train_users: int = 0
    train_failures: int = 0
    eval_failures: int = 0
    rejected_replies: int = 0  # train and evaluate replies that failed validation
    nonfinite_replies: int = 0  # of those, the ones holding NaN or inf
    touched_items: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


class FedRecStrategy(EvaluationRounds, Strategy):
    """Sparse, row-wise federated averaging of a global item table, plus the mean of
    shared-dense parameters, through an optional server optimiser.

    ``on_round`` is called after every round with the round's figures (a flat dict), e.g. to
    write ``rounds.csv`` as the run goes.
    """

    def __init__(
        self,
        config: RunConfig,
        method: Method,
        num_users: int,
        num_items: int,
        on_round: Callable[[dict[str, float]], None] | None = None,
    ) -> None:
        self.config = config
        self.method = method
        self.num_users = num_users
        self.num_items = num_items
        self.table = np.empty((num_items, method.row_dim), dtype=np.float32)  # see start()
        self.round_start_table = self.table
        self.dense: dict[str, np.ndarray] = {}  # shared-dense parameters, see start()
        self.optimizer = ServerOptimizer(
            config.server_optimizer, config.server_lr, config.server_momentum
        )
        self.touched_ever = np.zeros(num_items, dtype=bool)
        self.nodes: dict[int, NodeInfo] = {}
        self.orders: dict[int, TrainOrder] = {}  # train messages of the round, by node id
        self.eval_sent: set[int] = set()  # nodes sent an evaluate message this round
        self.sent: list[Message] = []  # the messages of the phase being aggregated
        self.on_round = on_round
        self.log: RoundLog = RoundLog(round=0)
        self.diverged_round: int | None = None  # see _stop_diverged
        self.stopped_early_round: int | None = None  # see _no_better_validation
        self.best_val: tuple[float, int] | None = None  # (validation HR@10, round)
        # (user ids, metrics [users, val-* then test-*]) of the last evaluation / of best_val
        self.eval_per_user: tuple[np.ndarray, np.ndarray] | None = None
        self.best_per_user: tuple[np.ndarray, np.ndarray] | None = None
        self.evals_since_best = 0
        self.started = time.perf_counter()
        self.started_cpu = time.process_time()  # this process's CPU (in-process: the nodes' too)
        self.checkpoints: Checkpoints | None = None  # set by the ServerApp (checkpoint.py)

    def connect(self, grid: Grid, timeout: float) -> None:
        """The handshake (:func:`fedrec_flwr.server.handshake.connect`); the nodes' data must have
        this strategy's numbers of users and items."""
        federation = connect(grid, self.config, self.config.node_wait_timeout, timeout)
        if (federation.num_users, federation.num_items) != (self.num_users, self.num_items):
            raise FederationError(
                f"the nodes hold {federation.num_users} users x {federation.num_items} items, "
                f"the strategy was built for {self.num_users} x {self.num_items}"
            )
        self.nodes = federation.nodes

    def schema(self) -> ReplySchema:
        """What every reply must match (item catalogue, row width, dense shapes)."""
        shapes = {name: value.shape for name, value in self.dense.items()}
        return ReplySchema(self.num_items, self.method.row_dim, shapes)

    def _reject(self, server_round: int, kind: str, node_id: int, error: Exception) -> None:
        self.log.rejected_replies += 1
        self.log.nonfinite_replies += isinstance(error, NonFiniteReplyError)
        info = self.nodes.get(node_id)
        where = f" (partition {info.partition_id})" if info else ""
        log(
            WARNING,
            "round %d: %s reply of node %d%s rejected, nothing of it is used: %s",
            server_round,
            kind,
            node_id,
            where,
            error,
        )

    def sender(self, reply: Message) -> int:
        """The node a reply answers for: its sender, except for the error replies Flower's
        SuperLink writes itself (e.g. "node unavailable" for a node that stopped sending
        heartbeats): those come from the SuperLink, and answer for the node the message was
        sent to (else the node would count twice: once failed, once missing)."""
        sender = reply.metadata.src_node_id
        if reply.has_error() and sender not in self.nodes:
            for message in self.sent:
                if message.metadata.message_id == reply.metadata.reply_to_message_id:
                    return message.metadata.dst_node_id
        return sender

    def _missing(self, server_round: int, kind: str, node_ids: Iterable[int]) -> int:
        """Log the nodes sent a ``kind`` message that never answered; return how many."""
        node_ids = sorted(node_ids)
        if node_ids:
            log(
                WARNING,
                "round %d: no %s reply within the round timeout from node(s) %s; counted as "
                "failures",
                server_round,
                kind,
                ", ".join(map(str, node_ids)),
            )
        return len(node_ids)

    def _config(self, server_round: int) -> ConfigRecord:
        """The config of a round's messages (and what a node needs to keep its state on disk:
        :mod:`fedrec_flwr.node.state_store`)."""
        extra = self.checkpoints.message_config() if self.checkpoints is not None else {}
        return ConfigRecord({"server-round": server_round, **extra})

    def _payload(self, users: np.ndarray | None, item_ids, rows: np.ndarray) -> ArrayRecord:
        arrays = {} if users is None else {"train_users": users}
        arrays.update(sparse_rows(item_ids, rows, self.method.zero_threshold))
        return array_record(dense_arrays(self.dense), **arrays)

    # ------------------------------------------------------------- training
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send each node with selected users only the rows it asked for."""
        self.log = RoundLog(round=server_round)
        # No copy needed: aggregation replaces the table, it never writes into it.
        self.round_start_table = self.table
        self.orders = {}
        selected = participants(
            self.config.seed, server_round, self.num_users, self.config.fraction_train
        )
        messages = []
        for node_id, info in self.nodes.items():
            users = np.intersect1d(info.users, selected)
            if len(users) == 0:
                continue
            if info.request_round == server_round and info.request_items is not None:
                ids = info.request_items
                payload = self._payload(users, ids, self.table[ids])
            else:  # no fresh request: the full table is always correct
                ids = None
                payload = self._payload(users, None, self.table)
            self.orders[node_id] = TrainOrder(users=users, item_ids=ids)
            self.log.bytes_down += payload.count_bytes()
            content = RecordDict({ARRAYS: payload, CONFIG: self._config(server_round)})
            messages.append(Message(content, dst_node_id=node_id, message_type=MessageType.TRAIN))
        self.sent = messages
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Apply the round's valid uploads to the global table and shared-dense parameters.

        A reply that fails :func:`~fedrec_flwr.server.validation.check_train_reply` is rejected;
        error replies and nodes that did not answer count as train failures.
        """
        uploads, loss_sum, num_samples = [], 0.0, 0
        orders, self.orders = self.orders, {}
        for reply in replies:
            node_id = self.sender(reply)
            order = orders.pop(node_id, None)
            if reply.has_error():
                self.log.train_failures += 1
                log(
                    WARNING,
                    "round %d: node %d failed to train, its update is skipped: %s",
                    server_round,
                    node_id,
                    reply.error.reason,
                )
                continue
            try:
                arrays, metrics = read_reply(reply)
                self.log.bytes_up += reply.content[ARRAYS].count_bytes()
                if order is None:
                    raise ReplyError("the node was not sent a train message this round")
                upload = check_train_reply(arrays, metrics, self.schema(), order)
            except ValueError as error:  # ReplyError, or a reply that cannot be read
                self._reject(server_round, "train", node_id, error)
                continue
            info = self.nodes[node_id]
            uploads.append((info.partition_id, upload, metrics))
            info.remember_request(arrays, metrics)
        self.log.train_failures += self._missing(server_round, "train", orders)
        uploads.sort(key=lambda entry: entry[0])  # partition order, not arrival order
        for _, _, metrics in uploads:
            loss_sum += float(metrics["loss-sum"])
            num_samples += int(metrics["num-samples"])
        uploads = [upload for _, upload, _ in uploads]
        if not uploads:
            log(
                WARNING,
                "round %d: no training update arrived; the table is unchanged",
                server_round,
            )
            return None, None
        touched, delta = row_changes(self.table, uploads, self.config.aggregation)
        if self.config.ldp_denoise:  # post-processing of the LDP noise: privacy/denoise.py
            delta = denoised(touched, delta, uploads, self.config, self.num_items)
        self.table = self.optimizer.update_rows(self.table, touched, delta)
        threshold = self.method.zero_threshold
        if threshold is not None:  # rows at or below the threshold are zero (and not sent)
            self.table[np.abs(self.table).max(axis=1, initial=0.0) <= threshold] = 0.0
        self.dense = {
            name: self.optimizer.update_dense(name, self.dense[name], change)
            for name, change in dense_changes(self.dense, uploads).items()
        }
        self.touched_ever[touched] = True
        self.log.touched_items = len(touched)
        self.log.train_users = sum(u.num_users for u in uploads)
        metrics = {
            "train-loss": loss_sum / max(num_samples, 1),
            "train-users": self.log.train_users,
            "touched-items": self.log.touched_items,
            "c-density": float(self.table.any(axis=1).mean()),
        }
        self.log.metrics.update(metrics)
        return array_record(item_table=self.table), MetricRecord(metrics)

    def summary(self) -> None:
        """Log the strategy's settings."""
        log(
            INFO,
            "\t├── FedRecStrategy: %s (%s), aggregation %s, server optimizer %s, %d users x "
            "%d items, fraction-train %.2f",
            self.config.method,
            ", ".join(f"{k}: {v}" for k, v in self.method.describe().items() if k != "method"),
            self.config.aggregation,
            self.config.server_optimizer,
            self.num_users,
            self.num_items,
            self.config.fraction_train,
        )

    # ----------------------------------------------------------------- loop
    def load(self, initial_arrays: ArrayRecord) -> None:
        """Take the global table and shared-dense parameters of round 1."""
        initial = record_arrays(initial_arrays)
        self.table = np.array(initial["item-table"], dtype=np.float32)
        if self.table.shape != (self.num_items, self.method.row_dim):
            raise ValueError(
                f"item-table has shape {self.table.shape}, expected "
                f"({self.num_items}, {self.method.row_dim})"
            )
        self.dense = read_dense(initial)
        expected = set(self.method.shared_dense_names())
        if set(self.dense) != expected:
            raise ValueError(
                f"initial arrays hold dense {sorted(self.dense)}, expected {sorted(expected)}"
            )
        self.round_start_table = self.table

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Connect the nodes (unless :attr:`nodes` holds them already), then run
        ``num_rounds`` rounds of train + evaluate.

        ``initial_arrays`` must hold ``item-table``, the global item table of round 1, and
        ``dense.<name>`` for each shared-dense parameter; after each round ``on_round``
        receives that round's figures.
        """
        self.load(initial_arrays)
        self.summary()
        if not self.nodes:
            self.connect(grid, timeout)
        result = Result()
        arrays = initial_arrays
        self.started = time.perf_counter()
        self.started_cpu = time.process_time()  # this process's CPU (in-process: the nodes' too)
        first_round = 1  # a resumed run continues after its checkpoint
        if self.checkpoints is not None:
            first_round = self.checkpoints.restore(self, grid, timeout) + 1
        for server_round in range(first_round, num_rounds + 1):
            train_replies = grid.send_and_receive(
                self.configure_train(server_round, arrays, ConfigRecord(), grid), timeout=timeout
            )
            new_arrays, train_metrics = self.aggregate_train(server_round, train_replies)
            if new_arrays is None and self.log.nonfinite_replies:
                self._stop_diverged(server_round, num_rounds)
                break
            if new_arrays is not None:
                arrays = result.arrays = new_arrays
            if train_metrics is not None:
                result.train_metrics_clientapp[server_round] = train_metrics
            eval_messages = self.configure_evaluate(server_round, arrays, ConfigRecord(), grid)
            if eval_messages:
                eval_metrics = self.aggregate_evaluate(
                    server_round, grid.send_and_receive(eval_messages, timeout=timeout)
                )
                if eval_metrics is not None:
                    result.evaluate_metrics_clientapp[server_round] = eval_metrics
                    stale = self._no_better_validation(server_round, eval_metrics)
                    if stale and server_round < num_rounds:
                        self._stop_early(server_round, num_rounds)
                        break
            self._report_round(server_round, num_rounds)
            if self.checkpoints is not None:
                self.checkpoints.after_round(self, grid, server_round, timeout)
        return result
