"""One node's work, without Flower: its users, their private state, train and evaluate.

Node ``p`` of ``N`` holds the users ``u`` with ``u mod N == p``: ``N`` = number of users is one
user per node (the faithful mode), a smaller ``N`` packs users (the fast mode). Every draw
is keyed by (seed, user, round), and the users of a node are trained as one batch of
disjoint per-user parameters, so the metrics do not depend on ``N``.

What leaves a node: the sums of its users' tuned item rows with their ids and counts, the ids
of the rows it needs next, and metric sums. What stays (``NodeState``): every private
parameter, and the personal item rows of methods with dual personalisation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import EVAL_NEGATIVES_PER_SPLIT, PreparedData
from fedrec_flwr.evaluation import metric_names, metrics_from_ranks, ranks_from_scores
from fedrec_flwr.methods import Method, build_method
from fedrec_flwr.partition import participants, users_of_partition
from fedrec_flwr.training import build_round_samples, local_update, user_round_items

EVAL_CHUNK = 256  # users scored at once (bounds memory of the full-ranking score matrix)


@dataclass
class NodeState:
    """Private state of a node's users, indexed by position in the node's user list."""

    private: dict[str, torch.Tensor]
    personal_indptr: np.ndarray  # [n + 1]: user j's personal rows are [indptr[j], indptr[j+1])
    personal_items: np.ndarray  # [nnz] sorted within each user
    personal_rows: np.ndarray  # [nnz, d] float32

    PREFIX = "private/"

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Flat numpy arrays (for ``context.state``)."""
        arrays = {self.PREFIX + k: v.cpu().numpy() for k, v in self.private.items()}
        arrays.update(
            {
                "personal-indptr": self.personal_indptr,
                "personal-items": self.personal_items,
                "personal-rows": self.personal_rows,
            }
        )
        return arrays

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> NodeState:
        """Inverse of :meth:`to_arrays`."""
        private = {
            k[len(cls.PREFIX) :]: torch.from_numpy(np.array(v))
            for k, v in arrays.items()
            if k.startswith(cls.PREFIX)
        }
        return cls(
            private=private,
            personal_indptr=np.asarray(arrays["personal-indptr"]),
            personal_items=np.asarray(arrays["personal-items"]),
            personal_rows=np.asarray(arrays["personal-rows"]),
        )

    def personal(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        """(items, rows) of the user at ``position``."""
        lo, hi = self.personal_indptr[position], self.personal_indptr[position + 1]
        return self.personal_items[lo:hi], self.personal_rows[lo:hi]


@dataclass(frozen=True)
class TrainResult:
    """What a node uploads after training (and the metrics it reports)."""

    item_ids: np.ndarray  # sorted distinct items its users trained
    row_sums: np.ndarray  # [k, d]: sum over its users of their tuned rows
    row_counts: np.ndarray  # [k]: number of its users that trained each row
    num_users: int
    num_samples: int
    loss_sum: float


class NodeRuntime:
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
        self.device = torch.device(config.device)
        self._planned: tuple[int, dict] = (0, {})  # (round, user -> (items, labels))

    # ------------------------------------------------------------------ state
    def initial_state(self) -> NodeState:
        """Fresh private parameters (keyed by (seed, user)) and no personal rows."""
        return NodeState(
            private=self.method.init_private(self.users),
            personal_indptr=np.zeros(len(self.users) + 1, dtype=np.int64),
            personal_items=np.empty(0, dtype=np.int64),
            personal_rows=np.empty((0, self.config.embedding_dim), dtype=np.float32),
        )

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
    def eval_candidates(self, user: int) -> np.ndarray:
        """Paper protocol: the 200 candidates [validation item, 99 negs, test item, 99 negs]."""
        negatives = np.asarray(self.prepared.eval_negatives(self.config.seed)[user], np.int64)
        k = EVAL_NEGATIVES_PER_SPLIT
        return np.r_[
            self.prepared.valid_item[user],
            negatives[:k],
            self.prepared.test_item[user],
            negatives[k:],
        ]

    def eval_items(self) -> np.ndarray | None:
        """Item rows evaluation needs (sorted), or None for all of them (full ranking)."""
        if self.config.protocol != "paper":
            return None
        if len(self.users) == 0:
            return np.empty(0, dtype=np.int64)
        return np.unique(np.concatenate([self.eval_candidates(int(u)) for u in self.users]))

    def train_request(self, server_round: int) -> np.ndarray:
        """Items this node's participants of ``server_round`` will train (sorted).

        The draws are kept for that round's training (when this process runs it).
        """
        selected = np.intersect1d(self.users, self.participants(server_round))
        planned = {
            int(u): user_round_items(self.prepared, self.config, int(u), server_round)
            for u in selected
        }
        self._planned = (server_round, planned)
        if not planned:
            return np.empty(0, dtype=np.int64)
        return np.unique(np.concatenate([items for items, _ in planned.values()]))

    def _items_of(self, server_round: int):
        """The (items, labels) of a user in ``server_round``, reusing planned draws."""
        planned_round, planned = self._planned
        planned = planned if planned_round == server_round else {}
        self._planned = (0, {})

        def items_of(user: int) -> tuple[np.ndarray, np.ndarray]:
            if user in planned:
                return planned[user]
            return user_round_items(self.prepared, self.config, user, server_round)

        return items_of

    def trains_in(self, server_round: int) -> bool:
        """Does any user of this node train in ``server_round``?"""
        return bool(np.isin(self.users, self.participants(server_round)).any())

    def participants(self, server_round: int) -> np.ndarray:
        return participants(
            self.config.seed, server_round, self.prepared.num_users, self.config.fraction_train
        )

    # ------------------------------------------------------------------ train
    def train(
        self,
        state: NodeState,
        server_round: int,
        users: np.ndarray,
        item_ids: np.ndarray | None,
        item_rows: np.ndarray,
    ) -> tuple[TrainResult, NodeState]:
        """Train ``users`` starting from the global rows (``item_ids`` None = full table)."""
        positions = self.positions_of(users)
        samples = build_round_samples(
            self.prepared,
            self.config,
            users,
            positions,
            server_round,
            items_of=self._items_of(server_round),
        )
        rows = torch.from_numpy(_lookup_rows(samples.row_items, item_ids, item_rows)).to(
            self.device
        )
        private = {k: v.to(self.device) for k, v in state.private.items()}
        loss_sum, num_samples = local_update(
            self.method, samples, rows, private, self.config, server_round
        )
        tuned = rows.cpu().numpy()

        item_ids_up, inverse = np.unique(samples.row_items, return_inverse=True)
        sums = torch.zeros((len(item_ids_up), tuned.shape[1]), dtype=torch.float64)
        sums.index_add_(0, torch.from_numpy(inverse), torch.from_numpy(tuned).double())
        result = TrainResult(
            item_ids=item_ids_up,
            # One user: its float32 rows as they are; several: exact float64 sums, so the
            # server's aggregate does not depend on how users are packed into nodes.
            row_sums=tuned if len(users) == 1 else sums.numpy(),
            row_counts=np.bincount(inverse, minlength=len(item_ids_up)).astype(np.int64),
            num_users=len(users),
            num_samples=num_samples,
            loss_sum=loss_sum,
        )
        new_state = NodeState(
            private={k: v.cpu() for k, v in private.items()},
            personal_indptr=state.personal_indptr,
            personal_items=state.personal_items,
            personal_rows=state.personal_rows,
        )
        if self.method.personalised_rows:
            new_state = self._keep_personal_rows(new_state, samples, tuned)
        return result, new_state

    def _keep_personal_rows(self, state: NodeState, samples, tuned: np.ndarray) -> NodeState:
        """Replace the trained users' personal rows by this round's tuned rows.

        Under the paper protocol only rows among the user's evaluation candidates are kept
        (the only ones evaluation reads), which keeps the state small.
        """
        replaced = {int(position): j for j, position in enumerate(samples.positions)}
        items_parts, rows_parts, counts = [], [], []
        for position in range(len(self.users)):
            if position in replaced:
                j = replaced[position]
                lo, hi = samples.row_offsets[j], samples.row_offsets[j + 1]
                items, rows = samples.row_items[lo:hi], tuned[lo:hi]
                if self.config.protocol == "paper":
                    keep = np.isin(items, self.eval_candidates(int(self.users[position])))
                    items, rows = items[keep], rows[keep]
            else:
                items, rows = state.personal(position)
            items_parts.append(items)
            rows_parts.append(rows)
            counts.append(len(items))
        return NodeState(
            private=state.private,
            personal_indptr=np.r_[0, np.cumsum(counts)].astype(np.int64),
            personal_items=np.concatenate(items_parts).astype(np.int64),
            personal_rows=np.concatenate(rows_parts)
            .astype(np.float32)
            .reshape(-1, self.config.embedding_dim),
        )

    # --------------------------------------------------------------- evaluate
    @torch.no_grad()
    def evaluate(
        self, state: NodeState, item_ids: np.ndarray | None, item_rows: np.ndarray
    ) -> dict[str, float]:
        """Metric sums over this node's users: ``val-hr@10``, ..., ``test-mrr``, ``num-users``."""
        names = metric_names(self.config.protocol)
        totals = {f"{split}-{name}": 0.0 for split in ("val", "test") for name in names}
        for lo in range(0, len(self.users), EVAL_CHUNK):
            positions = np.arange(lo, min(lo + EVAL_CHUNK, len(self.users)))
            if self.config.protocol == "paper":
                val_ranks, test_ranks = self._paper_ranks(state, positions, item_ids, item_rows)
            else:
                val_ranks, test_ranks = self._strict_ranks(state, positions, item_rows)
            for split, ranks in (("val", val_ranks), ("test", test_ranks)):
                for name, value in metrics_from_ranks(ranks, self.config.protocol).items():
                    totals[f"{split}-{name}"] += value
        totals["num-users"] = float(len(self.users))
        return totals

    def _private_of(self, state: NodeState, positions: np.ndarray) -> dict[str, torch.Tensor]:
        index = torch.from_numpy(positions)
        return {k: v[index].to(self.device) for k, v in state.private.items()}

    def _paper_ranks(
        self,
        state: NodeState,
        positions: np.ndarray,
        item_ids: np.ndarray | None,
        item_rows: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        users = self.users[positions]
        candidates = np.stack([self.eval_candidates(int(u)) for u in users])  # [a, 200]
        rows = _lookup_rows(candidates.reshape(-1), item_ids, item_rows).reshape(
            *candidates.shape, -1
        )
        for j, position in enumerate(positions):  # personal rows replace global ones
            items, personal = state.personal(position)
            if len(items):
                where = np.searchsorted(items, candidates[j])
                where[where == len(items)] = 0
                hit = items[where] == candidates[j]
                rows[j, hit] = personal[where[hit]]
        logits = self.method.logits(
            self._private_of(state, positions), torch.from_numpy(rows).to(self.device)
        ).cpu()
        k = EVAL_NEGATIVES_PER_SPLIT + 1
        val = ranks_from_scores(logits[:, 0], logits[:, 1:k])
        test = ranks_from_scores(logits[:, k], logits[:, k + 1 :])
        return val.numpy(), test.numpy()

    def _strict_ranks(
        self, state: NodeState, positions: np.ndarray, table: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        users = self.users[positions]
        private = self._private_of(state, positions)
        scores = self.method.logits_all(private, torch.from_numpy(table).to(self.device))
        counts = np.diff(state.personal_indptr)[positions]
        if counts.sum() > 0:  # personal rows replace global ones
            width = int(counts.max())
            padded = np.zeros((len(positions), width, table.shape[1]), dtype=np.float32)
            owner = np.repeat(np.arange(len(positions)), counts)
            slot = np.arange(counts.sum()) - np.repeat(np.r_[0, np.cumsum(counts)[:-1]], counts)
            flat = np.concatenate([np.arange(*state.personal_indptr[p : p + 2]) for p in positions])
            padded[owner, slot] = state.personal_rows[flat]
            personal = self.method.logits(private, torch.from_numpy(padded).to(self.device))
            scores[torch.from_numpy(owner), torch.from_numpy(state.personal_items[flat])] = (
                personal[torch.from_numpy(owner), torch.from_numpy(slot)]
            )
        scores = scores.cpu()
        rows = torch.arange(len(positions))
        valid = torch.ones_like(scores, dtype=torch.bool)
        train_owner, train_items = [], []
        for j, user in enumerate(users):
            items = self.prepared.train_positives(int(user))
            train_owner.append(np.full(len(items), j))
            train_items.append(items)
        valid[
            torch.from_numpy(np.concatenate(train_owner)),
            torch.from_numpy(np.concatenate(train_items)),
        ] = False
        valid_item = torch.from_numpy(np.asarray(self.prepared.valid_item[users], np.int64))
        test_item = torch.from_numpy(np.asarray(self.prepared.test_item[users], np.int64))

        valid[rows, valid_item] = False  # the target does not compete with itself
        val = ranks_from_scores(scores[rows, valid_item], scores, valid)
        valid[rows, test_item] = False  # test: the validation item is excluded as well
        test = ranks_from_scores(scores[rows, test_item], scores, valid)
        return val.numpy(), test.numpy()


def _lookup_rows(
    items: np.ndarray, item_ids: np.ndarray | None, item_rows: np.ndarray
) -> np.ndarray:
    """Rows of ``items`` from a full table (``item_ids`` None) or a sparse (ids, rows) pair."""
    if item_ids is None:
        return np.array(item_rows[items], dtype=np.float32)
    where = np.searchsorted(item_ids, items)
    where[where == len(item_ids)] = 0
    if len(items) and (len(item_ids) == 0 or np.any(item_ids[where] != items)):
        missing = np.setdiff1d(items, item_ids)
        raise RuntimeError(
            f"the server sent {len(item_ids)} item rows but {len(missing)} needed ones are "
            f"missing (e.g. item {missing[:5].tolist()}): the node's row request and its "
            "training disagree; this is a bug, please report it."
        )
    return np.array(item_rows[where], dtype=np.float32)
