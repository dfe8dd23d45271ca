"""The evaluation half of the server strategy, and how a run's rounds are reported and
stopped: a mixin of :class:`fedrec_flwr.server.strategy.FedRecStrategy`, which holds the state it
reads (``config``, ``nodes``, ``table``, ``log``, ...).

- ``evaluate`` (every node, every ``eval-every`` rounds and after the last): the global rows
  its users' evaluation reads, and ``eval-users`` (0 on the last round: every user). With an
  ``eval-users`` sample, a node holding none of the sampled users gets no rows, and no
  message at all unless it owes its next-round request (it trains next round, not this one);
  one-user nodes then do not each receive the table for nothing. Reply:
  metric sums over its evaluated users, and each evaluated user's metrics (the ``per-user``
  record, not counted in ``bytes-up``), checked (:mod:`fedrec_flwr.server.validation`) before use.
  The per-user metrics of the best validation round are kept (``best_per_user``) for
  ``per-user.csv``.
- After each round, its figures go to ``on_round`` (``rounds.csv``); a run stops early when
  validation HR@10 stops improving (``early-stopping-patience``) and when every update of a
  round diverged.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from logging import ERROR, INFO, WARNING

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from fedrec_flwr.evaluation import reported_metrics
from fedrec_flwr.messages import ARRAYS, CONFIG, PER_USER, read_reply, record_arrays
from fedrec_flwr.partition import eval_sample, participants
from fedrec_flwr.server.validation import ReplyError, check_eval_reply
from fedrec_flwr.spectrum import effective_rank


class EvaluationRounds:
    """``configure_evaluate``/``aggregate_evaluate`` and the round's report and stop rules."""

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send every node the global rows its users' evaluation reads."""
        last = server_round == self.config.num_server_rounds
        if server_round % self.config.eval_every and not last:
            return []
        base = self.round_start_table if self.method.eval_table == "round-start" else self.table
        messages = []
        config = self._config(server_round)
        config["eval-users"] = 0 if last else self.config.eval_users  # 0: all users
        sampled, owing = self._eval_recipients(server_round, int(config["eval-users"]))
        self.eval_sent = set()
        full = None  # one record for every node that ranks all items: Flower stores it once
        for node_id, info in self.nodes.items():
            if sampled is not None and node_id not in sampled:
                if node_id not in owing:
                    continue
                # No sampled user: no rows, only the chance to send its next-round request.
                no_items = np.empty(0, dtype=np.int64)
                payload = self._payload(None, no_items, base[no_items])
            elif info.eval_items is None:
                if full is None:
                    full = self._payload(None, None, base)
                payload = full
            else:
                payload = self._payload(None, info.eval_items, base[info.eval_items])
            self.log.bytes_down += payload.count_bytes()
            content = RecordDict({ARRAYS: payload, CONFIG: config})
            messages.append(
                Message(content, dst_node_id=node_id, message_type=MessageType.EVALUATE)
            )
            self.eval_sent.add(node_id)
        self.sent = messages
        return messages

    def _eval_recipients(
        self, server_round: int, sample_size: int
    ) -> tuple[set[int] | None, set[int]]:
        """(nodes holding a user of the round's ``eval-users`` sample, or None when every
        user is evaluated; nodes without one that still owe their next-round request: they
        train next round but did not train this one, so only an evaluate reply can carry
        it). The sample is :func:`~fedrec_flwr.partition.eval_sample`, as the nodes draw it."""
        if sample_size <= 0 or sample_size >= self.num_users:
            return None, set()
        chosen = eval_sample(self.config.seed, server_round, self.num_users, sample_size)
        fraction = self.config.fraction_train
        now = participants(self.config.seed, server_round, self.num_users, fraction)
        following = np.empty(0, dtype=np.int64)
        if server_round < self.config.num_server_rounds:
            following = participants(self.config.seed, server_round + 1, self.num_users, fraction)
        node_ids = list(self.nodes)
        users = [self.nodes[node_id].users for node_id in node_ids]
        owner = np.repeat(np.arange(len(node_ids)), [len(u) for u in users])
        flat = np.concatenate(users) if users else np.empty(0, dtype=np.int64)

        def holds(selected: np.ndarray) -> np.ndarray:  # per node: holds one of them?
            mask = np.zeros(self.num_users, dtype=bool)
            mask[selected] = True
            return np.bincount(owner, weights=mask[flat], minlength=len(node_ids)) > 0

        sampled_mask = holds(chosen)
        owing_mask = ~sampled_mask & holds(following) & ~holds(now)
        return (
            {node_ids[i] for i in np.flatnonzero(sampled_mask)},
            {node_ids[i] for i in np.flatnonzero(owing_mask)},
        )

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Mean of each metric over the evaluated users of the valid replies (and, in
        ``eval_per_user``, the users' ids and metrics, sorted by user)."""
        reported = reported_metrics(self.config.protocol)
        names = [f"{s}-{m}" for s in ("val", "test") for m in reported]
        sums = dict.fromkeys(names, 0.0)
        users = 0
        user_ids, user_metrics = [], []
        self.eval_per_user = None
        erank_sum, erank_users = 0.0, 0
        evaluated: list[tuple[int, dict]] = []  # (partition id, metrics) of the valid replies
        sent, self.eval_sent = self.eval_sent, set()
        for reply in replies:
            node_id = self.sender(reply)
            expected = node_id in sent
            sent.discard(node_id)
            if reply.has_error():
                self.log.eval_failures += 1
                log(
                    WARNING,
                    "round %d: node %d failed to evaluate, its users are left out: %s",
                    server_round,
                    node_id,
                    reply.error.reason,
                )
                continue
            try:
                arrays, metrics = read_reply(reply)
                self.log.bytes_up += reply.content[ARRAYS].count_bytes()
                if not expected:
                    raise ReplyError("the node was not sent an evaluate message this round")
                per_user = _per_user_arrays(reply)
                node_users = self.nodes[node_id].users
                check_eval_reply(arrays, metrics, self.schema(), names, node_users, per_user)
            except ValueError as error:
                self._reject(server_round, "evaluate", node_id, error)
                continue
            evaluated.append((self.nodes[node_id].partition_id, metrics))
            user_ids.append(per_user["user-ids"])
            user_metrics.append(np.asarray(per_user["user-metrics"], dtype=np.float64))
            self.nodes[node_id].remember_request(arrays, metrics)
        self.log.eval_failures += self._missing(server_round, "evaluate", sent)
        # summed in partition order, not arrival order: the same float sums in every run
        for _, metrics in sorted(evaluated, key=lambda pair: pair[0]):
            users += int(metrics["num-users"])
            if "erank-personal-users" in metrics:
                erank_sum += float(metrics["erank-personal-sum"])
                erank_users += int(metrics["erank-personal-users"])
            for name in names:
                sums[name] += float(metrics[name])
        if users == 0:
            return None
        ids = np.concatenate(user_ids)
        order = np.argsort(ids, kind="stable")
        self.eval_per_user = (ids[order], np.concatenate(user_metrics)[order])
        means = {name: value / users for name, value in sums.items()}
        means["eval-users"] = users
        means["erank-global"] = effective_rank(self.table)
        if erank_users:
            means["erank-personal"] = erank_sum / erank_users
        self.log.metrics.update(means)
        return MetricRecord(means)

    def _no_better_validation(self, server_round: int, metrics: MetricRecord) -> bool:
        """Track the best validation HR@10; True when ``early-stopping-patience`` (> 0)
        evaluated rounds in a row have not beaten it (strictly, as the best round is the
        earliest on ties; a NaN never improves)."""
        value = float(metrics["val-hr@10"])
        if value == value and (self.best_val is None or value > self.best_val[0]):
            self.best_val = (value, server_round)
            self.best_per_user = self.eval_per_user
            self.evals_since_best = 0
        else:
            self.evals_since_best += 1
        patience = self.config.early_stopping_patience
        return patience > 0 and self.evals_since_best >= patience

    def _stop_early(self, server_round: int, num_rounds: int) -> None:
        """Validation HR@10 stopped improving: this round is reported, then the run stops
        (its test metrics stay those of the best validation round)."""
        self.stopped_early_round = server_round
        self._report_round(server_round, num_rounds)
        best, best_round = self.best_val or (float("nan"), 0)
        log(
            INFO,
            "round %d: validation HR@10 has not improved for %d evaluated rounds (best %.4f "
            "at round %d): early stop (early-stopping-patience), %d of %d rounds run",
            server_round,
            self.evals_since_best,
            best,
            best_round,
            server_round,
            num_rounds,
        )

    def _stop_diverged(self, server_round: int, num_rounds: int) -> None:
        """Every update of the round held NaN or inf: training diverged; stop the run (the
        rounds before stand, and the summary names this round)."""
        self.diverged_round = server_round
        log(
            ERROR,
            "round %d: training diverged (every update of the round holds NaN or inf; see the "
            "warnings above): the run stops here and its results are those of the rounds "
            "before. Lower the learning rates (lr, item-lr, dense-lr) and run again.",
            server_round,
        )
        self._report_round(server_round, num_rounds)

    def _report_round(self, server_round: int, num_rounds: int) -> None:
        figures: dict[str, float] = {
            "round": server_round,
            "seconds": round(time.perf_counter() - self.started, 3),
            "cpu-seconds": round(time.process_time() - self.started_cpu, 3),
            **self.log.metrics,
            "bytes-down": self.log.bytes_down,
            "bytes-up": self.log.bytes_up,
            "touched-items-total": int(self.touched_ever.sum()),
            "train-failures": self.log.train_failures,
            "eval-failures": self.log.eval_failures,
            "diverged-round": self.diverged_round,
            "rejected-replies": self.log.rejected_replies,
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


def _per_user_arrays(reply: Message) -> dict[str, np.ndarray]:
    """The ``per-user`` record of an evaluate reply as numpy arrays ({} if absent: the
    check then says what is missing)."""
    record = reply.content.get(PER_USER)
    if not isinstance(record, ArrayRecord):
        return {}
    return record_arrays(record, "per-user array")
