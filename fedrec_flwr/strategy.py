"""The server strategy: holds the global item table and aggregates sparse row uploads.

Message flow of a run (every array is an ``ArrayRecord`` entry, int64 ids):

- ``query`` (once, to every node as it registers): the node answers with its
  ``partition-id``/``num-partitions``, its users, the item rows its evaluation needs
  (``eval-items``; absent = all of them, full ranking) and the rows its users train in
  round 1 (``next-items``).
- ``train`` (nodes holding a user selected this round): ``train-users`` and only the rows the
  node asked for (``item-ids`` + ``item-rows``; the full table, without ids, if it has no
  fresh request). Reply: ``item-ids``, ``row-sums``, ``row-counts`` (see
  :mod:`fedrec_flwr.aggregation`) and ``next-items`` for the next round.
- ``evaluate`` (every node): the rows its evaluation reads. Reply: metric sums and
  ``next-items``.

Private parameters never appear in a reply. Failed replies are logged and skipped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from logging import INFO, WARNING

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from fedrec_flwr.aggregation import RowUpload, aggregate_rows
from fedrec_flwr.config import RunConfig
from fedrec_flwr.evaluation import metric_names
from fedrec_flwr.methods import METHODS
from fedrec_flwr.partition import participants


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


@dataclass
class RoundLog:
    """Traffic and training figures of one round (filled while the round runs)."""

    round: int
    bytes_down: int = 0
    bytes_up: int = 0
    train_users: int = 0
    train_failures: int = 0
    eval_failures: int = 0
    touched_items: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


def array_record(**arrays: np.ndarray) -> ArrayRecord:
    """An ArrayRecord of named numpy arrays (kebab-case names)."""
    return ArrayRecord(
        {name.replace("_", "-"): Array(np.ascontiguousarray(a)) for name, a in arrays.items()}
    )


class FedRecStrategy(Strategy):
    """Sparse, row-wise federated averaging of a global item table.

    ``on_round`` is called after every round with the round's figures (a flat dict), e.g. to
    write ``rounds.csv`` as the run goes.
    """

    def __init__(
        self,
        config: RunConfig,
        num_users: int,
        num_items: int,
        on_round: Callable[[dict[str, float]], None] | None = None,
    ) -> None:
        self.config = config
        self.num_users = num_users
        self.num_items = num_items
        self.method = METHODS[config.method]
        self.table = np.empty((num_items, config.embedding_dim), dtype=np.float32)  # see start()
        self.round_start_table = self.table
        self.touched_ever = np.zeros(num_items, dtype=bool)
        self.nodes: dict[int, NodeInfo] = {}
        self.on_round = on_round
        self.log: RoundLog = RoundLog(round=0)
        self.started = time.perf_counter()

    # ------------------------------------------------------------ handshake
    def connect(self, grid: Grid, timeout: float) -> None:
        """Wait for every partition's node and record what each holds and needs."""
        deadline = time.monotonic() + self.config.node_wait_timeout
        expected: int | None = None
        failed: dict[int, str] = {}  # node id -> why its handshake failed
        while True:
            new = [n for n in grid.get_node_ids() if n not in self.nodes and n not in failed]
            if new:
                query = RecordDict({"config": ConfigRecord({"server-round": 0})})
                messages = [
                    Message(query, dst_node_id=n, message_type=MessageType.QUERY) for n in new
                ]
                for reply in grid.send_and_receive(messages, timeout=timeout):
                    if reply.has_error():  # e.g. a dead node a SuperLink still lists
                        node, reason = reply.metadata.src_node_id, reply.error.reason
                        failed[node] = reason
                        log(WARNING, "node %d failed its handshake: %s", node, reason)
                        continue
                    expected = self._register(reply, expected)
            if failed and not self.nodes:  # every node failed: no point in waiting
                raise FederationError(f"the nodes failed to start: {next(iter(failed.values()))}")
            covered = {info.partition_id for info in self.nodes.values()}
            if expected is not None and len(covered) == expected:
                break
            if time.monotonic() > deadline:
                raise FederationError(
                    f"waited {self.config.node_wait_timeout:.0f} s for the nodes: "
                    f"{len(covered)} of {expected or '?'} partitions connected"
                    + (f", {len(failed)} failed" if failed else "")
                    + ". In simulation every SuperNode is one partition (num-supernodes); in "
                    "deployment start one flower-supernode per partition-id, or raise "
                    "node-wait-timeout."
                )
            time.sleep(0.2)
        held = np.concatenate([info.users for info in self.nodes.values()])
        if len(held) != self.num_users or len(np.unique(held)) != self.num_users:
            raise FederationError(
                f"the nodes hold {len(np.unique(held))} distinct users, the dataset has "
                f"{self.num_users}: do all nodes read the same data and configuration?"
            )
        log(INFO, "%d nodes connected, holding %d users", len(self.nodes), self.num_users)

    def _register(self, reply: Message, expected: int | None) -> int:
        metrics, arrays = reply.content["metrics"], reply.content["arrays"]
        partition, num_partitions = int(metrics["partition-id"]), int(metrics["num-partitions"])
        if expected is not None and num_partitions != expected:
            raise FederationError(
                f"nodes disagree on num-partitions ({expected} vs {num_partitions}): give every "
                "node the same num-partitions in its node config."
            )
        if int(metrics["num-items"]) != self.num_items:
            raise FederationError(
                f"node {partition} sees {int(metrics['num-items'])} items, the server "
                f"{self.num_items}: the node reads different data."
            )
        if any(info.partition_id == partition for info in self.nodes.values()):
            raise FederationError(f"two nodes claim partition-id={partition}.")
        self.nodes[reply.metadata.src_node_id] = NodeInfo(
            partition_id=partition,
            num_partitions=num_partitions,
            users=arrays["users"].numpy(),
            eval_items=arrays["eval-items"].numpy() if "eval-items" in arrays else None,
            request_round=int(metrics["next-round"]),
            request_items=arrays["next-items"].numpy() if "next-items" in arrays else None,
        )
        return num_partitions

    def _remember_request(self, reply: Message) -> None:
        arrays, metrics = reply.content["arrays"], reply.content["metrics"]
        if "next-items" in arrays:
            info = self.nodes[reply.metadata.src_node_id]
            info.request_round = int(metrics["next-round"])
            info.request_items = arrays["next-items"].numpy()

    # ------------------------------------------------------------- training
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send each node with selected users only the rows it asked for."""
        self.log = RoundLog(round=server_round)
        # No copy needed: aggregation replaces the table, it never writes into it.
        self.round_start_table = self.table
        selected = participants(
            self.config.seed, server_round, self.num_users, self.config.fraction_train
        )
        messages = []
        for node_id, info in self.nodes.items():
            users = np.intersect1d(info.users, selected)
            if len(users) == 0:
                continue
            if info.request_round == server_round and info.request_items is not None:
                payload = array_record(
                    train_users=users,
                    item_ids=info.request_items,
                    item_rows=self.table[info.request_items],
                )
            else:  # no fresh request: the full table is always correct
                payload = array_record(train_users=users, item_rows=self.table)
            self.log.bytes_down += payload.count_bytes()
            content = RecordDict(
                {"arrays": payload, "config": ConfigRecord({"server-round": server_round})}
            )
            messages.append(Message(content, dst_node_id=node_id, message_type=MessageType.TRAIN))
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Apply the round's row uploads to the global table."""
        uploads, loss_sum, num_samples = [], 0.0, 0
        for reply in replies:
            if reply.has_error():
                self.log.train_failures += 1
                log(
                    WARNING,
                    "round %d: node %d failed to train, its update is skipped: %s",
                    server_round,
                    reply.metadata.src_node_id,
                    reply.error.reason,
                )
                continue
            arrays, metrics = reply.content["arrays"], reply.content["metrics"]
            self.log.bytes_up += arrays.count_bytes()
            uploads.append(
                (
                    self.nodes[reply.metadata.src_node_id].partition_id,
                    RowUpload(
                        item_ids=arrays["item-ids"].numpy(),
                        row_sums=arrays["row-sums"].numpy(),
                        row_counts=arrays["row-counts"].numpy(),
                        num_users=int(metrics["num-users"]),
                    ),
                )
            )
            loss_sum += float(metrics["loss-sum"])
            num_samples += int(metrics["num-samples"])
            self._remember_request(reply)
        uploads = [upload for _, upload in sorted(uploads, key=lambda pair: pair[0])]
        if not uploads:
            log(
                WARNING,
                "round %d: no training update arrived; the table is unchanged",
                server_round,
            )
            return None, None
        self.table = aggregate_rows(self.table, uploads, self.config.aggregation)
        touched = np.unique(np.concatenate([u.item_ids for u in uploads]))
        self.touched_ever[touched] = True
        self.log.touched_items = len(touched)
        self.log.train_users = sum(u.num_users for u in uploads)
        metrics = {
            "train-loss": loss_sum / max(num_samples, 1),
            "train-users": self.log.train_users,
            "touched-items": self.log.touched_items,
        }
        self.log.metrics.update(metrics)
        return array_record(item_table=self.table), MetricRecord(metrics)

    # ----------------------------------------------------------- evaluation
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send every node the global rows its users' evaluation reads."""
        last = server_round == self.config.num_server_rounds
        if server_round % self.config.eval_every and not last:
            return []
        base = self.round_start_table if self.method.eval_table == "round-start" else self.table
        messages = []
        for node_id, info in self.nodes.items():
            if info.eval_items is None:
                payload = array_record(item_rows=base)
            else:
                payload = array_record(item_ids=info.eval_items, item_rows=base[info.eval_items])
            self.log.bytes_down += payload.count_bytes()
            content = RecordDict(
                {"arrays": payload, "config": ConfigRecord({"server-round": server_round})}
            )
            messages.append(
                Message(content, dst_node_id=node_id, message_type=MessageType.EVALUATE)
            )
        return messages

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Mean of each metric over the evaluated users."""
        names = [f"{s}-{m}" for s in ("val", "test") for m in metric_names(self.config.protocol)]
        sums = dict.fromkeys(names, 0.0)
        users = 0
        for reply in replies:
            if reply.has_error():
                self.log.eval_failures += 1
                log(
                    WARNING,
                    "round %d: node %d failed to evaluate, its users are left out: %s",
                    server_round,
                    reply.metadata.src_node_id,
                    reply.error.reason,
                )
                continue
            metrics = reply.content["metrics"]
            self.log.bytes_up += reply.content["arrays"].count_bytes()
            users += int(metrics["num-users"])
            for name in names:
                sums[name] += float(metrics[name])
            self._remember_request(reply)
        if users == 0:
            return None
        means = {name: value / users for name, value in sums.items()}
        means["eval-users"] = users
        self.log.metrics.update(means)
        return MetricRecord(means)

    def summary(self) -> None:
        """Log the strategy's settings."""
        log(
            INFO,
            "\t├── FedRecStrategy: %s, aggregation %s, %d users x %d items, fraction-train %.2f",
            self.config.method,
            self.config.aggregation,
            self.num_users,
            self.num_items,
            self.config.fraction_train,
        )

    # ----------------------------------------------------------------- loop
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
        """Connect the nodes, then run ``num_rounds`` rounds of train + evaluate.

        ``initial_arrays`` must hold ``item-table``, the global item table of round 1; after
        each round ``on_round`` receives that round's figures.
        """
        self.table = np.array(initial_arrays["item-table"].numpy(), dtype=np.float32)
        if self.table.shape != (self.num_items, self.config.embedding_dim):
            raise ValueError(
                f"item-table has shape {self.table.shape}, expected "
                f"({self.num_items}, {self.config.embedding_dim})"
            )
        self.round_start_table = self.table
        self.summary()
        self.connect(grid, timeout)
        result = Result()
        arrays = initial_arrays
        self.started = time.perf_counter()
        for server_round in range(1, num_rounds + 1):
            train_replies = grid.send_and_receive(
                self.configure_train(server_round, arrays, ConfigRecord(), grid), timeout=timeout
            )
            new_arrays, train_metrics = self.aggregate_train(server_round, train_replies)
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
            self._report_round(server_round, num_rounds)
        return result

    def _report_round(self, server_round: int, num_rounds: int) -> None:
        figures: dict[str, float] = {
            "round": server_round,
            "seconds": round(time.perf_counter() - self.started, 3),
            **self.log.metrics,
            "bytes-down": self.log.bytes_down,
            "bytes-up": self.log.bytes_up,
            "touched-items-total": int(self.touched_ever.sum()),
            "train-failures": self.log.train_failures,
            "eval-failures": self.log.eval_failures,
        }
        shown = " ".join(
            f"{k} {figures[k]:.4f}"
            for k in ("train-loss", "val-hr@10", "val-ndcg@10", "test-hr@10", "test-ndcg@10")
            if k in figures
        )
        log(
            INFO,
            "[round %d/%d] %.1fs | %s | down %.2f MB up %.2f MB",
            server_round,
            num_rounds,
            figures["seconds"],
            shown,
            self.log.bytes_down / 1e6,
            self.log.bytes_up / 1e6,
        )
        if self.on_round is not None:
            self.on_round(figures)
