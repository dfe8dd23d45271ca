"""The compiled loops of :mod:`fedrec_flwr.node.host_loops` (numba, cached on disk where
numba can write its cache). Imported on first use: importing numba takes about half a
CPU-second."""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

MASK32 = 0xFFFFFFFF
M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
MASK = np.uint64(MASK32)
SHIFT = np.uint64(32)
#: Most keys :func:`sorted_keys` sorts by buckets (each bucket holds size / 256 keys).
BUCKETED_KEYS = 1 << 12
PHILOX_ROUNDS = 10
ONE, SHIFT_58, S56 = np.uint64(1), np.uint64(58), np.uint64(56)
#: The de Bruijn sequence whose top six bits, times a power of two, name the power.
DE_BRUIJN = np.uint64(0x03F79D71B4CB0A89)
BIT_OF = np.zeros(64, dtype=np.int64)
BIT_OF[[((1 << b) * 0x03F79D71B4CB0A89 >> 58) & 63 for b in range(64)]] = np.arange(64)

jit = numba.njit(cache=True, nogil=True, boundscheck=False)


@jit
def philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of the counter (c0, c1, c2, c3) under the key (k0, k1), uint64
    words below 2**32: the four output words."""
    for _ in range(PHILOX_ROUNDS):
        p0 = c0 * M0
        p1 = c2 * M1
        c0, c1, c2, c3 = (
            (p1 >> SHIFT) ^ c1 ^ k0,
            p1 & MASK,
            (p0 >> SHIFT) ^ c3 ^ k1,
            p0 & MASK,
        )
        k0 = (k0 + W0) & MASK
        k1 = (k1 + W1) & MASK
    return c0, c1, c2, c3


@jit
def lane(words, index):
    c0, c1, c2, c3 = words
    if index == 0:
        return c0
    if index == 1:
        return c1
    if index == 2:
        return c2
    return c3


@jit
def negatives(key, counter, users, sizes, counts, exclusions, num_items, max_attempts):
    """Each user's draws, each redrawn with the next attempt while it is excluded;
    -1 - j where user ``j`` ran out of attempts."""
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    c2, tag = np.uint64(counter[0]), counter[1]
    n = np.uint64(num_items)
    out = np.empty(sizes.sum(), dtype=np.int64)
    marked = np.zeros(num_items, dtype=np.bool_)
    at, seen = 0, 0
    for j in range(len(users)):
        for e in range(seen, seen + counts[j]):
            marked[exclusions[e]] = True
        c1 = np.uint64(users[j] & MASK32)
        size = sizes[j]
        for block in range((size + 3) // 4):
            words = philox(np.uint64(block), c1, c2, np.uint64(tag), k0, k1)
            for k in range(min(4, size - 4 * block)):
                item = np.int64((lane(words, k) * n) >> SHIFT)
                attempt = 1
                while marked[item]:
                    if attempt >= max_attempts:
                        return out, -1 - j
                    again = philox(np.uint64(block), c1, c2, np.uint64(tag + attempt), k0, k1)
                    item = np.int64((lane(again, k) * n) >> SHIFT)
                    attempt += 1
                out[at + 4 * block + k] = item
        for e in range(seen, seen + counts[j]):
            marked[exclusions[e]] = False
        at += size
        seen += counts[j]
    return out, 0


@jit
def sorted_keys(keys, size, buckets, out):
    """``out[:size]``: ``keys[:size]`` (distinct uint64, uniform top bytes) in ascending
    order: spread by their top byte (a counting pass), then an insertion sort, which has
    little left to move; above ``BUCKETED_KEYS`` keys, a quicksort."""
    if size > BUCKETED_KEYS:
        out[:size] = np.sort(keys[:size])
        return
    for k in range(size):
        buckets[keys[k] >> S56] += 1
    total = 0
    for b in range(256):
        total, buckets[b] = total + buckets[b], total
    for k in range(size):
        top = keys[k] >> S56
        out[buckets[top]] = keys[k]
        buckets[top] += 1
    buckets[:] = 0
    for k in range(1, size):
        key, at = out[k], k
        while at > 0 and out[at - 1] > key:
            out[at] = out[at - 1]
            at -= 1
        out[at] = key


@jit
def shuffled(key, counter, users, counts):
    """Each user's sample positions ordered by their words, ties by position: flat
    indices, users in order. Each sample's key is its word above its position (distinct
    keys: any sort gives the stable order of the words)."""
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    c2, c3 = np.uint64(counter[0]), np.uint64(counter[1])
    out = np.empty(counts.sum(), dtype=np.int64)
    most = counts.max() if len(counts) else 0
    keys, ordered = np.empty(most, dtype=np.uint64), np.empty(most, dtype=np.uint64)
    buckets = np.zeros(256, dtype=np.int64)
    at = 0
    for j in range(len(users)):
        size = counts[j]
        c1 = np.uint64(users[j] & MASK32)
        for block in range((size + 3) // 4):
            four = philox(np.uint64(block), c1, c2, c3, k0, k1)
            for k in range(min(4, size - 4 * block)):
                keys[4 * block + k] = (lane(four, k) << SHIFT) | np.uint64(4 * block + k)
        sorted_keys(keys, size, buckets, ordered)
        for k in range(size):
            out[at + k] = at + np.int64(ordered[k] & MASK)
        at += size
    return out


@jit
def lowest_bit(word):
    """The index of the lowest set bit of a non-zero uint64 (a de Bruijn multiply)."""
    return BIT_OF[((word & (~word + ONE)) * DE_BRUIJN) >> SHIFT_58]


@jit
def distinct(bounds, items, num_items):
    """Each user's distinct items (sorted, users in order) and each entry's place
    among them: the items marked in a bitmap, read back in order."""
    bits = np.zeros((num_items + 63) >> 6, dtype=np.uint64)
    where = np.empty(num_items, dtype=np.int64)
    found = np.empty(len(items), dtype=np.int64)
    inverse = np.empty(len(items), dtype=np.int64)
    row_counts = np.zeros(len(bounds) - 1, dtype=np.int64)
    total = 0
    for j in range(len(bounds) - 1):
        first, low, high = total, len(bits), -1
        for k in range(bounds[j], bounds[j + 1]):
            item = items[k]
            word, bit = item >> 6, ONE << np.uint64(item & 63)
            if not bits[word] & bit:
                bits[word] |= bit
                total += 1
                low, high = min(low, word), max(high, word)
        at = first
        for word in range(low, high + 1):
            marks = bits[word]
            while marks:
                found[at] = (word << 6) + lowest_bit(marks)
                where[found[at]] = at
                marks &= marks - ONE
                at += 1
            bits[word] = 0
        for k in range(bounds[j], bounds[j + 1]):
            inverse[k] = where[items[k]]
        row_counts[j] = total - first
    return found[:total].copy(), inverse, row_counts


@jit
def row_sums(inverse, rows, num_out):
    sums = np.zeros((num_out, rows.shape[1]), dtype=np.float64)
    for k in range(rows.shape[0]):
        out = sums[inverse[k]]
        for c in range(rows.shape[1]):
            out[c] += np.float64(rows[k, c])
    return sums


@jit
def repeated_entries(rows, counts):
    """Indices of the entries whose row occurs more than once in ``rows``, in order
    (``counts``: zeros over the table's rows, left zero)."""
    for k in range(len(rows)):
        counts[rows[k]] += 1
    found = 0
    for k in range(len(rows)):
        if counts[rows[k]] > 1:
            found += 1
    out = np.empty(found, dtype=np.int64)
    found = 0
    for k in range(len(rows)):
        if counts[rows[k]] > 1:
            out[found] = k
            found += 1
    for k in range(len(rows)):
        counts[rows[k]] = 0
    return out


@jit
def batch_entries(base, start, size, source, sample_rows, sample_labels, total):
    """Rows and labels of an epoch's flat step buffers: batch ``b``'s samples (shuffled
    positions ``start[b]`` on, through ``source``) at entries ``base[b]`` on; zero in the
    padding."""
    rows = np.zeros(total, dtype=np.int64)
    labels = np.zeros(total, dtype=np.float32)
    for b in range(len(size)):
        for i in range(size[b]):
            s = source[start[b] + i]
            rows[base[b] + i] = sample_rows[s]
            labels[base[b] + i] = sample_labels[s]
    return rows, labels


@intrinsic
def fma32(typingctx, a, b, c):
    """``a * b + c`` rounded once (float32): LLVM's ``llvm.fma``, a fused multiply-add on
    every CPU (PyTorch's vectorised ``add`` with ``alpha`` computes the same)."""
    float32 = ir.FloatType()
    signature = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, sig, args):
        function = ir.FunctionType(float32, [float32, float32, float32])
        return builder.call(builder.module.declare_intrinsic("llvm.fma", [float32], function), args)

    return signature, codegen


