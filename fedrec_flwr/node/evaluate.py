"""A node's evaluation: its users' ranks under the run's protocol, as metric sums and per-user
values, on all users or the round's ``eval-users`` sample, and the effective rank of the rows
a seeded sample of users scores with (:class:`NodeEvaluation`, mixed into
:class:`fedrec_flwr.node.runtime.NodeRuntime`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedrec_flwr.evaluation import metric_terms, sampled_metric_terms, stacked
from fedrec_flwr.methods.base import Method
from fedrec_flwr.methods.capabilities import eval_chunk
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node.losses import user_losses
from fedrec_flwr.node.scoring import held_items, user_rows
from fedrec_flwr.node.state import NodeState
from fedrec_flwr.partition import eval_sample
from fedrec_flwr.sampling import is_member
from fedrec_flwr.spectrum import effective_ranks, erank_users

if TYPE_CHECKING:
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.data.prepared import PreparedData
    from fedrec_flwr.methods import Method
    from fedrec_flwr.node.protocols import EvalProtocol

#: Users evaluated at once where the protocol ranks them by the fast exact path.
FAST_CHUNK = 4096


class NodeEvaluation:
    """Evaluation of a node's users. The runtime provides ``config``, ``prepared``,
    ``method``, ``protocol``, ``users``, ``partition_id``, ``num_partitions``, ``device`` and
    ``positions_of``."""

    config: RunConfig
    prepared: PreparedData
    method: Method
    protocol: EvalProtocol
    users: np.ndarray
    partition_id: int
    num_partitions: int
    device: torch.device
    positions_of: Callable[[np.ndarray], np.ndarray]

    @torch.no_grad()
    def evaluate(
        self,
        state: NodeState,
        item_ids: np.ndarray | None,
        item_rows: np.ndarray,
        dense: dict[str, np.ndarray] | None = None,
        positions: np.ndarray | None = None,
    ) -> dict[str, float]:
        """Metric sums over this node's users (those at ``positions``; None = all):
        ``val-hr@10``, ..., ``test-mrr`` (and under ``strict`` ``val-s100-hr@10``, ...,
        ``test-s100-ndcg@10``), ``num-users``."""
        return self.evaluate_users(state, item_ids, item_rows, dense, positions)[0]

    @torch.no_grad()
    def evaluate_users(
        self,
        state: NodeState,
        item_ids: np.ndarray | None,
        item_rows: np.ndarray,
        dense: dict[str, np.ndarray] | None = None,
        positions: np.ndarray | None = None,
    ) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
        """:meth:`evaluate`'s sums, the evaluated users' global ids (int64 [a]) and their
        per-user values (float64 [a, 2 * metrics]: the ``val-*`` metrics, then the ``test-*``
        ones, each in ``reported_metrics`` order, whose column sums are the sums)."""
        protocol = self.protocol
        totals = {f"{split}-{name}": 0.0 for split in ("val", "test") for name in protocol.metrics}
        per_user = []
        matrices: list[torch.Tensor] = []  # what each measured user's erank is taken of
        evaluated = np.arange(len(self.users)) if positions is None else positions
        step = chunk = eval_chunk(self.method)
        if len(evaluated) and protocol.fast_full_ranking(
            self.method, self._eval_params(state, evaluated[:1], dense or {})
        ):  # exact ranks from blocks of a matrix product: larger chunks, bounded memory
            chunk = -(-FAST_CHUNK // step) * step
        erank_positions = self.erank_positions  # the seeded sample, drawn once per call
        for lo in range(0, len(evaluated), chunk):
            positions = evaluated[lo : lo + chunk]
            params = self._eval_params(state, positions, dense or {})
            ranks = protocol.ranks(
                self.method,
                params,
                state.personal,
                positions,
                self.users[positions],
                item_ids,
                item_rows,
                state.private_rows,
            )
            terms = self._terms(ranks)  # each user's values, once per chunk
            per_user.append(np.concatenate([stacked(t, len(positions)) for t in terms], axis=1))
            for part in range(0, len(positions), step):  # the sums: eval_chunk users at a time
                self._summed(terms, ranks.exposed, slice(part, part + step), totals)
                # the generalization gap (fedrec_flwr.node.losses)
                if self.config.evaluation.eval_loss:
                    block = slice(part, part + step)
                    self._add_losses(totals, state, params, positions, block, item_ids, item_rows)
            measured = np.flatnonzero(np.isin(positions, erank_positions))
            matrices += self._personal_matrices(
                state, params, positions, measured, item_ids, item_rows
            )
        for erank in effective_ranks(matrices):  # in user order, as measured
            totals["erank-personal-sum"] = totals.get("erank-personal-sum", 0.0) + erank
            totals["erank-personal-users"] = totals.get("erank-personal-users", 0.0) + 1
        totals["num-users"] = float(len(evaluated))
        width = 2 * len(protocol.metrics)
        values = np.concatenate(per_user) if per_user else np.empty((0, width), np.float64)
        return totals, np.asarray(self.users[evaluated], dtype=np.int64), values

    def _add_losses(self, totals, state, params, positions, block, item_ids, item_rows) -> None:
        fit, val = user_losses(
            self.method,
            self.prepared,
            self.config.training.seed,
            self.config.training.num_negatives,
            {name: value[block] for name, value in params.items()},
            state.personal,
            state.private_rows,
            positions[block],
            self.users[positions[block]],
            item_ids,
            item_rows,
        )
        totals["fit-loss"] = totals.get("fit-loss", 0.0) + float(fit.sum())
        totals["val-loss"] = totals.get("val-loss", 0.0) + float(val.sum())

    def _terms(self, ranks) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The metric terms of every user of ``ranks`` (float64 [users] per metric): the
        validation split's, then the test split's, each in ``reported_metrics`` order."""
        out = []
        for full, sampled in ((ranks.val, ranks.sampled_val), (ranks.test, ranks.sampled_test)):
            terms = metric_terms(full, self.protocol.name)
            if sampled is not None:  # strict: the sampled-100 metrics of the same scores
                terms |= sampled_metric_terms(sampled)
            out.append(terms)
        return out[0], out[1]

    def _summed(self, terms, exposed, part: slice, totals: dict[str, float]) -> None:
        """Add the metric terms (:meth:`_terms`) of the users at ``part`` to ``totals`` (a
        float64 sum per metric and block of users, in order)."""
        for split, split_terms in zip(("val", "test"), terms, strict=True):
            for name, values in split_terms.items():
                totals[f"{split}-{name}"] += float(values[part].sum())
        if exposed is not None:  # a malicious attack's target items
            totals["target-exposed"] = totals.get("target-exposed", 0.0) + float(
                exposed[part].sum()
            )

    def eval_positions(self, server_round: int, sample: int) -> np.ndarray | None:
        """Positions of this node's users in the round's evaluation sample of ``sample``
        users (``eval-users``; None = all users)."""
        if sample <= 0 or sample >= self.prepared.num_users:
            return None
        chosen = eval_sample(
            self.config.training.seed, server_round, self.prepared.num_users, sample
        )
        return self.positions_of(chosen[chosen % self.num_partitions == self.partition_id])

    @property
    def erank_positions(self) -> np.ndarray:
        """Positions of this node's users in the seeded sample whose personal rows are
        measured (none if the method keeps no personal or private rows)."""
        if not (layout(self.method).personal_rows or layout(self.method).private_rows):
            return np.empty(0, dtype=np.int64)
        sample = erank_users(self.config.training.seed, self.prepared.num_users)
        return self.positions_of(sample[sample % self.num_partitions == self.partition_id])

    def _personal_erank(self, state, params, positions, j, item_ids, item_rows) -> float | None:
        """Effective rank of what user ``positions[j]``'s score function reads for the items
        it holds personal or private rows of (among the rows evaluation received)."""
        reps = self._personal_reps(state, params, positions, j, item_ids, item_rows)
        return None if reps is None else effective_ranks([reps])[0]

    def _personal_matrices(
        self, state, params, positions, measured, item_ids, item_rows
    ) -> list[torch.Tensor]:
        """:meth:`_personal_reps` of each user at ``positions[j]``, ``j`` in ``measured``,
        those that hold two items or more, in order. A method that reads its personal rows
        alone, as they are: the rows of every user at once."""
        plain = layout(self.method)
        own_rows = not (state.private_rows or plain.private_rows or plain.global_rows)
        if not own_rows or type(self.method).represent is not Method.represent:
            reps = (
                self._personal_reps(state, params, positions, j, item_ids, item_rows)
                for j in measured
            )
            return [r for r in reps if r is not None]
        at = np.asarray(positions, dtype=np.int64)[measured]
        if not len(at):
            return []
        store = state.personal
        storage = store.storage_of(at)
        counts = np.asarray(store.counts(), np.int64)[at]
        items = np.asarray(store.take_items(storage), np.int64)
        owner = np.repeat(np.arange(len(at)), counts)
        if item_ids is not None:  # among the rows evaluation received (ids sorted)
            received = is_member(items, item_ids)
            storage, owner = storage[received], owner[received]
        rows = np.asarray(store.take_rows(storage), np.float32)
        kept = np.bincount(owner, minlength=len(at))
        blocks = np.split(rows, np.cumsum(kept)[:-1])
        return [
            torch.from_numpy(b).to(torch.float64)
            for b, n in zip(blocks, kept, strict=True)
            if n >= 2
        ]

    def _personal_reps(self, state, params, positions, j, item_ids, item_rows):
        """What :meth:`_personal_erank` measures (float64 on the CPU), None below two
        items."""
        position = int(positions[j])
        items = held_items(state.personal, state.private_rows, position)
        received = is_member(items, item_ids) if item_ids is not None else None  # ids sorted
        if received is not None:
            items = items[received]
        if len(items) < 2:
            return None
        user = {n: v[j : j + 1] for n, v in params.items()}
        plain = layout(self.method)
        if not (state.private_rows or plain.private_rows or plain.global_rows):
            # it holds a personal row of each item and reads nothing else: those rows
            held = state.personal.of(position)[1]
            rows = held.copy() if received is None else held[received]
            reps = self.method.represent(user, torch.from_numpy(rows[None]).to(self.device))[0]
            return torch.as_tensor(reps.cpu(), dtype=torch.float64)
        rows, extras = user_rows(
            self.method,
            state.personal,
            state.private_rows,
            positions[j : j + 1],
            items[None],
            item_ids,
            item_rows,
        )
        user.update({n: torch.from_numpy(v).to(self.device) for n, v in extras.items()})
        reps = self.method.represent(user, torch.from_numpy(rows).to(self.device))[0]
        return torch.as_tensor(reps.cpu(), dtype=torch.float64)

    def _eval_params(
        self, state: NodeState, positions: np.ndarray, dense: dict[str, np.ndarray]
    ) -> dict[str, torch.Tensor]:
        index = torch.from_numpy(positions)
        params = {k: v[index].to(self.device) for k, v in state.private.items()}
        for name in layout(self.method).shared_dense:
            value = torch.from_numpy(np.asarray(dense[name], np.float32)).to(self.device)
            params[name] = value.unsqueeze(0).expand(len(positions), *value.shape)
        return params
