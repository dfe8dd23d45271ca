"""Compiled loops (numba) over NumPy's PCG64 generators, for the ``keyed-numpy`` sampler:
each user's generator (its 128-bit state and increment, :func:`fedrec_flwr.seeding.
keyed_pcg64_states`) stepped here, drawing exactly what ``Generator.integers`` and
``Generator.permutation`` draw from it (NumPy's ``random_bounded_uint64_fill`` with
Lemire's rejection on 32-bit words, and ``_shuffle_raw`` with ``random_interval``).
Imported on first use by :mod:`fedrec_flwr.node.host_loops`."""

from __future__ import annotations

import numba
import numpy as np

jit = numba.njit(cache=True, nogil=True, boundscheck=False)

LOW32 = np.uint64(0xFFFFFFFF)
S32, S58, S63 = np.uint64(32), np.uint64(58), np.uint64(63)
#: PCG64's 128-bit multiplier, as (high, low) words.
MULT_HI, MULT_LO = np.uint64(2549297995355413924), np.uint64(4865540595714422341)


@jit
def _mulhi(a, b):
    """The high 64 bits of the 128-bit product of two uint64."""
    a0, a1, b0, b1 = a & LOW32, a >> S32, b & LOW32, b >> S32
    p00, p01, p10 = a0 * b0, a0 * b1, a1 * b0
    middle = (p00 >> S32) + (p01 & LOW32) + (p10 & LOW32)
    return a1 * b1 + (p01 >> S32) + (p10 >> S32) + (middle >> S32)


@jit
def next64(gen):
    """One step of PCG64 (XSL-RR output) on ``gen`` = [state hi, state lo, inc hi, inc lo,
    has a buffered 32-bit word, that word]: state <- state * MULT + inc, then the output."""
    hi, lo = gen[0], gen[1]
    product_lo = lo * MULT_LO
    product_hi = _mulhi(lo, MULT_LO) + hi * MULT_LO + lo * MULT_HI
    new_lo = product_lo + gen[3]
    new_hi = product_hi + gen[2] + (np.uint64(1) if new_lo < product_lo else np.uint64(0))
    gen[0], gen[1] = new_hi, new_lo
    mixed, rotation = new_hi ^ new_lo, new_hi >> S58
    return (mixed >> rotation) | (mixed << ((np.uint64(64) - rotation) & S63))


@jit
def next32(gen):
    """NumPy's ``next_uint32`` of PCG64: the low half of a fresh 64-bit output, its high
    half kept for the next call."""
    if gen[4]:
        gen[4] = np.uint64(0)
        return gen[5]
    word = next64(gen)
    gen[4], gen[5] = np.uint64(1), word >> S32
    return word & LOW32


@jit
def bounded(gen, high):
    """``Generator.integers(0, high)`` (``high`` >= 2): Lemire's multiply, rejecting the
    biased low products."""
    bound = np.uint64(high)
    product = next32(gen) * bound
    leftover = product & LOW32
    if leftover < bound:
        threshold = (LOW32 - (bound - np.uint64(1))) % bound
        while leftover < threshold:
            product = next32(gen) * bound
            leftover = product & LOW32
    return np.int64(product >> S32)


@jit
def interval(gen, most):
    """NumPy's ``random_interval(most)`` below 2**32: masked words until one is at most
    ``most``."""
    if most == 0:
        return 0
    mask = np.uint64(most)
    for shift in (1, 2, 4, 8, 16, 32):
        mask |= mask >> np.uint64(shift)
    value = next32(gen) & mask
    while value > np.uint64(most):
        value = next32(gen) & mask
    return np.int64(value)


@jit
def negatives(states, sizes, counts, exclusions, num_items):
    """Each user's ``sizes[j]`` draws of ``integers(0, num_items)``, then, while any is in
    its exclusion set (``counts[j]`` sorted items of ``exclusions``, users in order), one
    call's redraws of those entries in order (``sample_excluding``'s loop)."""
    out = np.empty(sizes.sum(), dtype=np.int64)
    marked = np.zeros(num_items, dtype=np.bool_)
    wrong = np.empty(sizes.max() if len(sizes) else 0, dtype=np.int64)
    gen = np.zeros(6, dtype=np.uint64)
    at, seen = 0, 0
    for j in range(len(sizes)):
        for e in range(seen, seen + counts[j]):
            marked[exclusions[e]] = True
        gen[:4] = states[j]
        gen[4] = gen[5] = 0
        size = sizes[j]
        for k in range(size):
            out[at + k] = bounded(gen, num_items) if num_items > 1 else 0
        found = 0
        for k in range(size):
            if marked[out[at + k]]:
                wrong[found] = at + k
                found += 1
        while found:
            for w in range(found):
                out[wrong[w]] = bounded(gen, num_items) if num_items > 1 else 0
            still = 0
            for w in range(found):
                if marked[out[wrong[w]]]:
                    wrong[still] = wrong[w]
                    still += 1
            found = still
        for e in range(seen, seen + counts[j]):
            marked[exclusions[e]] = False
        at += size
        seen += counts[j]
    return out


@jit
def permutations(states, counts):
    """Each user's ``permutation(counts[j])`` (``shuffle`` of an arange: from the last
    position down, a swap with ``random_interval`` of it), users after one another."""
    out = np.empty(counts.sum(), dtype=np.int64)
    gen = np.zeros(6, dtype=np.uint64)
    at = 0
    for j in range(len(counts)):
        gen[:4] = states[j]
        gen[4] = gen[5] = 0
        size = counts[j]
        for k in range(size):
            out[at + k] = k
        for i in range(size - 1, 0, -1):
            other = at + interval(gen, i)
            out[at + i], out[other] = out[other], out[at + i]
        at += size
    return out
