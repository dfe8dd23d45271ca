"""Full-catalogue ranks (``strict``) of users whose score of an item without personal rows is
a linear head on its global row (:class:`~fedrec_flwr.methods.capabilities.LinearHead`):
exact and fast, on the CPU or the device.

The ranks are those of the scores :func:`~fedrec_flwr.methods.heads.linear_logits_all` gives
(every score in one fixed order, whatever the batch or the device), without computing most
of them in that order:

- A block of users' scores over the whole catalogue is one matrix product (any BLAS, any
  blocking). Each such value differs from the fixed-order one by at most ``error_u``: the
  rounding of two float32 inner products of width ``r`` in any order, ``gamma_r * ||w_u|| *
  max_i ||T_i||`` each, with the bias's rounding and a margin for the threshold's.
- A comparison with a held-out item's exact score ``t`` that the product decides by more than
  the bound is the fixed-order comparison; the few it does not are recomputed in the fixed
  order. Counting a row's items above ``t + eps`` and at or above ``t - eps`` gives its count,
  and whether any item is undecided.
- From the count over all items, the items in each user's CSR of exclusions (train
  positives, the held-out items) and of held rows (personal or private) are taken out, and
  the held ones not excluded are put back with the scores of their own rows.

So per-user ranks are bit-identical whatever the packing, the chunking or the device. On
the CPU, a large call computes every score in the fixed order instead, compiled and compared
in the same pass (:mod:`fedrec_flwr.node.fixed_order_scan`): the same ranks, no bound.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from fedrec_flwr.data.prepared import EVAL_NEGATIVES_PER_SPLIT, PreparedData
from fedrec_flwr.methods import Method
from fedrec_flwr.methods.capabilities import linear_head
from fedrec_flwr.methods.heads import fixed_order_dots
from fedrec_flwr.node import fixed_order_scan
from fedrec_flwr.node.layered import RowStore
from fedrec_flwr.node.personal import PersonalRows
from fedrec_flwr.node.rank_entries import (
    HELD,
    Entries,
    beats,
    entries_of,
    full_ranks,
    read_held,
    sampled_ranks,
)
from fedrec_flwr.node.scoring import held_pairs, pair_scores

UNIT = 2.0**-24  # unit roundoff of float32
#: Scores one block of the matrix product holds (users x items).
BLOCK_SCORES = 1 << 22
#: The same on an accelerator, where a block's cost is its launches and host syncs (about a
#: dozen each) rather than its size: 256 MB of scores and as much of comparisons.
DEVICE_BLOCK_SCORES = 1 << 26
#: At most this many on the CPU: a block and its comparison buffer (8 MB) stay in the cache
#: for the four comparison passes.
CPU_BLOCK_SCORES = 1 << 20
#: Pairs scored at once in the fixed order (their products: pairs x dim floats).
EXACT_CHUNK = 1 << 16


@dataclass(frozen=True)
class DeviceTable:
    """The global table on the evaluation's device (uploaded once per message), transposed
    for the matrix product, with its largest row norm, whether all of it is finite, and the
    padded forms the compiled fixed-order loops read (made on their first call)."""

    rows: torch.Tensor  # [I, r]
    transposed: torch.Tensor  # [r, I], contiguous
    max_norm: float
    finite: bool
    padded: fixed_order_scan.PaddedTable

    @classmethod
    def of(cls, table: np.ndarray, device: torch.device) -> DeviceTable:
        rows = torch.from_numpy(np.ascontiguousarray(table, dtype=np.float32)).to(device)
        finite = bool(torch.isfinite(rows).all())
        norm = 0.0
        if finite and rows.numel():
            norm = float(torch.linalg.vector_norm(rows.double(), dim=1).max())
        transposed = rows.T.contiguous()
        padded = fixed_order_scan.PaddedTable(transposed)
        return cls(rows, transposed, norm, finite, padded)


@contextmanager
def highest_precision():
    """float32 matrix products in float32 (no TF32 or bfloat16 passes): the bound holds."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def exact_scores(
    table: DeviceTable,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    owner: np.ndarray,
    items: np.ndarray,
) -> np.ndarray:
    """Fixed-order scores (float32 [n]) of the pairs (user ``owner[k]``, item ``items[k]``):
    :func:`~fedrec_flwr.methods.heads.linear_logits_all`'s, or the compiled pair loop's."""
    if fixed_order_scan.applies(weight, bias, table.rows.shape[0]):
        return fixed_order_scan.pair_scores(weight, bias, table.padded, owner, items)
    out = np.empty(len(items), dtype=np.float32)
    device = weight.device
    for lo in range(0, len(items), EXACT_CHUNK):
        who = torch.from_numpy(np.asarray(owner[lo : lo + EXACT_CHUNK], np.int64)).to(device)
        what = torch.from_numpy(np.asarray(items[lo : lo + EXACT_CHUNK], np.int64)).to(device)
        scores = fixed_order_dots(table.rows[what], weight[who])
        if bias is not None:
            scores = scores + bias[who]
        out[lo : lo + EXACT_CHUNK] = scores.cpu().numpy()
    return out


