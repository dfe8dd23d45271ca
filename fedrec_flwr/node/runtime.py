"""One node's work, without Flower: its users, their private state, train and evaluate.

Node ``p`` of ``N`` holds the users ``u`` with ``u mod N == p``: ``N`` = number of users is one
user per node (the faithful mode), a smaller ``N`` packs users (the fast mode). Every draw
is keyed by (seed, user, round), and the users of a node are trained as one batch of
disjoint per-user parameters, so the metrics do not depend on ``N``.

What leaves a node is decided by the method's parameter roles: its users' tuned item rows
and tuned shared-dense parameters, passed through the node's upload chain (the stages of the
plug-ins the run enables, :mod:`fedrec_flwr.stages`, :func:`~fedrec_flwr.node.upload.upload_chain`:
by default their sums, ids and counts), the ids of the rows it needs next (which the chain's
stages may add to), and metric sums. What stays
(:class:`~fedrec_flwr.node.state.NodeState`): every private parameter and the personal-row
store. Evaluation: :mod:`fedrec_flwr.node.evaluate`.
"""

from __future__ import annotations

import numpy as np
import torch

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import PreparedData
from fedrec_flwr.methods import ROWS, Method, build_method, capabilities
from fedrec_flwr.methods.capabilities import zero_threshold
from fedrec_flwr.methods.itemitem import uploads_statistics
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node import malicious
from fedrec_flwr.node.accelerator import torch_device
from fedrec_flwr.node.dense_decay import DenseDecay
from fedrec_flwr.node.evaluate import NodeEvaluation
from fedrec_flwr.node.host_memory import tune_host_memory
from fedrec_flwr.node.layered import LayeredRows
from fedrec_flwr.node.personal import PersonalRows, whole_rows
from fedrec_flwr.node.protocols import build_protocol, lookup_rows
from fedrec_flwr.node.round_params import (
    host_array,
    host_copy,
    round_params,
    round_rows,
    zero_small_rows,
)
from fedrec_flwr.node.samples import (
    RoundDraws,
    RoundSamples,
    build_round_samples,
    distinct_items,
    round_draws,
)
from fedrec_flwr.node.state import NodeState
from fedrec_flwr.node.statistics import statistics_upload
from fedrec_flwr.node.training import local_update
from fedrec_flwr.node.upload import TrainResult, upload_chain
from fedrec_flwr.partition import participants, users_of_partition
from fedrec_flwr.stages import UploadRound, Uploads

__all__ = ["NodeRuntime", "NodeState", "TrainResult"]