@intrinsic
def prefetch_row(typingctx, table, row):
    """Ask the CPU to bring row ``row`` of the 2-D array ``table`` into its caches (LLVM's
    ``llvm.prefetch``, a read kept in all levels): no value read, no fault, no effect on
    any result; a loop over rows in a known order hides their memory latency."""
    signature = types.void(table, row)

    def codegen(context, builder, sig, args):
        kind = sig.args[0]
        array = context.make_array(kind)(context, builder, args[0])
        zero = context.get_constant(types.intp, 0)
        at = cgutils.get_item_pointer(context, builder, kind, array, [args[1], zero])
        byte = ir.IntType(8).as_pointer()
        int32 = ir.IntType(32)
        function = ir.FunctionType(ir.VoidType(), [byte, int32, int32, int32])
        call = cgutils.get_or_insert_function(builder.module, function, "llvm.prefetch.p0i8")
        flags = [ir.Constant(int32, 0), ir.Constant(int32, 3), ir.Constant(int32, 1)]
        builder.call(call, [builder.bitcast(at, byte), *flags])
        return context.get_dummy_value()

    return signature, codegen


@jit
def add_rows(table, index, source, alpha):
    """``table[index[k]] += alpha * source[k]`` for every entry ``k`` in order, each value
    one fused multiply-add (float32 ``alpha``): ``index_add_`` bit for bit."""
    for k in range(len(index)):
        row = table[index[k]]
        for c in range(table.shape[1]):
            row[c] = fma32(source[k, c], alpha, row[c])  # type: ignore[call-arg]  # typed by numba


