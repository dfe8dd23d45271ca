"""Secure aggregation's stages (:mod:`fedrec_flwr.privacy.secagg`): the node's finisher,
which uploads one vector, masked, instead of its rows (:class:`SecureEncoding`), and the
server's decoder of the round's sum (:class:`SecureDecode`); and the plug-in that
declares them."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

import numpy as np

from fedrec_flwr.methods import Method, Plugin
from fedrec_flwr.partition import participants
from fedrec_flwr.privacy import secagg, secagg_trust
from fedrec_flwr.privacy.bounded import client as bounded_client
from fedrec_flwr.privacy.bounded import report as bounded_report
from fedrec_flwr.privacy.bounded.circuit import Bounds
from fedrec_flwr.privacy.bounded.keys import BoundedKeys
from fedrec_flwr.privacy.bounded.scaled import BoundSchedule
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.stages import (
    ModelShapes,
    NodeUpload,
    SecureSum,
    ServerStage,
    TrainResult,
    UploadRound,
    Uploads,
    UploadStage,
    UserChanges,
)

LOG = logging.getLogger(__name__)


class SecureEncoding(UploadStage):
    """The node's upload: the :func:`~fedrec_flwr.privacy.secagg.encode` vector of its
    users' rows (user after user) and shared-dense copies (``TrainResult.secure``), which
    the node masks towards its neighbours in the round before it leaves
    (:mod:`fedrec_flwr.node.secure_node`; one node alone, whose vector is the round's sum,
    needs no mask). Observers set
    (:data:`secagg.OBSERVERS`, the audit) get each wanted user's faithful-mode view: its own
    vector masked with every other participant of the round. Every node is sent the full
    table and requests no rows."""

    name = "secure-aggregation"
    finishes = True
    full_table = True

    def __init__(
        self,
        seed: int,
        key_source: str,
        num_users: int,
        fraction_train: float,
        bound: tuple[float, int] = (0.0, 0),
        scaled: tuple[float, float] = (0.0, 0.0),
    ) -> None:
        self.seed, self.key_source = seed, secagg.KeySource(key_source)
        self.num_users, self.fraction_train = num_users, fraction_train
        #: (secure-aggregation-bound, -max-rows); a bound > 0: each user's changes, proven
        self.bound = bound
        #: (secure-aggregation-bound-scale, -floor): the round's bound from the table
        self.scaled = scaled

    @property
    def bounded(self) -> bool:
        """Whether each user's changes are bounded and proven (a bound > 0)."""
        return self.bound[0] > 0

    @classmethod
    def of(cls, config: RunGroups, data: Any) -> SecureEncoding:
        training, keys = config.training, config.group(secagg.SecAggKeys).secure_aggregation_keys
        group = config.group(BoundedKeys)
        bound = (group.secure_aggregation_bound, group.secure_aggregation_max_rows)
        scaled = (group.secure_aggregation_bound_scale, group.secure_aggregation_bound_floor)
        return cls(training.seed, keys, data.num_users, training.fraction_train, bound, scaled)

    def finish(self, uploads: Uploads, upload_round: UploadRound) -> TrainResult:
        if self.bounded:
            return self.user_changes(uploads, upload_round)
        rows = uploads.host_rows()
        values = {name: v.detach().cpu().double().numpy() for name, v in uploads.dense.items()}
        layout = secagg.Layout.of(
            upload_round.num_items, rows.shape[1], {k: v.shape[1:] for k, v in values.items()}
        )
        encode = partial(secagg.encode, layout, total_users=self.num_users)
        vector = encode(
            uploads.items,
            rows,
            values,
            num_users=len(uploads.users),
            num_samples=uploads.num_samples,
            loss_sum=uploads.loss_sum,
        )
        if secagg.OBSERVERS:
            self.show_views(uploads, upload_round, rows, values, encode)
        return _rowless(uploads, rows.shape[1], secure=vector)

    def user_changes(self, uploads: Uploads, upload_round: UploadRound) -> TrainResult:
        """Each user's change of its rows against the table as sent (the node proves each:
        :func:`fedrec_flwr.node.secure_node.bounded_upload`)."""
        if uploads.dense:
            raise ValueError(
                f"secure-aggregation-bound covers item rows only, and this node's users upload "
                f"shared-dense parameters {sorted(uploads.dense)}: leave the bound at 0"
            )
        rows, table = uploads.host_rows().astype(np.float64), upload_round.table
        blocks = [
            (uploads.items[lo:hi], rows[lo:hi] - table[uploads.items[lo:hi]])
            for _, lo, hi in uploads.blocks()
        ]
        changes = UserChanges(uploads.users, blocks, uploads.num_samples, uploads.loss_sum)
        if secagg.OBSERVERS:
            self.show_reports(uploads, upload_round, blocks)
        return _rowless(uploads, rows.shape[1], user_changes=changes)

    def show_reports(self, uploads: Uploads, upload_round: UploadRound, blocks) -> None:
        """Each wanted user's faithful-mode view under ``secure-aggregation-bound`` to the
        observers that want it: the leader's share of its report (the user its own node,
        the helper's key the seeded one; the audit's view has no run: run 0)."""
        table, server_round = upload_round.table, upload_round.server_round
        ceiling = Bounds.of(table.shape[0], table.shape[1], *self.bound)
        bounds = BoundSchedule(ceiling, *self.scaled).at(table)
        helper = secagg.public_bytes(
            secagg.private_key(self.seed, secagg_trust.HELPER_ID, self.key_source)
        )
        for user, (items, change) in zip(uploads.users, blocks, strict=True):
            observers = secagg.wanted(int(user), server_round)
            if not observers:
                continue
            (report,) = bounded_client.user_reports(
                bounds,
                lambda u: bounded_report.context(0, server_round, u, bounds),
                [int(user)],
                [(items, change)],
                0,
                0.0,
                seed=self.seed,
                source=self.key_source,
                server_round=server_round,
                own=secagg.private_key(self.seed, int(user), self.key_source),
                helper_public=helper,
            )
            plain = np.zeros(table.shape)
            plain[items] = table[items] + change
            seen = bounded_client.share_rows(bounds, report)
            for observer in observers:
                observer(int(user), server_round, seen, table, plain)

    def show_views(self, uploads, upload_round, rows, values, encode) -> None:
        """Each wanted user's faithful-mode view to the observers that want it."""
        server_round = upload_round.server_round
        everyone = participants(self.seed, server_round, self.num_users, self.fraction_train)
        for j, (user, lo, hi) in enumerate(uploads.blocks()):
            observers = secagg.wanted(user, server_round)
            if not observers:
                continue
            own = {name: value[j : j + 1] for name, value in values.items()}
            items = uploads.items[lo:hi]
            alone = encode(items, rows[lo:hi], own, num_users=1, num_samples=0, loss_sum=0.0)
            view = secagg.faithful_view(
                self.seed, self.key_source, server_round, user, everyone, alone
            )
            shape = upload_round.table.shape
            seen, plain = vector_rows(view, shape), vector_rows(alone, shape)
            for observer in observers:
                observer(user, server_round, seen, upload_round.table, plain)