def _outward(values: np.ndarray, up: bool) -> np.ndarray:
    """float64 thresholds as float32, rounded away from the band they bound."""
    rounded = values.astype(np.float32)
    wrong = rounded < values if up else rounded > values
    toward = np.float32(np.inf if up else -np.inf)
    return np.where(wrong, np.nextafter(rounded, toward), rounded).astype(np.float32)


def linear_full_ranks(
    method: Method,
    params: dict[str, torch.Tensor],
    personal: RowStore,
    private_rows: dict[str, PersonalRows] | None,
    positions: np.ndarray,
    users: np.ndarray,
    table: np.ndarray,
    device_table: DeviceTable,
    prepared: PreparedData,
    negatives: np.ndarray,
) -> tuple[np.ndarray, ...] | None:
    """(val, test, sampled val, sampled test) ranks of ``users`` (at ``positions``) under
    ``strict``; None where this path does not apply (no linear head, a non-finite value):
    the caller then materialises the scores."""
    head = linear_head(method, params)
    if head is None or not device_table.finite:
        return None
    weight, bias = head
    users = np.asarray(users, dtype=np.int64)
    bounds = _error_bounds(weight, bias, device_table)
    if bounds is None:
        return None
    shift, error = bounds
    owner, items, storage = held_pairs(personal, private_rows, positions)
    entries = entries_of(prepared, users, (owner, items), np.full(len(items), np.nan, np.float32))
    pairs, at = read_held(entries, owner, items, prepared.num_items)
    if len(pairs):  # storage: the pairs' indices in the personal store, or None
        kept = (owner[pairs], items[pairs], table, None if storage is None else storage[pairs])
        scored = pair_scores(method, params, personal, private_rows, positions, *kept)
        entries.personal[at] = scored.cpu().numpy()
    targets = _targets(device_table, weight, bias, entries, prepared, users)
    if not np.isfinite(targets[~np.isnan(targets)]).all():
        return None
    sample = np.asarray(negatives, dtype=np.int64)
    decided = _Decisions(len(users), entries.owner, sample.shape[1])
    num_items = device_table.rows.shape[0]
    if fixed_order_scan.applies(weight, bias, num_items):  # no bound
        fixed_order_scan.decide_in_fixed_order(
            weight, bias, device_table.padded, targets, entries, sample, decided
        )
    else:  # a bounded BLAS product (on the CPU scanned by _scan_host), the rest in fixed order
        high, low = _thresholds(targets, shift, error)
        scan = _scan_host if weight.device.type == "cpu" else _scan_tensors
        with highest_precision():
            scan(device_table, weight, entries, sample, high, low, decided)
        exact = exact_scores(device_table, weight, bias, *decided.pending_pairs(entries, sample))
        decided.resolve(exact, targets)
    return full_ranks(entries, decided, targets, num_items) + sampled_ranks(
        entries, decided, targets, sample, num_items
    )


def _error_bounds(
    weight: torch.Tensor, bias: torch.Tensor | None, device_table: DeviceTable
) -> tuple[np.ndarray, np.ndarray] | None:
    """(each user's bias, the bound on |product - fixed-order product| of any of its
    scores), or None when a bound is not finite or too large to decide with."""
    dim = device_table.rows.shape[1]
    norms = torch.linalg.vector_norm(weight.double(), dim=1).cpu().numpy()
    shift = np.zeros(len(norms)) if bias is None else bias.double().cpu().numpy()
    span = norms * device_table.max_norm
    if not (np.isfinite(span).all() and np.isfinite(shift).all()) or span.max(initial=0) > 1e36:
        return None
    gamma = dim * UNIT / (1 - dim * UNIT)
    return shift, 2.0001 * gamma * span + dim * 2.0**-140  # |product - fixed order|, any order


def _targets(
    device_table: DeviceTable,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    entries: Entries,
    prepared: PreparedData,
    users: np.ndarray,
) -> np.ndarray:
    """The held-out items' scores [a, 2] (validation, test): their own rows' where held,
    else the global fixed-order one."""
    a, num_items = len(users), device_table.rows.shape[0]
    every = np.arange(a, dtype=np.int64)
    held_out = np.stack(
        [np.asarray(prepared.valid_item[users], np.int64), np.asarray(prepared.test_item[users])],
        axis=1,
    ).astype(np.int64)
    targets = np.empty((a, 2), dtype=np.float32)
    for k in range(2):
        where = entries.where(every, held_out[:, k], num_items)
        held = (entries.flags[where] & HELD) > 0
        targets[held, k] = entries.personal[where[held]]
        rest = np.flatnonzero(~held)
        targets[rest, k] = exact_scores(device_table, weight, bias, rest, held_out[rest, k])
    return targets