@jit
def add_outer_rows(table, index, scale, vector, alpha):
    """:func:`add_rows` of the source ``scale[u, b] * vector[u]`` at entry ``k = u * B + b``
    (``scale`` [a, B], ``vector`` [a, r]), each product rounded to float32 before its fused
    multiply-add: the same values as :func:`add_rows` of the products' tensor."""
    users, width = scale.shape
    for user in range(users):
        factors, values = scale[user], vector[user]
        for b in range(width):
            factor, row = factors[b], table[index[user * width + b]]
            for c in range(table.shape[1]):
                product = factor * values[c]
                row[c] = fma32(product, alpha, row[c])  # type: ignore[call-arg]  # typed by numba


@jit
def candidate_rows(offsets, items, candidates, num_items):
    """Which of user ``j``'s rows ``items[offsets[j]:offsets[j + 1]]`` are among its
    candidates ``candidates[j]`` (a scratch of marks over the items)."""
    marked = np.zeros(num_items, dtype=np.bool_)
    keep = np.empty(len(items), dtype=np.bool_)
    for j in range(len(offsets) - 1):
        for c in range(candidates.shape[1]):
            marked[candidates[j, c]] = True
        for k in range(offsets[j], offsets[j + 1]):
            keep[k] = marked[items[k]]
        for c in range(candidates.shape[1]):
            marked[candidates[j, c]] = False
    return keep


@jit
def stored_pairs(indptr, stored, positions, items):
    """Where each (position, item) pair lies in a CSR store (``stored[indptr[p]:indptr[p
    + 1]]``: position ``p``'s sorted items), by a binary search in its own items; whether
    it is held (where not, the index is 0)."""
    where = np.zeros(len(items), dtype=np.int64)
    held = np.zeros(len(items), dtype=np.bool_)
    for k in range(len(items)):
        low, end, item = indptr[positions[k]], indptr[positions[k] + 1], items[k]
        high = end
        while low < high:
            middle = (low + high) >> 1
            if stored[middle] < item:
                low = middle + 1
            else:
                high = middle
        if low < end and stored[low] == item:
            where[k], held[k] = low, True
    return where, held


@jit
def pair_positions(bounds, items, wanted, slots, out):
    """Index ``k`` of user ``j``'s pair (``items[k]``, ``k`` in ``bounds[j]:bounds[j + 1]``)
    of each item ``wanted[j, s]`` (-1 where none), into ``out``: the user's items marked in
    ``slots`` (all -1, and -1 again after), then its wanted items read."""
    for j in range(wanted.shape[0]):
        for k in range(bounds[j], bounds[j + 1]):
            slots[items[k]] = k
        for s in range(wanted.shape[1]):
            out[j, s] = slots[wanted[j, s]]
        for k in range(bounds[j], bounds[j + 1]):
            slots[items[k]] = -1


@jit
def rows_into(order, source, local, out):
    """``out[order[n]] = source[local[n]]`` for every ``n``, a row at a time (``source``
    and ``out``: [n, width])."""
    for n in range(len(order)):
        row, target = source[local[n]], out[order[n]]
        for c in range(source.shape[1]):
            target[c] = row[c]
