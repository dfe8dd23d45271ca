"""Reading a round's Flower replies: which node each answers for, which are valid.

Every reply is checked (:mod:`fedrec_flwr.server.validation`) before any of it is used: a
malformed one is logged and rejected (``rejected-replies``); error replies and nodes that
did not answer within the round timeout are logged and counted (``train-failures``,
``eval-failures``). A valid reply's ``next-items`` request is remembered for the node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from logging import WARNING
from typing import Any, TypeVar

import numpy as np
from flwr.app import ArrayRecord, Message
from flwr.common.logger import log

from fedrec_flwr.messages import ARRAYS, PER_USER, read_reply, record_arrays
from fedrec_flwr.server.evaluation_rounds import NodeEvaluation
from fedrec_flwr.server.nodes import NodeInfo
from fedrec_flwr.server.payloads import TrainOrder
from fedrec_flwr.server.recording import RoundLog
from fedrec_flwr.server.statistics import check_statistics_reply
from fedrec_flwr.server.validation import (
    NonFiniteReplyError,
    ReplyError,
    ReplySchema,
    check_eval_reply,
    check_train_reply,
)
from fedrec_flwr.stages import NodeUpload

__all__ = ["NodeUpload", "ReplyReader"]

T = TypeVar("T")


class ReplyReader:
    """Reads the replies of one phase of ``server_round`` (``sent``: its messages) into valid
    uploads or evaluations, counting the rest in ``round_log``."""

    def __init__(
        self,
        server_round: int,
        nodes: Mapping[int, NodeInfo],
        sent: Sequence[Message],
        round_log: RoundLog,
    ) -> None:
        self.server_round = server_round
        self.nodes = nodes
        self.sent = sent
        self.round_log = round_log

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

    def train_uploads(
        self,
        replies: Iterable[Message],
        orders: dict[int, TrainOrder],
        schema: ReplySchema,
    ) -> list[NodeUpload]:
        """The valid uploads among a round's train replies (``orders``: what each node was
        sent; consumed), in partition order, not arrival order."""
        check = check_statistics_reply if schema.statistics else check_train_reply
        answered = self.train_replies(
            replies, orders, lambda _, arrays, metrics, order: check(arrays, metrics, schema, order)
        )
        uploads = []
        for node_id, (arrays, metrics, upload) in answered.items():
            info = self.nodes[node_id]
            uploads.append(NodeUpload(info.partition_id, upload, metrics))
            info.remember_request(arrays, metrics)
        return sorted(uploads, key=lambda entry: entry.partition_id)

    def train_replies(
        self,
        replies: Iterable[Message],
        orders: dict[int, TrainOrder],
        check: Callable[[int, dict[str, np.ndarray], dict[str, Any], TrainOrder], T],
    ) -> dict[int, tuple[dict[str, np.ndarray], dict[str, Any], T]]:
        """Each participant's answered train reply, by node id in arrival order: its arrays,
        metrics and what ``check(node_id, arrays, metrics, order)`` makes of them (``orders``:
        what each node was sent; consumed). A failed reply, a node that did not answer in
        time (both counted in ``train-failures``), one from a node sent no train message this
        round, or one ``check`` refuses with a ``ValueError`` (both counted in
        ``rejected-replies``) is logged and left out: every path reads its replies here,
        each with the check of its own shapes."""
        answered = {}
        for reply in replies:
            node_id = self.sender(reply)
            order = orders.pop(node_id, None)
            if reply.has_error():
                self.round_log.train_failures += 1
                log(
                    WARNING,
                    "round %d: node %d failed to train, its update is skipped: %s",
                    self.server_round,
                    node_id,
                    reply.error.reason,
                )
                continue
            try:
                arrays, metrics = read_reply(reply)
                self.round_log.bytes_up += reply.content[ARRAYS].count_bytes()
                if order is None:  # a secure vector of it would hold no mask of this round
                    raise ReplyError("the node was not sent a train message this round")
                answered[node_id] = (arrays, metrics, check(node_id, arrays, metrics, order))
            except ValueError as error:  # ReplyError, or a reply that cannot be read
                self._reject("train", node_id, error)
        self.round_log.train_failures += self._missing("train", orders)
        return answered

    def admissible(
        self, uploads: Sequence[NodeUpload], refusals: Sequence[str | None]
    ) -> list[NodeUpload]:
        """The uploads without a refusal (``refusals``: why each lies beyond
        ``update-limit``, None if it does not); the others are refused whole, logged and
        counted as rejected replies holding values a diverging run makes."""
        kept = []
        for entry, why in zip(uploads, refusals, strict=True):
            if why is None:
                kept.append(entry)
                continue
            self.round_log.rejected_replies += 1
            self.round_log.nonfinite_replies += 1
            log(
                WARNING,
                "round %d: train reply of partition %d rejected, nothing of it is used: %s",
                self.server_round,
                entry.partition_id,
                why,
            )
        return kept

    def evaluations(
        self,
        replies: Iterable[Message],
        expected: set[int],
        schema: ReplySchema,
        metric_names: Sequence[str],
    ) -> list[NodeEvaluation]:
        """The valid evaluations among a round's evaluate replies, in arrival order
        (``expected``: the nodes sent an evaluate message; consumed)."""
        evaluated = []
        for reply in replies:
            node_id = self.sender(reply)
            was_sent = node_id in expected
            expected.discard(node_id)
            if reply.has_error():
                self.round_log.eval_failures += 1
                log(
                    WARNING,
                    "round %d: node %d failed to evaluate, its users are left out: %s",
                    self.server_round,
                    node_id,
                    reply.error.reason,
                )
                continue
            try:
                arrays, metrics = read_reply(reply)
                self.round_log.bytes_up += reply.content[ARRAYS].count_bytes()
                if not was_sent:
                    raise ReplyError("the node was not sent an evaluate message this round")
                per_user = _per_user_arrays(reply)
                node_users = self.nodes[node_id].users
                check_eval_reply(arrays, metrics, schema, metric_names, node_users, per_user)
            except ValueError as error:
                self._reject("evaluate", node_id, error)
                continue
            info = self.nodes[node_id]
            evaluated.append(
                NodeEvaluation(
                    info.partition_id, metrics, per_user["user-ids"], per_user["user-metrics"]
                )
            )
            info.remember_request(arrays, metrics)
        self.round_log.eval_failures += self._missing("evaluate", expected)
        return evaluated

    def _reject(self, kind: str, node_id: int, error: Exception) -> None:
        self.round_log.rejected_replies += 1
        self.round_log.nonfinite_replies += isinstance(error, NonFiniteReplyError)
        info = self.nodes.get(node_id)
        where = f" (partition {info.partition_id})" if info else ""
        log(
            WARNING,
            "round %d: %s reply of node %d%s rejected, nothing of it is used: %s",
            self.server_round,
            kind,
            node_id,
            where,
            error,
        )

    def _missing(self, kind: str, node_ids: Iterable[int]) -> int:
        """Log the nodes sent a ``kind`` message that never answered; return how many."""
        node_ids = sorted(node_ids)
        if node_ids:
            log(
                WARNING,
                "round %d: no %s reply within the round timeout from node(s) %s; counted as "
                "failures",
                self.server_round,
                kind,
                ", ".join(map(str, node_ids)),
            )
        return len(node_ids)


def _per_user_arrays(reply: Message) -> dict[str, np.ndarray]:
    """The ``per-user`` record of an evaluate reply as numpy arrays ({} if absent: the
    check then says what is missing)."""
    record = reply.content.get(PER_USER)
    if not isinstance(record, ArrayRecord):
        return {}
    return record_arrays(record, "per-user array")
