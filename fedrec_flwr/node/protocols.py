"""The two evaluation protocols as objects: which rows evaluation reads, which personal rows
a user keeps, and how held-out items are ranked (see docs/protocols.md).

``paper``: 100 candidates per held-out item (it and 99 never-interacted negatives drawn once
per user); HR@10, NDCG@10. ``strict``: every item except the user's train positives (and, for
test, the validation item); HR@10, NDCG@10, Recall@20, NDCG@20, MRR, and from the same score
row, the held-out item's rank among the 99 negatives ``paper`` draws for it (``s100-*``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedrec_flwr.data.prepared import EVAL_NEGATIVES_PER_SPLIT, PreparedData
from fedrec_flwr.evaluation import ranks_from_scores, reported_metrics
from fedrec_flwr.methods import Method
from fedrec_flwr.methods.capabilities import linear_head
from fedrec_flwr.node import host_loops
from fedrec_flwr.node.full_ranking import DeviceTable, linear_full_ranks
from fedrec_flwr.node.layered import RowStore
from fedrec_flwr.node.malicious import target_exposure
from fedrec_flwr.node.personal import PersonalRows
from fedrec_flwr.node.rank_entries import train_csr
from fedrec_flwr.node.scoring import (  # noqa: F401 (lookup_rows, held_items: the node's)
    held_items,
    lookup_rows,
    score_held,
    user_rows,
)
from fedrec_flwr.sampling import is_member


@dataclass(frozen=True)
class Ranks:
    """0-based ranks of the validation and test items of a batch of users (int64 [a]); under
    ``strict`` also their ranks among the 99 sampled negatives of the paper protocol, read
    from the same scores (None under ``paper``)."""

    val: np.ndarray
    test: np.ndarray
    sampled_val: np.ndarray | None = None
    sampled_test: np.ndarray | None = None
    exposed: np.ndarray | None = None  # float64 [a]: a target item in the top 10 (strict)


#: Rows from which :meth:`PaperProtocol.keep_personal_rows` takes the compiled loop.
COMPILED_ROWS = 1 << 14


class EvalProtocol:
    """What differs between the protocols at evaluation time."""

    name: str
    #: Items whose exposure evaluation measures (a malicious attack's targets; strict only).
    target_items: np.ndarray = np.empty(0, dtype=np.int64)
    #: Does evaluation also score the train positives (``eval-loss``)? Then a user keeps
    #: every row it tuned and is sent its train positives' rows.
    scores_train_rows: bool = False

    def __init__(self, prepared: PreparedData, seed: int) -> None:
        self.prepared = prepared
        self.seed = seed
        self.metrics = reported_metrics(self.name)

    def eval_items(self, users: np.ndarray) -> np.ndarray | None:
        """Item rows evaluating ``users`` reads (sorted), or None for all of them."""
        raise NotImplementedError

    def keep_personal(self, user: int, items: np.ndarray) -> np.ndarray:
        """Mask of the tuned rows worth keeping for evaluation (all by default)."""
        return np.ones(len(items), dtype=bool)

    def keep_personal_rows(
        self, users: np.ndarray, row_offsets: np.ndarray, items: np.ndarray
    ) -> np.ndarray:
        """:meth:`keep_personal` of every user's block of ``items`` (user ``j``: rows
        ``row_offsets[j]:row_offsets[j+1]``) at once."""
        if type(self).keep_personal is EvalProtocol.keep_personal:
            return np.ones(len(items), dtype=bool)
        keep = np.empty(len(items), dtype=bool)
        for j, user in enumerate(users):
            lo, hi = row_offsets[j], row_offsets[j + 1]
            keep[lo:hi] = self.keep_personal(int(user), items[lo:hi])
        return keep

    def fast_full_ranking(self, method: Method, params: dict[str, torch.Tensor]) -> bool:
        """Does this protocol rank by the exact fast path (:mod:`fedrec_flwr.node.full_ranking`)
        for ``method`` (``params``: some users' parameters)?"""
        return False

    def ranks(
        self,
        method: Method,
        params: dict[str, torch.Tensor],
        personal: RowStore,
        positions: np.ndarray,
        users: np.ndarray,
        item_ids: np.ndarray | None,
        item_rows: np.ndarray,
        private_rows: dict[str, PersonalRows] | None = None,
    ) -> Ranks:
        """0-based validation and test ranks of ``users`` (at ``positions`` in the node).

        ``private_rows``: the node's stores of the method's ``private-rows`` parameters."""
        raise NotImplementedError


class PaperProtocol(EvalProtocol):
    name = "paper"

    def candidates(self, user: int) -> np.ndarray:
        """The 200 candidates [validation item, 99 negs, test item, 99 negs]."""
        negatives = np.asarray(self.prepared.eval_negatives(self.seed)[user], np.int64)
        k = EVAL_NEGATIVES_PER_SPLIT
        return np.r_[
            self.prepared.valid_item[user],
            negatives[:k],
            self.prepared.test_item[user],
            negatives[k:],
        ]

    def candidates_of(self, users: np.ndarray) -> np.ndarray:
        """:meth:`candidates` of each of ``users``: [a, 200]."""
        users = np.asarray(users, np.int64)
        negatives = np.asarray(self.prepared.eval_negatives(self.seed)[users], np.int64)
        k = EVAL_NEGATIVES_PER_SPLIT
        valid = np.asarray(self.prepared.valid_item[users], np.int64)[:, None]
        test = np.asarray(self.prepared.test_item[users], np.int64)[:, None]
        return np.hstack([valid, negatives[:, :k], test, negatives[:, k:]])

    def eval_items(self, users: np.ndarray) -> np.ndarray:
        if len(users) == 0:
            return np.empty(0, dtype=np.int64)
        items = np.unique(self.candidates_of(users))
        if self.scores_train_rows:
            positives = [self.prepared.train_positives(int(u)) for u in users]
            items = np.union1d(items, np.concatenate(positives).astype(np.int64))
        return items

    def keep_personal(self, user: int, items: np.ndarray) -> np.ndarray:
        """Only rows among the user's candidates (the only ones evaluation reads); every
        row when evaluation scores the train positives too."""
        if self.scores_train_rows:
            return np.ones(len(items), dtype=bool)
        return np.isin(items, self.candidates(user))

    def keep_personal_rows(
        self, users: np.ndarray, row_offsets: np.ndarray, items: np.ndarray
    ) -> np.ndarray:
        """:meth:`keep_personal` of all users at once: one membership test of (user, item)
        keys against the users' sorted candidate keys."""
        if self.scores_train_rows:
            return np.ones(len(items), dtype=bool)
        if len(users) == 0:
            return np.zeros(len(items), dtype=bool)
        span = self.prepared.num_items
        candidates = self.candidates_of(users)
        if len(items) >= COMPILED_ROWS:  # each user's candidates marked, its rows read
            return host_loops.candidate_rows(row_offsets, items, candidates, span)
        owner = np.arange(len(users), dtype=np.int64)
        wanted = np.sort((owner[:, None] * span + candidates).reshape(-1))
        offsets: np.ndarray = np.asarray(row_offsets, np.int64)
        item_owner = np.repeat(owner, np.diff(offsets))
        return is_member(item_owner * span + np.asarray(items, np.int64), wanted)

    def ranks(
        self, method, params, personal, positions, users, item_ids, item_rows, private_rows=None
    ):
        candidates = self.candidates_of(users)  # [a, 200]
        device = next(iter(params.values())).device
        rows, extras = user_rows(
            method, personal, private_rows, positions, candidates, item_ids, item_rows
        )
        params = {**params, **{n: torch.from_numpy(v).to(device) for n, v in extras.items()}}
        logits = method.logits(params, torch.from_numpy(rows).to(device)).cpu()
        k = EVAL_NEGATIVES_PER_SPLIT + 1
        val = ranks_from_scores(logits[:, 0], logits[:, 1:k])
        test = ranks_from_scores(logits[:, k], logits[:, k + 1 :])
        return Ranks(val.numpy(), test.numpy())


class StrictProtocol(EvalProtocol):
    name = "strict"
    #: (the table, its upload): the latest message's table, uploaded once for its chunks
    _uploaded: tuple[np.ndarray, DeviceTable] | None = None

    def device_table(self, table: np.ndarray, device: torch.device) -> DeviceTable:
        """``table`` on ``device`` (uploaded once, reused while it is the table asked for)."""
        kept = self._uploaded
        if kept is None or kept[0] is not table or kept[1].rows.device != device:
            kept = (table, DeviceTable.of(table, device))
            self._uploaded = kept
        return kept[1]

    def eval_items(self, users: np.ndarray) -> None:
        return None

    def fast_full_ranking(self, method: Method, params: dict[str, torch.Tensor]) -> bool:
        return not len(self.target_items) and linear_head(method, params) is not None

    def ranks(
        self, method, params, personal, positions, users, item_ids, item_rows, private_rows=None
    ):
        table = item_rows
        device = next(iter(params.values())).device
        uploaded = self.device_table(table, device)
        negatives = np.asarray(self.prepared.eval_negatives(self.seed)[users], np.int64)
        if not len(self.target_items):  # a linear head: the exact fast path
            fast = linear_full_ranks(
                method,
                params,
                personal,
                private_rows,
                positions,
                users,
                table,
                uploaded,
                self.prepared,
                negatives,
            )
            if fast is not None:
                return Ranks(*fast)
        scores = method.logits_all(params, uploaded.rows)
        score_held(method, params, personal, private_rows, positions, table, scores)
        scores = scores.cpu()
        index = torch.arange(len(positions))
        valid = torch.ones_like(scores, dtype=torch.bool)
        train_owner, train_items = train_csr(self.prepared, users)
        valid[torch.from_numpy(train_owner), torch.from_numpy(train_items)] = False
        exposed = None
        if len(self.target_items):  # over every item but the train positives
            exposed = target_exposure(scores, valid, self.target_items)
        valid_item = torch.from_numpy(np.asarray(self.prepared.valid_item[users], np.int64))
        test_item = torch.from_numpy(np.asarray(self.prepared.test_item[users], np.int64))
        valid[index, valid_item] = False  # the target does not compete with itself
        val = ranks_from_scores(scores[index, valid_item], scores, valid)
        valid[index, test_item] = False  # test: the validation item is excluded as well
        test = ranks_from_scores(scores[index, test_item], scores, valid)
        # Sampled-100 from the same scores: the paper protocol's 99 negatives of each split,
        # drawn on this split among the items the user never interacted with, so each is a
        # competitor of the full ranking too (a subset: the rank can only be lower).
        sampled = scores.gather(1, torch.from_numpy(negatives))
        k = EVAL_NEGATIVES_PER_SPLIT
        sampled_val = ranks_from_scores(scores[index, valid_item], sampled[:, :k])
        sampled_test = ranks_from_scores(scores[index, test_item], sampled[:, k:])
        return Ranks(val.numpy(), test.numpy(), sampled_val.numpy(), sampled_test.numpy(), exposed)


PROTOCOLS: dict[str, type[EvalProtocol]] = {p.name: p for p in (PaperProtocol, StrictProtocol)}


def build_protocol(name: str, prepared: PreparedData, seed: int) -> EvalProtocol:
    return PROTOCOLS[name](prepared, seed)
