"""The server strategy: Flower glue around parts that each work without Flower.

Message flow of a run (keys in :mod:`fedrec_flwr.messages`):

- ``query`` (once, to every node as it registers; :mod:`fedrec_flwr.server.handshake`).
- ``train`` (nodes holding a user selected this round): ``train-users``, only the rows the
  node asked for (``item-ids`` + ``item-rows``; the full table, without ids, if it has no
  fresh request) and the shared-dense parameters. Reply: ``item-ids``, ``row-sums``,
  ``row-counts``, ``dense.<name>`` sums (see :mod:`fedrec_flwr.aggregation`) and
  ``next-items`` for the next round.
- ``evaluate`` (every ``eval-every`` rounds and after the last): the rows (and shared-dense
  parameters) a node's evaluation reads. Reply: metric sums, each evaluated user's metrics
  and ``next-items``.

Under ``secure-aggregation`` a train message carries the full table and the round's
participants' public keys, a train reply one masked vector and no request, and the server
decodes only their sum (:mod:`fedrec_flwr.server.secure_rounds`).

What a reply may carry follows the method's parameter roles; private parameters never appear
in a reply. The parts:

- :class:`~fedrec_flwr.server.model.ServerModel`: the global table, shared-dense parameters
  and server optimiser, and the update a round's uploads make;
- :class:`~fedrec_flwr.server.payloads.PayloadPlanner`: which users and rows each node gets;
- :class:`~fedrec_flwr.server.replies.ReplyReader`: which replies are valid (the rest are
  logged and counted);
- :class:`~fedrec_flwr.server.evaluation_rounds.EvaluationRounds`: when a round evaluates,
  and the means of its replies;
- :class:`~fedrec_flwr.server.stopping.RunStopping`: the best round, early stopping,
  divergence;
- :class:`~fedrec_flwr.server.recording.RoundReporter`: each round's figures (``rounds.csv``);
- :class:`~fedrec_flwr.server.checkpoint.Checkpoints` (optional): saves and restores the
  parts through :meth:`FedRecStrategy.state_dict`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from fedrec_flwr.config import RunConfig
from fedrec_flwr.messages import (
    ARRAYS,
    CONFIG,
    array_record,
    dense_arrays,
    float_value,
    read_dense,
    record_arrays,
    sparse_rows,
)
from fedrec_flwr.methods import Method
from fedrec_flwr.methods.itemitem import uploads_statistics
from fedrec_flwr.methods.layout import describe
from fedrec_flwr.server.checkpoint import Checkpoints
from fedrec_flwr.server.evaluation_rounds import EvaluationRounds
from fedrec_flwr.server.global_model import GlobalModel
from fedrec_flwr.server.handshake import Federation, FederationError, NodeInfo
from fedrec_flwr.server.model import UpdateRefusedError
from fedrec_flwr.server.payloads import PayloadPlanner, TrainOrder
from fedrec_flwr.server.recording import RoundLog, RoundReporter
from fedrec_flwr.server.replies import NodeUpload, ReplyReader
from fedrec_flwr.server.secure_rounds import SecureRounds
from fedrec_flwr.server.stopping import RunStopping
from fedrec_flwr.server.validation import ReplySchema, reply_schema
from fedrec_flwr.stages import Upload

__all__ = ["FedRecStrategy", "FederationError", "NodeInfo", "RoundLog", "model_record"]


def model_record(model: GlobalModel) -> ArrayRecord:
    """The model's table (``item-table``) and shared-dense parameters (``dense.<name>``) as
    the Flower record :meth:`FedRecStrategy.start` takes."""
    return array_record(dense_arrays(model.dense), item_table=model.table)


def rows_record(
    model: GlobalModel,
    users: np.ndarray | None,
    item_ids: np.ndarray | None,
    rows: np.ndarray,
    extra: Mapping[str, np.ndarray] | None = None,
) -> ArrayRecord:
    """A train or evaluate payload: the users to train (if any), the global rows
    ``item_ids`` (None: the full table), the shared-dense parameters and ``extra`` arrays."""
    arrays = {} if users is None else {"train_users": users}
    arrays.update(sparse_rows(item_ids, rows, model.zero_threshold))
    arrays.update(extra or {})
    return array_record(dense_arrays(model.dense), **arrays)


def applied(model: GlobalModel, uploads: list[Upload], server_round: int) -> np.ndarray | None:
    """The rows the round's uploads touched, once applied to ``model``; None (logged, the
    model unchanged) when none arrived or the update is refused."""
    try:
        if uploads:
            return model.apply(uploads)
    except UpdateRefusedError as error:
        log(WARNING, "round %d: %s", server_round, error)
    log(WARNING, "round %d: no training update arrived; the table is unchanged", server_round)
    return None


def train_loss(uploads: list[NodeUpload], method: Method) -> dict[str, float]:
    """``train-loss``: the mean over the round's samples (none for a method that sums
    co-occurrences: it has no loss)."""
    if uploads_statistics(method):
        return {}
    loss_sum, num_samples = 0.0, 0
    for entry in uploads:  # partition order, not arrival order
        loss_sum += float(entry.metrics["loss-sum"])
        num_samples += int(entry.metrics["num-samples"])
    return {"train-loss": loss_sum / max(num_samples, 1)}


def refuse_flower_options(
    train_config: ConfigRecord | None,
    evaluate_config: ConfigRecord | None,
    evaluate_fn: Callable | None,
) -> None:
    """Raise for the options of Flower's ``Strategy.start`` that this strategy has no use for
    (given, they would be silently ignored)."""
    given = [
        name
        for name, value in (
            ("train_config", train_config),
            ("evaluate_config", evaluate_config),
            ("evaluate_fn", evaluate_fn),
        )
        if value is not None
    ]
    if given:
        raise ValueError(
            f"FedRecStrategy.start takes no {', '.join(given)}: every train and evaluate "
            "message carries the run config's settings, and the nodes evaluate (eval-every, "
            "eval-users). Set those in the run config and leave these options out."
        )


class FedRecStrategy(Strategy):
    """Sparse, row-wise federated averaging of a global item table, plus the mean of
    shared-dense parameters, through an optional server optimiser.

    ``on_round`` is called after every round with the round's figures (a flat dict), e.g. to
    write ``rounds.csv`` as the run goes; ``checkpoints`` saves and restores the run's state.
    """

    def __init__(
        self,
        config: RunConfig,
        method: Method,
        model: GlobalModel,
        federation: Federation,
        on_round: Callable[[dict[str, Any]], None] | None = None,
        checkpoints: Checkpoints | None = None,
    ) -> None:
        if federation.num_items != model.num_items:
            raise FederationError(
                f"the nodes hold {federation.num_items} items, the server model was built "
                f"for {model.num_items}: build it from the handshake's number of items"
            )
        model.check_contributors(max((len(i.users) for i in federation.nodes.values()), default=1))
        self.config = config
        self.method = method
        self.model = model
        self.num_users = federation.num_users
        self.nodes: dict[int, NodeInfo] = federation.nodes  # by node id, the planner's too
        self.secure = SecureRounds(federation, config) if model.stages.masked else None
        if self.secure is not None:
            self.secure.check_size(config, len(federation.nodes))
            self.secure.hold(method, model)  # its value limit, secure-aggregation-bound
        rows = not uploads_statistics(method)  # an item-item method's training reads no row
        self.planner = PayloadPlanner(config, federation.nodes, federation.num_users, rows)
        self.evaluation = EvaluationRounds(config)
        self.stopping = RunStopping(config.evaluation.early_stopping_patience)
        self.reporter = RoundReporter(on_round)
        self.checkpoints = checkpoints
        self.round_log = RoundLog(round=0)
        self.orders: dict[int, TrainOrder] = {}  # train messages of the round, by node id
        self.eval_sent: set[int] = set()  # nodes sent an evaluate message this round
        self.sent: list[Message] = []  # the messages of the phase being aggregated

    def schema(self) -> ReplySchema:
        """What every reply must match (item catalogue, row width, dense shapes)."""
        return reply_schema(self.config, self.method, self.model)

    def state_dict(self) -> dict[str, Any]:
        """The parts' state: the model's, the pending requests, the best round, the clock."""
        return {
            **self.model.state_dict(),
            **self.planner.state_dict(),
            **self.stopping.state_dict(),
            **self.reporter.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict` (a resumed run)."""
        for part in (self.model, self.planner, self.stopping, self.reporter):
            part.load_state_dict(state)

    def summary(self) -> None:
        """Log the strategy's settings."""
        log(
            INFO,
            "\t├── FedRecStrategy: %s (%s), aggregation %s, server optimizer %s, %d users x "
            "%d items, fraction-train %.2f",
            self.config.method_name,
            ", ".join(f"{k}: {v}" for k, v in describe(self.method).items() if k != "method"),
            self.config.learning.aggregation,
            self.config.server.server_optimizer,
            self.num_users,
            self.model.num_items,
            self.config.training.fraction_train,
        )

    def _config(self, server_round: int) -> ConfigRecord:
        """The config of a round's messages (and what a node needs to keep its state on disk:
        :mod:`fedrec_flwr.node.state_store`)."""
        extra = self.checkpoints.message_config() if self.checkpoints is not None else {}
        return ConfigRecord({"server-round": server_round, **extra})

    def _message(self, node_id: int, payload: ArrayRecord, config: ConfigRecord, kind: str):
        self.round_log.bytes_down += payload.count_bytes()
        content = RecordDict({ARRAYS: payload, CONFIG: config})
        return Message(content, dst_node_id=node_id, message_type=kind)

    # ------------------------------------------------------------- training
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send each node with selected users only the rows it asked for."""
        self.round_log = RoundLog(round=server_round)
        self.model.start_round()
        self.orders = self.planner.train_orders(server_round)
        peers = self.secure.peers(self.orders, server_round, grid) if self.secure else {}
        messages = []
        for node_id, order in self.orders.items():
            ids = order.item_ids
            rows = self.model.table if ids is None else self.model.table[ids]
            extra = {**peers.get(node_id, {}), **self.model.train_arrays()}  # item-item: support
            payload = rows_record(self.model, order.users, ids, rows, extra)
            config = self._config(server_round)
            messages.append(self._message(node_id, payload, config, MessageType.TRAIN))
        self.sent = messages
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Apply the round's valid uploads, as the server's stages decode them, to the model
        (:meth:`ServerModel.apply <fedrec_flwr.server.model.ServerModel.apply>`)."""
        orders, self.orders = self.orders, {}
        reader = (self.secure or ReplyReader)(server_round, self.nodes, self.sent, self.round_log)
        uploads = self.model.decode(reader.train_uploads(replies, orders, self.schema()))
        uploads = reader.admissible(uploads, self.model.refusals([u.upload for u in uploads]))
        touched = applied(self.model, [entry.upload for entry in uploads], server_round)
        if touched is None:
            return None, None
        self.round_log.touched_items = len(touched)
        self.round_log.train_users = sum(entry.upload.num_users for entry in uploads)
        metrics = {
            **train_loss(uploads, self.method),
            "train-users": self.round_log.train_users,
            "touched-items": self.round_log.touched_items,
            "c-density": self.model.density(),
        }
        self.round_log.metrics.update(metrics)
        return array_record(item_table=self.model.table), MetricRecord({**metrics})

    # ----------------------------------------------------------- evaluation
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send every node the global rows its users' evaluation reads (see
        :mod:`fedrec_flwr.server.payloads`)."""
        if not self.evaluation.due(server_round):
            return []
        base = self.model.evaluation_table()
        config = self._config(server_round)
        sample = self.evaluation.sample_size(server_round)  # 0: all users
        config["eval-users"] = sample
        plan = self.planner.evaluation_plan(server_round, sample)
        full = None  # one record for every node that ranks all items: Flower stores it once
        messages = []
        for node_id, ids in plan.items():
            if ids is None:
                if full is None:
                    full = rows_record(self.model, None, None, base)
                payload = full
            else:
                payload = rows_record(self.model, None, ids, base[ids])
            messages.append(self._message(node_id, payload, config, MessageType.EVALUATE))
        self.eval_sent = set(plan)
        self.sent = messages
        return messages

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Mean of each metric over the evaluated users of the valid replies."""
        return self._evaluate(server_round, replies)[0]

    def _evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[MetricRecord | None, tuple[np.ndarray, np.ndarray] | None]:
        """(:meth:`aggregate_evaluate`'s metrics, the users' ids and metrics by user)."""
        sent, self.eval_sent = self.eval_sent, set()
        reader = ReplyReader(server_round, self.nodes, self.sent, self.round_log)
        names = self.evaluation.metric_names
        evaluated = reader.evaluations(replies, sent, self.schema(), names)
        embeddings = None if uploads_statistics(self.method) else self.model.table
        outcome = self.evaluation.combine(evaluated, embeddings)
        if outcome is None:
            return None, None
        self.round_log.metrics.update(outcome.means)
        return MetricRecord({**outcome.means}), outcome.per_user

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
        """Run ``num_rounds`` rounds of train + evaluate (after the checkpoint's round, when
        resuming) from ``initial_arrays`` (:func:`model_record`: ``item-table``, the global
        table of round 1, and ``dense.<name>`` for each shared-dense parameter); Flower's
        other options are refused (:func:`refuse_flower_options`)."""
        refuse_flower_options(train_config, evaluate_config, evaluate_fn)
        initial = record_arrays(initial_arrays)
        self.model.load_initial(initial["item-table"], read_dense(initial))
        self.summary()
        result = Result()
        arrays = initial_arrays
        self.reporter.start_clock()
        first_round = 1  # a resumed run continues after its checkpoint
        if self.checkpoints is not None:
            first_round = self.checkpoints.restore(self, grid, timeout) + 1
        for server_round in range(first_round, num_rounds + 1):
            train_replies = grid.send_and_receive(
                self.configure_train(server_round, arrays, ConfigRecord(), grid), timeout=timeout
            )
            new_arrays, train_metrics = self.aggregate_train(server_round, train_replies)
            if new_arrays is None and self.round_log.nonfinite_replies:
                self.stopping.stop_diverged(server_round)
                self._report(num_rounds)
                break
            if new_arrays is not None:
                arrays = result.arrays = new_arrays
            if train_metrics is not None:
                result.train_metrics_clientapp[server_round] = train_metrics
            if self._evaluation_stops(server_round, num_rounds, grid, arrays, result, timeout):
                self._report(num_rounds)
                self.stopping.stop_early(server_round, num_rounds)
                break
            self._report(num_rounds)
            if self.checkpoints is not None:
                self.checkpoints.after_round(self, grid, server_round, timeout)
        return result

    def _evaluation_stops(
        self,
        server_round: int,
        num_rounds: int,
        grid: Grid,
        arrays: ArrayRecord,
        result: Result,
        timeout: float,
    ) -> bool:
        """Run the round's evaluation, if due; True when the run stops early after it."""
        messages = self.configure_evaluate(server_round, arrays, ConfigRecord(), grid)
        if not messages:
            return False
        replies = grid.send_and_receive(messages, timeout=timeout)
        metrics, per_user = self._evaluate(server_round, replies)
        if metrics is None:
            return False
        result.evaluate_metrics_clientapp[server_round] = metrics
        stale = self.stopping.observe(server_round, float_value(metrics, "val-hr@10"), per_user)
        return stale and server_round < num_rounds

    def _report(self, num_rounds: int) -> None:
        touched_total = int(self.model.touched_ever.sum())
        diverged = self.stopping.diverged_round
        self.reporter.report(self.round_log, num_rounds, touched_total, diverged)
