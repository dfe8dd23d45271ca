"""One node's work, without Flower: its users, their private state, train and evaluate.

Node ``p`` of ``N`` holds the users ``u`` with ``u mod N == p``: ``N`` = number of users is one
user per node (the faithful mode), a smaller ``N`` packs users (the fast mode). Every draw
is keyed by (seed, user, round), and the users of a node are trained as one batch of
disjoint per-user parameters, so the metrics do not depend on ``N``.

What leaves a node is decided by the method's parameter roles: the sums over its users of
their tuned item rows (ids, counts) and of their tuned shared-dense parameters, the ids of the
rows it needs next, and metric sums (:mod:`fedrec_flwr.node.upload`). What stays
(:class:`~fedrec_flwr.node.state.NodeState`): every private parameter and the personal-row
store. Evaluation: :mod:`fedrec_flwr.node.evaluate`.
"""

from __future__ import annotations

import numpy as np
import torch

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import PreparedData
from fedrec_flwr.methods import ROWS, Method, build_method
from fedrec_flwr.node import malicious
from fedrec_flwr.node.accelerator import torch_device
from fedrec_flwr.node.dense_decay import DenseDecay
from fedrec_flwr.node.evaluate import NodeEvaluation
from fedrec_flwr.node.layered import LayeredRows
from fedrec_flwr.node.personal import KEY_STRIDE, PersonalRows
from fedrec_flwr.node.protocols import build_protocol, lookup_rows
from fedrec_flwr.node.samples import (
    RoundDraws,
    RoundSamples,
    build_round_samples,
    distinct_items,
    max_samples_per_user,
    round_draws,
)
from fedrec_flwr.node.state import NodeState
from fedrec_flwr.node.statistics import statistics_upload
from fedrec_flwr.node.training import local_update
from fedrec_flwr.node.upload import SecureUploads, TrainResult, summed_upload
from fedrec_flwr.partition import participants, users_of_partition
from fedrec_flwr.privacy import uploads

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
        self.protocol = build_protocol(config.protocol, prepared, config.seed)
        self.protocol.target_items = malicious.exposure_targets(prepared, config)
        self.protocol.scores_train_rows = config.eval_loss
        self.device = torch_device(config)
        self.max_samples = max_samples_per_user(prepared, config)
        self._planned: tuple[int, RoundDraws | None] = (0, None)  # (round, its draws)
        self._selected: tuple[int, np.ndarray] = (-1, self.users[:0])
        self.secure = SecureUploads(config, prepared) if config.secure_aggregation else None

    # ------------------------------------------------------------------ state
    def initial_state(self) -> NodeState:
        """Fresh private parameters (keyed by (seed, user)) and no personal rows.

        Dense parameters that the method keeps private (dual personalisation) start, for
        every user, from the method's one dense initialisation.
        """
        private = self.method.init_private_from(self.users, self.prepared)
        dense = self.method.init_dense()
        for name in self.method.kept_private_names():
            if name in dense:
                value = torch.from_numpy(dense[name])
                private[name] = value.unsqueeze(0).repeat(len(self.users), *[1] * value.dim())
        empty = PersonalRows.empty(len(self.users), self.method.row_dim)
        return NodeState(private, empty, {name: empty for name in self.method.private_row_names()})

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
        if self.method.uploads_statistics:  # no rows: the upload is the users' items
            return np.empty(0, dtype=np.int64)
        draws = round_draws(self.prepared, self.config, selected, server_round)
        self._planned = (server_round, draws)
        if not len(selected):
            return np.empty(0, dtype=np.int64)
        if self.config.decoy_ratio <= 0 and not malicious.attack_active(self.config):
            return distinct_items(draws.items, self.prepared.num_items)[0]  # no user adds any
        planned = {int(u): pair for u, pair in zip(selected, draws.pairs(), strict=True)}
        requested = [
            uploads.with_decoys(self.prepared, self.config, user, items)
            for user, (items, _) in planned.items()
        ]
        requested = malicious.with_attack_rows(self.prepared, self.config, planned, requested)
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
            self.config.seed, server_round, self.prepared.num_users, self.config.fraction_train
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
        and the global shared-dense parameters ``dense`` (``support``: the items of an
        item-item method's co-occurrence round, :mod:`fedrec_flwr.node.statistics`)."""
        positions = self.positions_of(users)
        if self.method.uploads_statistics:  # no training: the users' co-occurrences
            return statistics_upload(self, users, server_round, support), state
        draws = self._planned_draws(server_round)
        samples = build_round_samples(
            self.prepared, self.config, users, positions, server_round, draws=draws
        )
        params = self._round_params(state, positions, dense or {})
        received = lookup_rows(samples.row_items, item_ids, item_rows)
        attack = malicious.attack_active(self.config)
        per_user = uploads.per_user_uploads(self.config) or attack
        sent = received.copy() if per_user else received  # the global rows, for LDP
        for name in self.method.global_row_names():  # the frozen global view
            params[name] = torch.from_numpy(received.copy()).to(self.device)
        if self.method.train_from_personal:  # the local rows persist
            local = state.personal.gathered(samples.row_positions(), samples.row_items)
            held = np.isin(
                samples.row_positions() * KEY_STRIDE + samples.row_items,
                state.personal.keys(),
            )
            received = np.where(held[:, None], local, received)
        params[ROWS] = torch.from_numpy(received).to(self.device)
        decay = DenseDecay.of(self.config, received)  # weight-decay-rows = "all"
        for name in self.method.private_row_names():  # stored: zero for rows never trained
            rows = state.private_rows[name].gathered(samples.row_positions(), samples.row_items)
            rows = self.method.private_rows_in(name, rows, samples.row_items)
            params[name] = torch.from_numpy(rows).to(self.device)
        loss_sum, num_samples = local_update(
            self.method,
            samples,
            params,
            self.config,
            server_round,
            self.max_samples,
            decay.logs if decay else None,
        )
        tuned = params[ROWS].cpu().numpy()
        threshold = self.method.zero_threshold
        if threshold is not None:  # rows at or below the threshold count (and travel) as zero
            tuned[np.abs(tuned).max(axis=1, initial=0.0) <= threshold] = 0.0
        up_items, up_rows = samples.row_items, tuned
        if decay:  # the rows not held: their factor (fedrec_flwr/node/dense_decay.py)
            up_rows, shrink = decay.upload(tuned, samples.row_offsets)
        offsets, sent_rows = samples.row_offsets, sent
        if attack:  # the malicious users' uploads (simulation: fedrec_flwr/node/malicious.py)
            offsets, up_items, up_rows, sent_rows = malicious.poisoned_rows(
                self.prepared,
                self.config,
                samples.users,
                samples.row_offsets,
                samples.row_items,
                tuned,
                sent,
                lambda items: lookup_rows(items, item_ids, item_rows),
            )
        if per_user:  # each user's upload on its own: LDP, decoys (fedrec_flwr/privacy)
            up_items, up_rows = uploads.user_uploads(
                self.prepared,
                self.config,
                server_round,
                samples.users,
                offsets,
                up_items,
                up_rows,
                sent_rows,
                lambda items: lookup_rows(items, item_ids, item_rows),
            )
        result = summed_upload(
            up_items,
            up_rows,
            self.prepared.num_items,
            {name: params[name] for name in self.method.shared_dense_names()},
            num_users=len(users),
            num_samples=num_samples,
            loss_sum=loss_sum,
            sparse=threshold is not None,
            secure=self.secure.at(server_round, samples.users, offsets, item_rows)
            if self.secure
            else None,
        )
        private = {k: v.clone() for k, v in state.private.items()}
        index = torch.from_numpy(positions)
        for name in private:
            private[name][index] = params[name].cpu()
        personal = state.personal
        if self.method.personal_rows:
            personal = kept_rows(self, personal, samples, tuned)
        private_rows = {  # rows at or below the zero threshold are zero: not kept
            name: store.merged(
                samples.row_positions(),
                samples.row_items,
                self.method.private_rows_out(name, params[name].cpu().numpy(), samples.row_items),
                zero_at=threshold,
            )
            for name, store in state.private_rows.items()
        }
        result = DenseDecay.finish(result, shrink) if decay else result
        return result, NodeState(private, personal, private_rows)

    def _round_params(
        self, state: NodeState, positions: np.ndarray, dense: dict[str, np.ndarray]
    ) -> dict[str, torch.Tensor]:
        """The round users' tensors: their private parameters, and a copy per user of the
        global shared-dense parameters."""
        index = torch.from_numpy(positions)
        params = {k: v[index].to(self.device) for k, v in state.private.items()}
        for name in self.method.shared_dense_names():
            if name not in dense:
                raise RuntimeError(
                    f"the server sent no '{name}' (shared-dense parameter of "
                    f"{self.method.name}): do server and node run the same method?"
                )
            value = torch.from_numpy(np.asarray(dense[name], np.float32)).to(self.device)
            params[name] = value.unsqueeze(0).repeat(len(positions), *[1] * value.dim())
        return params


def kept_rows(
    runtime: NodeRuntime,
    personal: PersonalRows | LayeredRows,
    samples: RoundSamples,
    tuned: np.ndarray,
) -> PersonalRows | LayeredRows:
    """The trained users' personal rows become this round's tuned rows (filtered by the
    protocol: under ``paper`` only rows among the user's candidates are kept), added as
    one segment of a layered store: the other users' rows are not copied."""
    if runtime.method.train_from_personal:  # local rows persist: keep every trained row
        return personal.merged(samples.row_positions(), samples.row_items, tuned)
    keep = runtime.protocol.keep_personal_rows(
        samples.users, samples.row_offsets, samples.row_items
    )
    if runtime.config.keep_personal_rows == "positives":  # rows of sampled negatives go
        keep &= samples.positive_row_mask()
    positions, items = samples.row_positions(), samples.row_items
    if not keep.all():
        positions, items, tuned = positions[keep], items[keep], tuned[keep]
    return LayeredRows.of_store(personal).replaced(samples.positions, positions, items, tuned)
