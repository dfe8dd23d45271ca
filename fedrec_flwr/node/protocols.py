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
from fedrec_flwr.node.malicious import target_exposure
from fedrec_flwr.node.personal import PersonalRows, whole_rows
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


class EvalProtocol:
    """What differs between the protocols at evaluation time."""

    name: str
    #: Items whose exposure evaluation measures (a malicious attack's targets; strict only).
    target_items: np.ndarray = np.empty(0, dtype=np.int64)

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

    def ranks(
        self,
        method: Method,
        params: dict[str, torch.Tensor],
        personal: PersonalRows,
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
        return np.unique(self.candidates_of(users))

    def keep_personal(self, user: int, items: np.ndarray) -> np.ndarray:
        """Only rows among the user's candidates (the only ones evaluation reads)."""
        return np.isin(items, self.candidates(user))

    def keep_personal_rows(
        self, users: np.ndarray, row_offsets: np.ndarray, items: np.ndarray
    ) -> np.ndarray:
        """:meth:`keep_personal` of all users at once: one membership test of (user, item)
        keys against the users' sorted candidate keys."""
        if len(users) == 0:
            return np.zeros(len(items), dtype=bool)
        span = self.prepared.num_items
        candidates = self.candidates_of(users)
        owner = np.arange(len(users), dtype=np.int64)
        wanted = np.sort((owner[:, None] * span + candidates).reshape(-1))
        item_owner = np.repeat(owner, np.diff(np.asarray(row_offsets, np.int64)))
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

    def eval_items(self, users: np.ndarray) -> None:
        return None

    def ranks(
        self, method, params, personal, positions, users, item_ids, item_rows, private_rows=None
    ):
        table = item_rows
        device = next(iter(params.values())).device
        scores = method.logits_all(params, torch.from_numpy(table).to(device))
        score_held(method, params, personal, private_rows, positions, table, scores)
        scores = scores.cpu()
        index = torch.arange(len(positions))
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
        negatives = np.asarray(self.prepared.eval_negatives(self.seed)[users], np.int64)
        sampled = scores.gather(1, torch.from_numpy(negatives))
        k = EVAL_NEGATIVES_PER_SPLIT
        sampled_val = ranks_from_scores(scores[index, valid_item], sampled[:, :k])
        sampled_test = ranks_from_scores(scores[index, test_item], sampled[:, k:])
        return Ranks(val.numpy(), test.numpy(), sampled_val.numpy(), sampled_test.numpy(), exposed)


PROTOCOLS: dict[str, type[EvalProtocol]] = {p.name: p for p in (PaperProtocol, StrictProtocol)}


def build_protocol(name: str, prepared: PreparedData, seed: int) -> EvalProtocol:
    return PROTOCOLS[name](prepared, seed)


def held_items(
    personal: PersonalRows, private_rows: dict[str, PersonalRows] | None, position: int
) -> np.ndarray:
    """Sorted items the user at ``position`` holds personal or private rows of."""
    if not private_rows:  # the store keeps each user's items sorted and distinct
        return personal.of(position)[0]
    parts = [personal.of(position)[0]]
    parts += [store.of(position)[0] for store in (private_rows or {}).values()]
    return np.unique(np.concatenate(parts))


def user_rows(
    method: Method,
    personal: PersonalRows,
    private_rows: dict[str, PersonalRows] | None,
    positions: np.ndarray,
    items: np.ndarray,
    item_ids: np.ndarray | None,
    item_rows: np.ndarray,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """What a user's score function reads for ``items`` [a, k] (one row of items per user at
    ``positions``): the item rows [a, k, r] (global rows, the user's personal rows replacing
    them), and the method's aligned row inputs: its private rows (zero where the user holds
    none) and the frozen global rows."""
    flat = items.reshape(-1)
    owners = np.repeat(np.asarray(positions, np.int64), items.shape[1] if items.ndim > 1 else 1)
    global_rows = lookup_rows(flat, item_ids, item_rows)
    extras = {name: global_rows.copy() for name in method.global_row_names()}
    for name in method.private_row_names():
        if private_rows and name in private_rows:
            extras[name] = private_rows[name].gathered(owners, flat)
        else:
            extras[name] = np.zeros_like(global_rows)
    personal.overlay_pairs(owners, flat, global_rows)  # personal rows replace global ones
    shape = (*items.shape, -1)
    return global_rows.reshape(shape), {n: v.reshape(shape) for n, v in extras.items()}


#: Bytes of row inputs one chunk of held (user, item) pairs may take (see score_held_pairs).
PAIR_CHUNK_BYTES = 1 << 26


def score_held(
    method: Method,
    params: dict[str, torch.Tensor],
    personal: PersonalRows,
    private_rows: dict[str, PersonalRows] | None,
    positions: np.ndarray,
    table: np.ndarray,
    scores: torch.Tensor,
) -> None:
    """Rescore in ``scores`` [a, I] (the full ranking from the global rows) the items each
    user at ``positions`` holds personal or private rows of, from those rows (and the global
    views of a method that has them).

    A method with row-wise logits scores them as one flat list of (user, item) pairs
    (:func:`score_held_pairs`); any other as one padded [users, most held, r] block
    (:func:`score_held_padded`), the shapes it was trained with.
    """
    held = [held_items(personal, private_rows, int(p)) for p in positions]
    if not sum(len(h) for h in held):
        return
    score = score_held_pairs if method.rowwise_logits else score_held_padded
    score(method, params, personal, private_rows, positions, held, table, scores)


def score_held_pairs(
    method: Method,
    params: dict[str, torch.Tensor],
    personal: PersonalRows,
    private_rows: dict[str, PersonalRows] | None,
    positions: np.ndarray,
    held: list[np.ndarray],
    table: np.ndarray,
    scores: torch.Tensor,
) -> None:
    """:func:`score_held` for ``held[j]``, the items of the user at ``positions[j]``, as a
    flat list, a chunk at a time, each pair a batch of one row with its user's parameters:
    for row-wise logits the scores of the padded block bit for bit, without its padding
    (under ``strict`` a FedRAP user holds thousands of rows, and the heaviest sets the width
    for all).
    """
    counts = np.array([len(h) for h in held])
    owner = np.repeat(np.arange(len(positions)), counts)
    items = np.concatenate(held).astype(np.int64)
    device = scores.device
    names = (*method.global_row_names(), *method.private_row_names())
    per_user = sum(v[0].numel() for v in params.values() if v.dim() and len(v))
    per_pair = 4 * (table.shape[1] * (3 + len(names)) + per_user)
    step = max(1, PAIR_CHUNK_BYTES // per_pair)
    # Without private rows a user holds exactly its personal rows: read them by storage
    # index (no lookup of each pair in the store).
    storage = None if private_rows else personal.storage_of(positions)
    if storage is not None and not np.array_equal(personal.take_items(storage), items):
        storage = None
    for lo in range(0, len(items), step):
        who, what = owner[lo : lo + step], items[lo : lo + step]
        where = positions[who]
        extras = {}
        if storage is None or names:
            global_rows = np.asarray(table[what], dtype=np.float32)
            extras = {name: global_rows.copy() for name in method.global_row_names()}
            for name in method.private_row_names():
                extras[name] = (
                    private_rows[name].gathered(where, what)
                    if private_rows and name in private_rows
                    else np.zeros_like(global_rows)
                )
        if storage is None:
            personal.overlay_pairs(where, what, global_rows)
        else:
            global_rows = personal.take_rows(storage[lo : lo + step])
        index = torch.from_numpy(who).to(device)
        batch = {n: v[index] for n, v in params.items()}
        batch.update({n: torch.from_numpy(v).to(device).unsqueeze(1) for n, v in extras.items()})
        rows = torch.from_numpy(global_rows).to(device).unsqueeze(1)
        scores[index, torch.from_numpy(what).to(device)] = method.logits(batch, rows)[:, 0]


def score_held_padded(
    method: Method,
    params: dict[str, torch.Tensor],
    personal: PersonalRows,
    private_rows: dict[str, PersonalRows] | None,
    positions: np.ndarray,
    held: list[np.ndarray],
    table: np.ndarray,
    scores: torch.Tensor,
) -> None:
    """:func:`score_held` for any method: one padded [users, most held, r] block, so a
    method whose logits mix rows (a matrix product) sees the shapes it was trained with."""
    device = scores.device
    counts = np.array([len(h) for h in held])
    items = np.zeros((len(positions), int(counts.max())), dtype=np.int64)
    for j, h in enumerate(held):
        items[j, : len(h)] = h
    rows, extras = user_rows(method, personal, private_rows, positions, items, None, table)
    extras = {n: torch.from_numpy(v).to(device) for n, v in extras.items()}
    scored = method.logits({**params, **extras}, torch.from_numpy(rows).to(device))
    owner = torch.from_numpy(np.repeat(np.arange(len(positions)), counts))
    slot = torch.from_numpy(np.concatenate([np.arange(c) for c in counts]))
    scores[owner, torch.from_numpy(items)[owner, slot]] = scored[owner, slot]


def lookup_rows(
    items: np.ndarray, item_ids: np.ndarray | None, item_rows: np.ndarray
) -> np.ndarray:
    """Rows of ``items`` from a full table (``item_ids`` None) or a sparse (ids, rows) pair."""
    if item_ids is None:  # whole-row copies (the same values as np.take, faster)
        return _rows_at(item_rows, items)
    if len(item_ids) and len(items) > 4 * len(item_ids):  # many lookups: a position map
        position = np.zeros(int(max(item_ids.max(), items.max())) + 1, dtype=np.int64)
        position[item_ids] = np.arange(len(item_ids))
        where = position[items]
    else:
        where = np.searchsorted(item_ids, items)
        where[where == len(item_ids)] = 0
    if len(items) and (len(item_ids) == 0 or np.any(item_ids[where] != items)):
        missing = np.setdiff1d(items, item_ids)
        raise RuntimeError(
            f"the server sent {len(item_ids)} item rows but {len(missing)} needed ones are "
            f"missing (e.g. item {missing[:5].tolist()}): the node's row request and its "
            "training disagree; this is a bug, please report it."
        )
    return _rows_at(item_rows, where)


def _rows_at(table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``table[index]`` as a new float32 array, a whole row per copy."""
    table = np.asarray(table, dtype=np.float32)
    if table.ndim != 2 or not table.shape[1]:
        return np.take(table, index, axis=0)
    rows = whole_rows(table)[index].view(np.float32)
    return rows.reshape(*np.shape(index), table.shape[1])
