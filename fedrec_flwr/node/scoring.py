"""What a user's score function reads: its rows for given items (global rows, its personal
rows replacing them, its private rows beside them), and the scores of the rows it holds
(:func:`score_held`: under ``strict`` every item is ranked from the global rows, then the
items a user holds personal or private rows of are rescored from those)."""

from __future__ import annotations

import numpy as np
import torch

from fedrec_flwr.methods import Method
from fedrec_flwr.methods.capabilities import private_rows_in, rowwise_logits
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node.host_memory import populated_empty
from fedrec_flwr.node.layered import RowStore
from fedrec_flwr.node.personal import PersonalRows, whole_rows
from fedrec_flwr.node.rank_entries import MAP_SLOTS, pair_where


def held_items(
    personal: RowStore, private_rows: dict[str, PersonalRows] | None, position: int
) -> np.ndarray:
    """Sorted items the user at ``position`` holds personal or private rows of."""
    if not private_rows:  # the store keeps each user's items sorted and distinct
        return personal.of(position)[0]
    parts = [personal.of(position)[0]]
    parts += [store.of(position)[0] for store in (private_rows or {}).values()]
    return np.unique(np.concatenate(parts))


def user_rows(
    method: Method,
    personal: RowStore,
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
    extras = {name: global_rows.copy() for name in layout(method).global_rows}
    for name in layout(method).private_rows:
        if private_rows and name in private_rows:
            extras[name] = private_rows[name].gathered(owners, flat)
        else:
            extras[name] = np.zeros_like(global_rows)
        extras[name] = private_rows_in(method, name, extras[name], flat)
    if items.ndim == 2 and items.size >= MAPPED_PAIRS:  # personal rows replace global ones
        overlay_users(personal, positions, items, global_rows)
    else:
        personal.overlay_pairs(owners, flat, global_rows)
    shape = (*items.shape, -1)
    return global_rows.reshape(shape), {n: v.reshape(shape) for n, v in extras.items()}


#: (user, item) pairs from which :func:`user_rows` finds the held ones from a map of the
#: users' stored rows (:func:`overlay_users`) instead of searching each pair.
MAPPED_PAIRS = 1 << 14
#: Items up to which :func:`overlay_users` maps stored rows (at least 16 users a block).
MAPPED_ITEMS = MAP_SLOTS // 16


def overlay_users(
    personal: RowStore, positions: np.ndarray, items: np.ndarray, rows: np.ndarray
) -> None:
    """``personal.overlay_pairs`` of the pairs (``positions[j]``, ``items[j, s]``) (``rows``:
    one per pair, flat), from the stored rows of each user (a position map of a block of
    users at a time, :func:`fedrec_flwr.node.rank_entries.pair_where`): linear in the
    pairs and the stored rows, with no search per pair."""
    positions = np.asarray(positions, dtype=np.int64)
    counts = np.asarray(personal.counts(), np.int64)[positions]
    items = np.asarray(items, dtype=np.int64)
    if not counts.sum() or not items.size:
        return
    storage = personal.storage_of(positions)
    held = np.asarray(personal.take_items(storage), np.int64)
    span = int(max(held.max(), items.max())) + 1
    if span > MAPPED_ITEMS:  # a map of few users a block: the search per pair
        owners = np.repeat(positions, items.shape[1])
        personal.overlay_pairs(owners, items.reshape(-1), rows)
        return
    owner = np.repeat(np.arange(len(positions), dtype=np.int64), counts)
    where = pair_where(owner, held, items, span).reshape(-1)
    hit = np.flatnonzero(where >= 0)
    at = storage[where[hit]]
    taken = personal.take_rows(at)
    if rows.flags.c_contiguous and rows.dtype == np.float32 and rows.ndim == 2:
        whole_rows(rows)[hit] = whole_rows(taken)  # a whole row per copy
    else:
        rows[hit] = taken


#: Bytes of row inputs one chunk of held (user, item) pairs may take (see score_held_pairs).
PAIR_CHUNK_BYTES = 1 << 26


def score_held(
    method: Method,
    params: dict[str, torch.Tensor],
    personal: RowStore,
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
    owner, items, storage = held_pairs(personal, private_rows, positions)
    if not len(items):
        return
    if rowwise_logits(method):
        scored = pair_scores(
            method, params, personal, private_rows, positions, owner, items, table, storage
        )
        device = scores.device
        index = torch.from_numpy(owner).to(device)
        scores[index, torch.from_numpy(items).to(device)] = scored
        return
    held = np.split(items, np.cumsum(np.bincount(owner, minlength=len(positions)))[:-1])
    score_held_padded(method, params, personal, private_rows, positions, held, table, scores)


def held_pairs(
    personal: RowStore,
    private_rows: dict[str, PersonalRows] | None,
    positions: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(owner, items, storage): the items each user at ``positions`` holds personal or
    private rows of (:func:`held_items`), user after user (``owner``: the index in
    ``positions``), and without private rows their storage indices in the personal store
    (else None)."""
    positions = np.asarray(positions, dtype=np.int64)
    if not private_rows:  # exactly the personal rows, sorted per user in the store
        storage = personal.storage_of(positions)
        counts = np.asarray(personal.counts(), np.int64)[positions]
        owner = np.repeat(np.arange(len(positions), dtype=np.int64), counts)
        return owner, np.asarray(personal.take_items(storage), np.int64), storage
    held = [held_items(personal, private_rows, int(p)) for p in positions]
    counts = np.array([len(h) for h in held], dtype=np.int64)
    owner = np.repeat(np.arange(len(positions), dtype=np.int64), counts)
    items = np.concatenate(held).astype(np.int64) if held else np.empty(0, np.int64)
    return owner, items, None


def score_held_pairs(
    method: Method,
    params: dict[str, torch.Tensor],
    personal: RowStore,
    private_rows: dict[str, PersonalRows] | None,
    positions: np.ndarray,
    held: list[np.ndarray],
    table: np.ndarray,
    scores: torch.Tensor,
) -> None:
    """:func:`score_held` for ``held[j]``, the items of the user at ``positions[j]``, as a
    flat list of pairs (:func:`pair_scores`): for row-wise logits the scores of the padded
    block bit for bit, without its padding (under ``strict`` a FedRAP user holds thousands
    of rows, and the heaviest sets the width for all)."""
    counts = np.array([len(h) for h in held])
    owner = np.repeat(np.arange(len(positions)), counts)
    items = np.concatenate(held).astype(np.int64)
    # Without private rows a user holds exactly its personal rows: read them by storage
    # index (no lookup of each pair in the store).
    storage = None if private_rows else personal.storage_of(positions)
    if storage is not None and not np.array_equal(personal.take_items(storage), items):
        storage = None
    scored = pair_scores(
        method, params, personal, private_rows, positions, owner, items, table, storage
    )
    device = scores.device
    scores[torch.from_numpy(owner).to(device), torch.from_numpy(items).to(device)] = scored


def pair_scores(
    method: Method,
    params: dict[str, torch.Tensor],
    personal: RowStore,
    private_rows: dict[str, PersonalRows] | None,
    positions: np.ndarray,
    owner: np.ndarray,
    items: np.ndarray,
    table: np.ndarray,
    storage: np.ndarray | None = None,
) -> torch.Tensor:
    """Scores [n] of the pairs (user ``positions[owner[k]]``, item ``items[k]``) from what
    the user's score function reads for them (:func:`user_rows`), a chunk at a time, each
    pair a batch of one row with its user's parameters (``params``: [len(positions), ...]):
    for row-wise logits the same bits as any batch shape. ``storage``: the pairs' storage
    indices in the personal store when every pair is a personal row of its user."""
    device = next(iter(params.values())).device
    names = (*layout(method).global_rows, *layout(method).private_rows)
    per_user = sum(v[0].numel() for v in params.values() if v.dim() and len(v))
    per_pair = 4 * (table.shape[1] * (3 + len(names)) + per_user)
    step = max(1, PAIR_CHUNK_BYTES // per_pair)
    out = torch.empty(len(items), dtype=torch.float32, device=device)
    for lo in range(0, len(items), step):
        who, what = owner[lo : lo + step], items[lo : lo + step]
        where = positions[who]
        extras = {}
        if storage is None or names:
            global_rows = np.asarray(table[what], dtype=np.float32)
            extras = {name: global_rows.copy() for name in layout(method).global_rows}
            for name in layout(method).private_rows:
                extras[name] = private_rows_in(
                    method,
                    name,
                    private_rows[name].gathered(where, what)
                    if private_rows and name in private_rows
                    else np.zeros_like(global_rows),
                    what,
                )
        if storage is None:
            personal.overlay_pairs(where, what, global_rows)
        else:
            global_rows = personal.take_rows(storage[lo : lo + step])
        index = torch.from_numpy(who).to(device)
        batch = {n: v.index_select(0, index) for n, v in params.items()}
        batch.update({n: torch.from_numpy(v).to(device).unsqueeze(1) for n, v in extras.items()})
        rows = torch.from_numpy(global_rows).to(device).unsqueeze(1)
        out[lo : lo + step] = method.logits(batch, rows)[:, 0]
    return out


def score_held_padded(
    method: Method,
    params: dict[str, torch.Tensor],
    personal: RowStore,
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
    on_device = {n: torch.from_numpy(v).to(device) for n, v in extras.items()}
    scored = method.logits({**params, **on_device}, torch.from_numpy(rows).to(device))
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
        position = np.full(int(max(item_ids.max(), items.max())) + 1, -1, dtype=np.int64)
        position[item_ids] = np.arange(len(item_ids))
        where = position[items]
        missing = len(items) > 0 and int(where.min()) < 0  # -1: an item the map lacks
    else:
        where = np.searchsorted(item_ids, items)
        where[where == len(item_ids)] = 0
        missing = len(items) > 0 and (len(item_ids) == 0 or bool(np.any(item_ids[where] != items)))
    if missing:
        absent = np.setdiff1d(items, item_ids)
        raise RuntimeError(
            f"the server sent {len(item_ids)} item rows but {len(absent)} needed ones are "
            f"missing (e.g. item {absent[:5].tolist()}): the node's row request and its "
            "training disagree; this is a bug, please report it."
        )
    return _rows_at(item_rows, where)


def _rows_at(table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``table[index]`` as a new float32 array, a whole row per copy, into memory mapped at
    once (:func:`~fedrec_flwr.node.host_memory.populated_empty`: a round's rows are fresh
    memory, which the personal-row store keeps)."""
    table = np.asarray(table, dtype=np.float32)
    if table.ndim != 2 or not table.shape[1]:
        return np.take(table, index, axis=0)
    index = np.asarray(index)
    flat = index.reshape(-1)
    if len(flat) and (flat.min() < 0 or flat.max() >= len(table)):  # NumPy's own indexing
        rows = whole_rows(table)[index].view(np.float32)
        return rows.reshape(*index.shape, table.shape[1])
    out = populated_empty((len(flat), table.shape[1]), np.float32)
    # in range: "clip" clips nothing (under "raise" NumPy would write into a copy of out)
    np.take(whole_rows(table), flat, out=whole_rows(out), mode="clip")
    return out.reshape(*index.shape, table.shape[1])