def _thresholds(
    targets: np.ndarray, shift: np.ndarray, error: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Thresholds on the bias-free product: above ``high`` an item beats the target, below
    ``low`` it does not (in between: its fixed-order score decides)."""
    centre = targets.astype(np.float64) - shift[:, None]
    slack = 1e-12 * (np.abs(centre) + np.abs(shift)[:, None]) + 2.0**-140
    margin = (error[:, None] + slack) * (1 + 1e-9)
    high = _outward(centre + margin, up=True)
    low = _outward(centre - margin - 2.0**-22 * np.abs(targets) - 2.0**-147, up=False)
    return high, low


class _Decisions:
    """What the matrix product decided: per user and split the items above the band
    (``above``), per entry and sampled negative whether the global score beats the
    held-out item, and the (user, item, split) comparisons left to the fixed order."""

    def __init__(self, users: int, entry_owner: np.ndarray, sampled: int) -> None:
        self.above = np.zeros((users, 2), dtype=np.int64)
        self._entry_owner = entry_owner
        entries = len(entry_owner)
        self.entries = [np.zeros(entries, dtype=bool), np.zeros(entries, dtype=bool)]
        self.sample = np.zeros((users, sampled), dtype=bool)
        self.pending_entries: list[tuple[int, np.ndarray]] = []  # (split, entry indices)
        self.pending_sample: list[np.ndarray] = []  # flat indices into sample
        self.pending_band: list[tuple[int, np.ndarray, np.ndarray]] = []  # split, users, items

    def pending_pairs(self, entries: Entries, sample: np.ndarray) -> tuple[np.ndarray, ...]:
        """(users, items) of every pending comparison, in a fixed order."""
        owners, items = [], []
        for _, index in self.pending_entries:
            owners.append(entries.owner[index])
            items.append(entries.items[index])
        for flat in self.pending_sample:
            owners.append(flat // sample.shape[1])
            items.append(sample.reshape(-1)[flat])
        for _, users, band in self.pending_band:
            owners.append(users)
            items.append(band)
        if not owners:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(owners), np.concatenate(items)

    def resolve(self, exact: np.ndarray, targets: np.ndarray) -> None:
        """Decide the pending comparisons from their fixed-order scores ``exact``."""
        lo = 0
        for k, index in self.pending_entries:
            scores = exact[lo : lo + len(index)]
            owner = self._entry_owner[index]
            self.entries[k][index] = beats(scores, targets[owner, k])
            lo += len(index)
        width = self.sample.shape[1]
        flat_sample = self.sample.reshape(-1)
        for flat in self.pending_sample:
            scores = exact[lo : lo + len(flat)]
            split = (flat % width >= EVAL_NEGATIVES_PER_SPLIT).astype(np.int64)
            flat_sample[flat] = beats(scores, targets[flat // width, split])
            lo += len(flat)
        for k, users, _ in self.pending_band:
            scores = exact[lo : lo + len(users)]
            beaten = users[beats(scores, targets[users, k])]  # counts: exact in any order
            self.above[:, k] += np.bincount(beaten, minlength=len(self.above))
            lo += len(users)


def _scan_tensors(
    table: DeviceTable,
    weight: torch.Tensor,
    entries: Entries,
    sample: np.ndarray,
    high: np.ndarray,
    low: np.ndarray,
    decided: _Decisions,
) -> None:
    """The matrix product, a block of users at a time: counts above the band, the band's
    items, and the entries' and sampled negatives' comparisons, in tensor operations."""
    device = weight.device
    num_items = table.rows.shape[0]
    a = len(weight)
    block_scores = BLOCK_SCORES if device.type == "cpu" else DEVICE_BLOCK_SCORES
    step = max(1, block_scores // max(num_items, 1))
    bounds = np.searchsorted(entries.owner, np.arange(0, a + step, step))
    count_dtype = torch.float32 if num_items < 1 << 24 else torch.float64
    # The product and the comparisons write into buffers kept across blocks.
    product = torch.empty((min(step, a), num_items), dtype=weight.dtype, device=device)
    counts = torch.empty((min(step, a), num_items), dtype=count_dtype, device=device)
    for block, lo in enumerate(range(0, a, step)):
        hi = min(a, lo + step)
        scores = torch.mm(weight[lo:hi], table.transposed, out=product[: hi - lo])
        buffer = counts[: hi - lo]
        high_t = torch.from_numpy(high[lo:hi]).to(device)
        low_t = torch.from_numpy(low[lo:hi]).to(device)
        band = torch.zeros(hi - lo, dtype=torch.bool, device=device)
        for k in range(2):
            above = torch.gt(scores, high_t[:, k : k + 1], out=buffer).sum(1)
            at_least = torch.ge(scores, low_t[:, k : k + 1], out=buffer).sum(1)
            decided.above[lo:hi, k] = above.cpu().numpy().astype(np.int64)
            band |= at_least > above  # some item of the row within the band
        rows = torch.nonzero(band).view(-1)
        if len(rows):  # the band's items (a row outside a split's band gives none)
            part, bounds_rows = scores.index_select(0, rows), (low_t[rows], high_t[rows])
            for k in range(2):
                inside = part >= bounds_rows[0][:, k : k + 1]
                inside &= part <= bounds_rows[1][:, k : k + 1]
                row, item = torch.nonzero(inside).cpu().numpy().T
                users = rows.cpu().numpy()[row] + lo
                decided.pending_band.append((k, users.astype(np.int64), item.astype(np.int64)))
        flat = scores.view(-1)
        first, last = bounds[block], bounds[block + 1]
        index = (entries.owner[first:last] - lo) * num_items + entries.items[first:last]
        picked = flat.index_select(0, torch.from_numpy(index).to(device)).cpu().numpy()
        owner = entries.owner[first:last]
        for k in range(2):
            above, inside = _classify(picked, high[owner, k], low[owner, k])
            decided.entries[k][first:last] = above
            decided.pending_entries.append((k, first + np.flatnonzero(inside)))
        width = sample.shape[1]
        index = (np.arange(hi - lo)[:, None] * num_items + sample[lo:hi]).reshape(-1)
        picked = flat.index_select(0, torch.from_numpy(index).to(device)).cpu().numpy()
        picked = picked.reshape(hi - lo, width)
        split = (np.arange(width) >= EVAL_NEGATIVES_PER_SPLIT).astype(np.int64)
        above, inside = _classify(picked, high[lo:hi][:, split], low[lo:hi][:, split])
        decided.sample[lo:hi] = above
        decided.pending_sample.append(np.flatnonzero(inside) + lo * width)


def _scan_host(
    table: DeviceTable,
    weight: torch.Tensor,
    entries: Entries,
    sample: np.ndarray,
    high: np.ndarray,
    low: np.ndarray,
    decided: _Decisions,
) -> None:
    """:func:`_scan_tensors`' decisions on the CPU in NumPy: per split two masks, the count
    above the band the sum of one, the band's items the ``flatnonzero`` of the other less it."""
    num_items = table.rows.shape[0]
    a = len(weight)
    step = max(1, min(BLOCK_SCORES, CPU_BLOCK_SCORES) // max(num_items, 1))
    bounds = np.searchsorted(entries.owner, np.arange(0, a + step, step))
    product = torch.empty((min(step, a), num_items), dtype=weight.dtype)
    masks = np.empty((2, min(step, a), num_items), dtype=bool)
    count_dtype = np.uint16 if num_items < 1 << 16 else np.int64  # exact counts of bytes
    width = sample.shape[1]
    split = (np.arange(width) >= EVAL_NEGATIVES_PER_SPLIT).astype(np.int64)
    bands = (np.ascontiguousarray(low.T), np.ascontiguousarray(high.T))  # [2, a] each
    for block, lo in enumerate(range(0, a, step)):
        hi = min(a, lo + step)
        values = torch.mm(weight[lo:hi], table.transposed, out=product[: hi - lo]).numpy()
        above, band = masks[0, : hi - lo], masks[1, : hi - lo]
        for k in range(2):
            np.greater(values, bands[1][k, lo:hi, None], out=above)
            decided.above[lo:hi, k] = above.view(np.uint8).sum(1, dtype=count_dtype)
            np.greater_equal(values, bands[0][k, lo:hi, None], out=band)
            np.greater(band, above, out=band)  # at or above low, not above high
            row, item = np.divmod(np.flatnonzero(band), num_items)
            decided.pending_band.append((k, row + lo, item))
        flat = values.reshape(-1)
        first, last = bounds[block], bounds[block + 1]
        owner = entries.owner[first:last]
        picked = flat[(owner - lo) * num_items + entries.items[first:last]]
        for k in range(2):
            beat, undecided = _classify(picked, high[owner, k], low[owner, k])
            decided.entries[k][first:last] = beat
            decided.pending_entries.append((k, first + np.flatnonzero(undecided)))
        picked = flat[np.arange(hi - lo)[:, None] * num_items + sample[lo:hi]]
        beat, undecided = _classify(picked, high[lo:hi][:, split], low[lo:hi][:, split])
        decided.sample[lo:hi] = beat
        decided.pending_sample.append(np.flatnonzero(undecided) + lo * width)


def _classify(scores: np.ndarray, high: np.ndarray, low: np.ndarray):
    """(decided to beat, undecided) of product scores against the band ``[low, high]``."""
    return scores > high, (scores >= low) & (scores <= high)