class SecureDecode(ServerStage):
    """The round's sum (:class:`~fedrec_flwr.stages.SecureSum`) decoded into one
    upload (partition -1) with the round's loss and sample sums; nothing when it does not
    decode (the round is void: logged)."""

    name = "secure-aggregation"
    masked = True

    def decode(self, uploads: list[NodeUpload], shapes: ModelShapes) -> list[NodeUpload]:
        layout = secagg.Layout.of(shapes.num_items, shapes.row_dim, shapes.dense)
        out = []
        for entry in uploads:
            if not isinstance(entry.upload, SecureSum):
                out.append(entry)
                continue
            try:
                masked = entry.upload
                aggregate = secagg.decode(
                    layout, masked.total, masked.num_users, masked.total_users
                )
            except secagg.SecureAggregationError as error:
                server_round = entry.upload.server_round
                LOG.warning("round %d: secure aggregation void: %s", server_round, error)
                continue
            metrics = {"loss-sum": aggregate.loss_sum, "num-samples": aggregate.num_samples}
            out.append(NodeUpload(entry.partition_id, aggregate.upload, metrics))
        return out


def secure_enabled(config: RunGroups) -> bool:
    return config.group(secagg.SecAggKeys).secure_aggregation


def decoding(config: RunGroups, method: Method, num_items: int) -> SecureDecode:
    return SecureDecode()


#: Secure aggregation: the server learns each round's sum of the nodes' uploads only.
PLUGIN = Plugin(
    name="secure-aggregation",
    paper="Bonawitz et al., CCS 2017; SecAgg+, Bell et al., CCS 2020 (dropouts)",
    enabled=secure_enabled,
    node=SecureEncoding.of,
    server=decoding,
    keys=(secagg.SecAggKeys, BoundedKeys),
)


def vector_rows(vector: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """The item rows of a secure-aggregation vector read as plain fixed point."""
    rows = secagg.signed(vector)[: shape[0] * shape[1]].reshape(shape)
    return rows.astype(np.float64) * 2.0**-secagg.FRACTION_BITS


def _rowless(uploads: Uploads, row_dim: int, **upload: Any) -> TrainResult:
    """A node's result without rows in the clear: its users', samples' and loss's totals
    and ``upload`` (the masked vector, or each user's changes to prove)."""
    empty = np.empty(0, dtype=np.int64)
    return TrainResult(
        item_ids=empty,
        row_sums=np.empty((0, row_dim), dtype=np.float32),
        row_counts=empty,
        num_users=len(uploads.users),
        num_samples=uploads.num_samples,
        loss_sum=uploads.loss_sum,
        **upload,
    )
