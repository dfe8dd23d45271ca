"""Full-catalogue comparisons on the CPU in the fixed order itself: each user's score of every
item computed exactly as :func:`~fedrec_flwr.methods.heads.fixed_order_dots` computes it (the
same float32 products and sums, no FMA, no reassociation) and compared with the user's held-out
items' scores in the same pass; the scores of its entries and sampled negatives are computed
apart, pair by pair, by the same arithmetic.

One compiled loop (numba) per row width, vectorised over items: it only reads the table and
counts (int32 counts per tile of items, so that the loop takes the CPU's full vector width,
and no store that the compiler would have to check against its reads), over tiles of items
that stay in the core's first-level cache. Nothing is materialised, and no comparison is left
undecided, so there is no error bound, band or second pass
(:mod:`fedrec_flwr.node.full_ranking` bounds a BLAS product instead on a device and for small
evaluations, where compiling would not pay). Pure float32 IEEE arithmetic: the same bits on
any CPU, whatever its vector width.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import torch

from fedrec_flwr.data.prepared import EVAL_NEGATIVES_PER_SPLIT
from fedrec_flwr.node import host_loops
from fedrec_flwr.node.rank_entries import Decided, Entries

#: Scores (users x items) an evaluation call must hold for the compiled loop to pay for its
#: compilation (about half a CPU-second a process and row width).
MIN_SCORES = 1 << 24


def applies(weight: torch.Tensor, bias: torch.Tensor | None, num_items: int) -> bool:
    """Do the scores of a linear head (``weight`` [a, r], ``bias``) over ``num_items`` take
    the compiled loop? On the CPU, in float32 (the loop's arithmetic), for enough scores."""
    float32 = weight.dtype == torch.float32 and (bias is None or bias.dtype == torch.float32)
    on_cpu = weight.device.type == "cpu" and (bias is None or bias.device.type == "cpu")
    return float32 and on_cpu and len(weight) * num_items >= MIN_SCORES


def padded_width(width: int) -> int:
    """The width :func:`fixed_order_dots` pads its products to (zero products added)."""
    return max(8, -(-width // 4) * 4)


#: Bytes of the table one tile of items takes (the tile stays in the core's first-level cache
#: while every user of the call is scored against it).
TILE_BYTES = 1 << 15


@cache
def _kernel(groups: int):
    """The compiled loop for rows of ``4 * groups`` values (``groups`` a constant of the loop,
    so the sum over groups unrolls and the loop over items vectorises): per user and
    held-out item, how many items beat it."""
    import numba

    @numba.njit(nogil=True, boundscheck=False)
    def scan(weight, bias, tiles, tile, num_items, targets, counts):
        for t in range(tiles.shape[0]):
            table = tiles[t]  # [4 * groups, stride]: items lo .. lo + width
            width = min(tile, num_items - t * tile)
            for u in range(weight.shape[0]):
                w, b, t0, t1 = weight[u], bias[u], targets[u, 0], targets[u, 1]
                c0 = np.int32(0)  # int32 sums (numba's integers are int64): full-width vectors
                c1 = np.int32(0)
                for i in range(width):
                    head = w[0] * table[0, i] + w[1] * table[1, i]
                    head = head + w[2] * table[2, i]
                    head = head + w[3] * table[3, i]
                    s0 = head + w[4] * table[4, i]
                    s1 = w[5] * table[5, i]
                    s2 = w[6] * table[6, i]
                    s3 = w[7] * table[7, i]
                    for g in range(2, groups):
                        s0 = s0 + w[4 * g] * table[4 * g, i]
                        s1 = s1 + w[4 * g + 1] * table[4 * g + 1, i]
                        s2 = s2 + w[4 * g + 2] * table[4 * g + 2, i]
                        s3 = s3 + w[4 * g + 3] * table[4 * g + 3, i]
                    score = ((s0 + s2) + (s1 + s3)) + b
                    nan = score != score
                    c0 = np.int32(c0 + np.int32((score >= t0) | nan))  # beats: >=, or NaN
                    c1 = np.int32(c1 + np.int32((score >= t1) | nan))
                counts[u, 0] += c0
                counts[u, 1] += c1

    return scan


#: Pairs ahead of the one scored whose table row the pair loop prefetches (the rows of
#: random items come from the last-level cache or memory: their latency, not the arithmetic,
#: bounds the loop without it).
PREFETCH_PAIRS = 16


@cache
def _pair_kernel(groups: int):
    """The compiled fixed-order score of pairs (user ``owner[n]``, item ``items[n]``) from
    the table's rows [I, 4 * groups]: the arithmetic of :func:`_kernel`, one pair at a time,
    the row of the pair :data:`PREFETCH_PAIRS` ahead prefetched."""
    import numba

    from fedrec_flwr.node.host_kernels import prefetch_row

    ahead = PREFETCH_PAIRS

    @numba.njit(nogil=True, boundscheck=False)
    def pairs(weight, bias, rows, owner, items, out):
        for n in range(len(items)):
            if n + ahead < len(items):  # a later pair's row on its way (no value read)
                prefetch_row(rows, items[n + ahead])  # type: ignore[call-arg]  # numba's
            w, x = weight[owner[n]], rows[items[n]]
            head = w[0] * x[0] + w[1] * x[1]
            head = head + w[2] * x[2]
            head = head + w[3] * x[3]
            s0 = head + w[4] * x[4]
            s1 = w[5] * x[5]
            s2 = w[6] * x[6]
            s3 = w[7] * x[7]
            for g in range(2, groups):
                s0 = s0 + w[4 * g] * x[4 * g]
                s1 = s1 + w[4 * g + 1] * x[4 * g + 1]
                s2 = s2 + w[4 * g + 2] * x[4 * g + 2]
                s3 = s3 + w[4 * g + 3] * x[4 * g + 3]
            out[n] = ((s0 + s2) + (s1 + s3)) + bias[owner[n]]

    return pairs


def _tiles(table_t: np.ndarray, padded: int) -> tuple[np.ndarray, int]:
    """``table_t`` [r, I] as tiles [T, padded, stride] of ``tile`` items each, zero rows below
    (the padding's zero products); a row of a tile is 64 bytes longer than its items, so that
    the rows of a tile do not fall on the same sets of the cache."""
    width, num_items = table_t.shape
    tile = max(64, TILE_BYTES // (4 * padded))
    count = max(1, -(-num_items // tile))
    tiles = np.zeros((count, padded, tile + 16), dtype=np.float32)
    flat = np.zeros((padded, count * tile), dtype=np.float32)
    flat[:width, :num_items] = table_t
    tiles[:, :, :tile] = flat.reshape(padded, count, tile).transpose(1, 0, 2)
    return tiles, tile


class PaddedTable:
    """The forms of a table (``table_t`` [r, I]) that the compiled loops read, made on first
    use and kept (the table is the same for every call of a message): its tiles
    (:func:`_tiles`) and its rows padded to the loops' width."""

    def __init__(self, table_t: np.ndarray | torch.Tensor) -> None:
        self._source = table_t
        self._tiles: dict[tuple[int, int], tuple[np.ndarray, int]] = {}
        self._rows: dict[int, np.ndarray] = {}

    @property
    def table_t(self) -> np.ndarray:
        """The table [r, I] as float32 on the host."""
        if isinstance(self._source, torch.Tensor):
            self._source = self._source.cpu().numpy()
        return np.asarray(self._source, dtype=np.float32)

    def tiles(self, padded: int) -> tuple[np.ndarray, int]:
        """:func:`_tiles` of the table (kept per width and tile size)."""
        key = (padded, TILE_BYTES)
        if key not in self._tiles:
            self._tiles[key] = _tiles(self.table_t, padded)
        return self._tiles[key]

    def rows(self, padded: int) -> np.ndarray:
        """The table's rows [I, padded], zero columns after its own."""
        if padded not in self._rows:
            table_t = self.table_t
            rows = np.zeros((table_t.shape[1], padded), dtype=np.float32)
            rows[:, : table_t.shape[0]] = table_t.T
            self._rows[padded] = rows
        return self._rows[padded]


def fixed_order_scores(
    weight: np.ndarray,
    bias: np.ndarray | None,
    table_t: np.ndarray | PaddedTable,
    targets: np.ndarray,
    entries: Entries,
    sample: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per user (``weight`` [a, r] float32, ``bias`` [a] or None) against every item
    (``table_t`` [r, I] float32, or its kept :class:`PaddedTable`): the items whose
    fixed-order score beats each held-out item's (``targets`` [a, 2]), int64 [a, 2]; the
    fixed-order scores of its ``entries`` (float32 [E]) and of its ``sample`` of items
    (float32 [a, S])."""
    table = table_t if isinstance(table_t, PaddedTable) else PaddedTable(table_t)
    a, width = weight.shape
    padded = padded_width(width)
    num_items = table.table_t.shape[1]
    weights = np.zeros((a, padded), dtype=np.float32)
    weights[:, :width] = weight
    shift = np.zeros(a, np.float32) if bias is None else np.asarray(bias, np.float32)
    counts = np.zeros((a, 2), dtype=np.int64)
    tiles, tile = table.tiles(padded)
    _kernel(padded // 4)(
        weights, shift, tiles, tile, num_items, np.ascontiguousarray(targets, np.float32), counts
    )
    rows = table.rows(padded)
    pairs = _pair_kernel(padded // 4)
    entry_scores = np.empty(len(entries.items), dtype=np.float32)
    pairs(weights, shift, rows, entries.owner, entries.items, entry_scores)
    sample_scores = np.empty(sample.shape, dtype=np.float32)
    owner = np.repeat(np.arange(a, dtype=np.int64), sample.shape[1])
    pairs(
        weights,
        shift,
        rows,
        owner,
        np.ascontiguousarray(sample).reshape(-1),
        sample_scores.reshape(-1),
    )
    return counts, entry_scores, sample_scores


def pair_scores(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    table: PaddedTable,
    owner: np.ndarray,
    items: np.ndarray,
) -> np.ndarray:
    """Fixed-order scores (float32 [n]) of the pairs (user ``owner[n]``, item ``items[n]``)
    from the compiled pair loop: :func:`fixed_order_scores`' arithmetic, pair by pair."""
    values = weight.cpu().numpy()
    a, width = values.shape
    padded = padded_width(width)
    weights = np.zeros((a, padded), dtype=np.float32)
    weights[:, :width] = values
    shift = np.zeros(a, np.float32) if bias is None else bias.cpu().numpy().astype(np.float32)
    out = np.empty(len(items), dtype=np.float32)
    _pair_kernel(padded // 4)(
        weights,
        shift,
        table.rows(padded),
        np.ascontiguousarray(owner, np.int64),
        np.ascontiguousarray(items, np.int64),
        out,
    )
    return out


def decide_in_fixed_order(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    table: PaddedTable,
    targets: np.ndarray,
    entries: Entries,
    sample: np.ndarray,
    decided: Decided,
) -> None:
    """Fill ``decided`` (counts above, entries' and sampled negatives' comparisons) from
    :func:`fixed_order_scores`: every comparison decided, none left pending."""
    counts, entry_scores, sample_scores = fixed_order_scores(
        weight.cpu().numpy(),
        None if bias is None else bias.cpu().numpy(),
        table,
        targets,
        entries,
        sample,
    )
    decided.above[:] = counts
    *entry_beats, sample_beats = host_loops.scan_beats(
        entry_scores, entries.owner, sample_scores, targets, EVAL_NEGATIVES_PER_SPLIT
    )
    for k in range(2):
        decided.entries[k][:] = entry_beats[k]
    decided.sample[:] = sample_beats