class NodeRuntime(NodeEvaluation):
    """The users of partition ``partition_id`` of ``num_partitions`` and their method."""

    def __init__(
        self,
        config: RunConfig,
        prepared: PreparedData,
        partition_id: int,
        num_partitions: int,
    ) -> None:
        if not 0 <= partition_id < num_partitions:
            raise ValueError(
                f"partition-id={partition_id} must lie in [0, num-partitions={num_partitions})."
            )
        self.config = config
        self.prepared = prepared
        self.partition_id = partition_id
        self.num_partitions = num_partitions
        self.users = users_of_partition(partition_id, num_partitions, prepared.num_users)
        self.method: Method = build_method(config, prepared.num_items)
        self.protocol = build_protocol(config.training.protocol, prepared, config.training.seed)
        attack = malicious.Attack.of(config)
        self.protocol.target_items = malicious.exposure_targets(prepared, attack)
        self.protocol.scores_train_rows = config.evaluation.eval_loss
        self.device = torch_device(config)
        tune_host_memory()  # freed blocks reused, fresh pages without huge-page compaction
        self._planned: tuple[int, RoundDraws | None] = (0, None)  # (round, its draws)
        self._selected: tuple[int, np.ndarray] = (-1, self.users[:0])
        self.uploads = upload_chain(config, prepared)  # request, transform, finish

    # ------------------------------------------------------------------ state
    def initial_state(self) -> NodeState:
        """Fresh private parameters (keyed by (seed, user)) and no personal rows.

        Dense parameters that the method keeps private (dual personalisation) start, for
        every user, from the method's one dense initialisation.
        """
        private = capabilities.init_private_from(self.method, self.users, self.prepared)
        dense = self.method.init_dense()
        for name in layout(self.method).kept_private:
            if name in dense:
                value = torch.from_numpy(dense[name])
                private[name] = value.unsqueeze(0).repeat(len(self.users), *[1] * value.dim())
        empty = PersonalRows.empty(len(self.users), self.method.row_dim)
        return NodeState(private, empty, {name: empty for name in layout(self.method).private_rows})

    def positions_of(self, users: np.ndarray) -> np.ndarray:
        """Positions in this node's user list of global user ids (which must belong here)."""
        users = np.asarray(users, dtype=np.int64)
        if np.any(users % self.num_partitions != self.partition_id) or np.any(
            users >= self.prepared.num_users
        ):
            raise ValueError(
                f"node {self.partition_id}/{self.num_partitions} was asked about users it does "
                "not hold; check that every node has the same num-partitions."
            )
        return (users - self.partition_id) // self.num_partitions

    # --------------------------------------------------------------- requests
    def eval_items(self) -> np.ndarray | None:
        """Item rows evaluation needs (sorted), or None for all of them (full ranking)."""
        return self.protocol.eval_items(self.users)

    def train_request(self, server_round: int) -> np.ndarray:
        """Items this node's participants of ``server_round`` will train (sorted).

        The draws are kept for that round's training (when this process runs it).
        """
        selected = self.selected(server_round)
        if uploads_statistics(self.method):  # no rows: the upload is the users' items
            return np.empty(0, dtype=np.int64)
        draws = round_draws(self.prepared, self.config, selected, server_round)
        self._planned = (server_round, draws)
        if not len(selected):
            return np.empty(0, dtype=np.int64)
        if not self.uploads.adds_requests:
            return distinct_items(draws.items, self.prepared.num_items)[0]  # no user adds any
        requested = [
            self.uploads.request(int(user), items)
            for user, (items, _) in zip(selected, draws.pairs(), strict=True)
        ]
        return distinct_items(np.concatenate(requested), self.prepared.num_items)[0]

    def _planned_draws(self, server_round: int) -> RoundDraws | None:
        """The draws :meth:`train_request` made for ``server_round`` (once), else None."""
        planned_round, draws = self._planned
        self._planned = (0, None)
        return draws if planned_round == server_round else None

    def trains_in(self, server_round: int) -> bool:
        """Does any user of this node train in ``server_round``?"""
        return len(self.selected(server_round)) > 0

    def participants(self, server_round: int) -> np.ndarray:
        return participants(
            self.config.training.seed,
            server_round,
            self.prepared.num_users,
            self.config.training.fraction_train,
        )

    def selected(self, server_round: int) -> np.ndarray:
        """This node's users that train in ``server_round`` (sorted; the latest round's are
        kept: a message asks for them two or three times)."""
        if self._selected[0] != server_round:
            chosen = self.participants(server_round)  # sorted, distinct
            users = self.users[:0]
            if len(chosen):
                where = np.minimum(np.searchsorted(chosen, self.users), len(chosen) - 1)
                users = self.users[chosen[where] == self.users]
            self._selected = (server_round, users)
        return self._selected[1]

    # ------------------------------------------------------------------ train
    def train(
        self,
        state: NodeState,
        server_round: int,
        users: np.ndarray,
        item_ids: np.ndarray | None,
        item_rows: np.ndarray,
        dense: dict[str, np.ndarray] | None = None,
        support: np.ndarray | None = None,
    ) -> tuple[TrainResult, NodeState]:
        """Train ``users`` starting from the global rows (``item_ids`` None = full table)
        and the global shared-dense parameters ``dense``; their uploads go through the
        node's upload chain (``support``: the items of an item-item method's co-occurrence
        round, :mod:`fedrec_flwr.node.statistics`)."""
        positions = self.positions_of(users)
        if uploads_statistics(self.method):  # no training: the users' co-occurrences
            return statistics_upload(self, users, server_round, support), state
        draws = self._planned_draws(server_round)
        samples = build_round_samples(
            self.prepared, self.config, users, positions, server_round, draws=draws
        )
        received = round_rows(samples.row_items, item_ids, item_rows, self.device)
        sent = host_copy(received) if self.uploads.reads_sent else None
        params = round_params(
            self.method, state, positions, dense or {}, samples, received, self.device
        )
        decay = DenseDecay.of(self.config, params[ROWS])  # weight-decay-rows
        logs = decay.logs if decay else None
        loss, count = local_update(
            self.method, samples, params, self.config, server_round, row_decay=logs
        )
        tuned = zero_small_rows(params[ROWS], zero_threshold(self.method))
        shared = {name: params[name] for name in layout(self.method).shared_dense}
        uploads = Uploads(
            samples.users, samples.row_offsets, samples.row_items, tuned, sent, shared, count, loss
        )
        chain = self.uploads.around(decay) if decay else self.uploads
        result = chain(uploads, self._upload_round(server_round, item_ids, item_rows))
        return result, self._next_state(state, positions, samples, params, tuned)

    def _upload_round(
        self,
        server_round: int,
        item_ids: np.ndarray | None,
        item_rows: np.ndarray,
    ) -> UploadRound:
        """What the upload chain knows of the round: the rows as received."""
        return UploadRound(
            server_round=server_round,
            num_items=self.prepared.num_items,
            lookup=lambda items: lookup_rows(items, item_ids, item_rows),
            table=item_rows,
            sparse=zero_threshold(self.method) is not None,
        )

    def _next_state(
        self,
        state: NodeState,
        positions: np.ndarray,
        samples: RoundSamples,
        params: dict[str, torch.Tensor],
        tuned: torch.Tensor,
    ) -> NodeState:
        """The node's state after the round: the trained users' private parameters, their
        personal rows (this round's tuned rows) and private rows (those at or below the zero
        threshold are zero: not kept)."""
        private = {k: v.clone() for k, v in state.private.items()}
        index = torch.from_numpy(positions)
        for name in private:
            private[name][index] = params[name].cpu()
        personal = state.personal
        if layout(self.method).personal_rows:
            personal = self._kept_rows(personal, samples, host_array(tuned))
        private_rows = {
            name: store.merged(
                samples.row_positions(),
                samples.row_items,
                capabilities.private_rows_out(
                    self.method, name, host_array(params[name]), samples.row_items
                ),
                zero_at=zero_threshold(self.method),
            )
            for name, store in state.private_rows.items()
        }
        return NodeState(private, personal, private_rows)

    def _kept_rows(
        self, personal: PersonalRows | LayeredRows, samples: RoundSamples, tuned: np.ndarray
    ) -> PersonalRows | LayeredRows:
        """The trained users' personal rows become this round's tuned rows (filtered by the
        protocol: under ``paper`` only rows among the user's candidates are kept), added as
        one segment of a layered store: the other users' rows are not copied."""
        if layout(self.method).train_from_personal:  # local rows persist: keep every trained row
            return personal.merged(samples.row_positions(), samples.row_items, tuned)
        keep = self.protocol.keep_personal_rows(
            samples.users, samples.row_offsets, samples.row_items
        )
        if self.config.evaluation.keep_personal_rows == "positives":  # rows of sampled negatives go
            keep &= samples.positive_row_mask()
        positions, items = samples.row_positions(), samples.row_items
        if not keep.all():  # the kept rows copied whole (one copy per row)
            positions, items = positions[keep], items[keep]
            tuned = whole_rows(tuned)[keep].view(np.float32).reshape(-1, tuned.shape[1])
        return LayeredRows.of_store(personal).replaced(samples.positions, positions, items, tuned)
