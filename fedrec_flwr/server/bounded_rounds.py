"""The server's side of bounded secure aggregation (``secure-aggregation-bound``,
:mod:`fedrec_flwr.privacy.bounded`).

Each train message also carries the helper's X25519 key, signed by the helper's identity
key (:meth:`BoundedRounds.helper_arrays`). Each node replies with one report per user
(``bounded-*`` arrays) instead of a masked vector. The server (the leader) computes its
share of each report's verification, the helper its own (:class:`~fedrec_flwr.privacy.
bounded.helper.Helper`, reached through one call: :data:`~fedrec_flwr.privacy.bounded.
leader.HelperLink`); a user whose report does not verify is dropped, named in a warning,
and counted in ``rejected_replies``; the others' sum becomes one upload for
:meth:`~fedrec_flwr.server.model.ServerModel.apply` (:func:`bounded_uploads`). The round is
void when the helper refuses (fewer reports verified than ``secure-aggregation-min-peers``
+ 1, a repeated round) or the two aggregators disagree.

By default the helper runs in the ServerApp's process: the bounds hold against every
client, and each report stays hidden from a server that does not read the helper's key.
With ``secure-aggregation-helper = "process"`` it runs as an OS process of its own
(:class:`~fedrec_flwr.privacy.bounded.helper_process.HelperProcess`), its private key never
in the ServerApp's process; a party apart on another machine is not shipped
(``docs/privacy.md``).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from functools import partial
from logging import WARNING
from typing import Any

import numpy as np
from flwr.app import Message
from flwr.common.logger import log
from flwr.supercore.task_identity import TaskIdentity

from fedrec_flwr.aggregation import RowUpload
from fedrec_flwr.privacy import secagg_trust
from fedrec_flwr.privacy.bounded import client, leader
from fedrec_flwr.privacy.bounded import report as rep
from fedrec_flwr.privacy.bounded.helper import Helper, Schedule, verification_key
from fedrec_flwr.privacy.bounded.helper_process import HelperProcess
from fedrec_flwr.privacy.bounded.keys import BoundedKeys, HelperPlace
from fedrec_flwr.privacy.bounded.scaled import BoundSchedule, ScaleError
from fedrec_flwr.privacy.secagg import SecAggKeys
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.server.payloads import TrainOrder
from fedrec_flwr.stages import NodeUpload


class BoundedRounds:
    """The bounds of every round, the helper, and the table the users' changes apply to."""

    def __init__(
        self, bounds: BoundSchedule, config: RunGroups, num_users: int, num_partitions: int
    ) -> None:
        training, secure = config.training, config.group(SecAggKeys)
        schedule = Schedule(
            training.seed,
            num_users,
            training.fraction_train,
            num_partitions,
            secure.secure_aggregation_min_peers + 1,
        )
        keys = secure.secure_aggregation_keys
        #: The bounds of every round, and the ceiling's (the fixed point every round uses).
        self.schedule, self.bounds = bounds, bounds.ceiling
        roster = secagg_trust.Roster(training.seed, keys)
        self.helper: Helper | HelperProcess
        if config.group(BoundedKeys).secure_aggregation_helper == HelperPlace.PROCESS:
            shared = verification_key(training.seed, keys)  # both aggregators hold it
            self.helper = HelperProcess(bounds, schedule, roster, keys, shared)
            weakref.finalize(self, self.helper.close)  # the process ends with the run's rounds
        else:
            self.helper = Helper(bounds, schedule, roster, keys)

    def helper_arrays(self) -> dict[str, np.ndarray]:
        """The helper's key, its signature and identity key, for every train message."""
        public = self.helper.public(int(TaskIdentity.run_id))
        return {name.replace("-", "_"): value for name, value in public.items()}


def bounded_uploads(
    reader: Any,
    replies: Iterable[Message],
    orders: dict[int, TrainOrder],
    keys: Mapping[int, dict[str, np.ndarray]],
    table: np.ndarray,
) -> list[NodeUpload]:
    """The accepted reports' sum as one upload (partition -1), or none when the round is
    void; ``keys``: each node's handshake keys; ``table``: the table the round trained on."""
    rounds: BoundedRounds = reader.rounds.bounded
    round_log, server_round = reader.round_log, reader.server_round
    reports = _reports(reader, replies, orders, keys)
    if not reports:
        log(WARNING, "round %d: bounded secure aggregation void: no report arrived", server_round)
        return []
    try:
        helper = rounds.helper
        total = leader.aggregate(
            rounds.schedule.at(table),  # the helper computes the round's bounds on its own
            int(TaskIdentity.run_id),
            server_round,
            reports,
            partial(helper.answer, table=table),
            helper.verify_key,
        )
    except (leader.RoundVoid, ScaleError) as error:
        log(WARNING, "round %d: bounded secure aggregation void: %s", server_round, error)
        return []
    for user, why in sorted(total.refused.items()):
        round_log.rejected_replies += 1
        log(
            WARNING, "round %d: user %d dropped: its report is refused: %s", server_round, user, why
        )
    touched = np.flatnonzero(total.counts)
    counts = total.counts[touched]
    sums = total.changes[touched] + counts[:, None] * np.asarray(table, np.float64)[touched]
    upload = RowUpload(touched, sums, counts, total.users)
    return [NodeUpload(-1, upload, {"loss-sum": total.loss, "num-samples": total.samples})]


def _reports(
    reader: Any,
    replies: Iterable[Message],
    orders: dict[int, TrainOrder],
    keys: Mapping[int, dict[str, np.ndarray]],
) -> list[tuple[rep.Report, leader.Sender]]:
    """The round's reports with their senders' signed keys (``orders``: the participants,
    consumed). A failed, missing or malformed reply is a dropout, counted in the round log
    as the plain path counts it (:meth:`~fedrec_flwr.server.replies.ReplyReader.
    train_replies`)."""

    def check(_node_id, arrays: dict, _metrics, _order) -> list[rep.Report]:
        if set(arrays) != set(client.ARRAYS):
            raise ValueError(f"it carries {sorted(arrays)}, not {list(client.ARRAYS)}")
        return client.unpack(arrays)

    reports: list[tuple[rep.Report, leader.Sender]] = []
    for node_id, (_, _, unpacked) in reader.train_replies(replies, orders, check).items():
        own, identity = keys[node_id], keys[node_id].get("identity")
        sender = leader.Sender(
            reader.nodes[node_id].partition_id,
            own["key"],
            own["signature"],
            None if identity is None else np.asarray(identity).tobytes(),
        )
        reports += [(report, sender) for report in unpacked]
    return reports
