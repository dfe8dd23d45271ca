"""Keyed random generators: every draw comes from a generator keyed by (seed, stream, keys...).

Keying by (seed, user, round) rather than drawing from one shared stream makes results
independent of how users are packed into nodes, of the order in which nodes run, and of
which process runs them.
"""

from __future__ import annotations

import threading

import numpy as np

# One number per purpose, so that two purposes never share a stream.
STREAMS = {
    "item-init": 1,
    "private-init": 2,
    "train-negatives": 3,
    "shuffle": 4,
    "eval-negatives": 5,
    "participants": 6,
    "dense-init": 7,
    "reconstruct-init": 8,
    "erank-sample": 9,
    "faults": 10,
    "eval-users": 11,
    "ldp-noise": 12,
    "decoys": 13,
    "audit": 14,
    "malicious": 15,
    "secagg-key": 16,
    "secagg-identity": 17,
    "secagg-graph": 18,
    "secagg-bound": 19,
    "secagg-rounding": 20,
    "secagg-verify": 21,
    "fedrap-local-init": 22,
    "itemitem-degree": 23,
    "itemitem-dp": 24,
    # the lab's analyses of a run's state (fedrec_lab.analysis)
    "sharpness-users": 40,
    "sharpness-start": 41,
    "item-views": 42,
}


def keyed_rng(seed: int, stream: str, *keys: int) -> np.random.Generator:
    """A numpy generator determined by ``seed``, the purpose ``stream`` and integer keys."""
    return np.random.default_rng(
        np.random.SeedSequence([int(seed), STREAMS[stream], *map(int, keys)])
    )


# NumPy's SeedSequence (numpy/random/bit_generator.pyx) and PCG64 seeding, for many keys at
# once: the same generators as keyed_rng, without building a SeedSequence per key.
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R, _POOL = 0xCA01F9DD, 0x4973F715, 4
_PCG_MULT = (2549297995355413924 << 64) + 4865540595714422341


def _hashmix(value: np.ndarray, const: list[int]) -> np.ndarray:
    value = value ^ np.uint32(const[0])
    const[0] = (const[0] * _MULT_A) & 0xFFFFFFFF
    value = value * np.uint32(const[0])
    return value ^ (value >> np.uint32(16))


def _mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    result: np.ndarray = np.uint32(_MIX_L) * x - np.uint32(_MIX_R) * y
    return result ^ (result >> np.uint32(16))


def _pcg64_states(words: np.ndarray) -> list[tuple[int, int]]:
    """(state, inc) of PCG64 seeded by SeedSequence(entropy) for each row of ``words``
    (uint32 [n, k]: each entropy word, every key below 2**32)."""
    with np.errstate(over="ignore"):
        table = _pcg64_words(words).tolist()
    return [((sh << 64) | sl, (ih << 64) | il) for sh, sl, ih, il in table]


_LOW32 = np.uint64(0xFFFFFFFF)
_PCG_MULT_HI, _PCG_MULT_LO = np.uint64(_PCG_MULT >> 64), np.uint64(_PCG_MULT & ((1 << 64) - 1))


def _mulhi(a: np.ndarray, b: np.uint64) -> np.ndarray:
    """The high 64 bits of the 128-bit products of uint64 ``a`` and ``b``."""
    s32 = np.uint64(32)
    a0, a1, b0, b1 = a & _LOW32, a >> s32, b & _LOW32, b >> s32
    p00, p01, p10 = a0 * b0, a0 * b1, a1 * b0
    middle = (p00 >> s32) + (p01 & _LOW32) + (p10 & _LOW32)
    result: np.ndarray = a1 * b1 + (p01 >> s32) + (p10 >> s32) + (middle >> s32)
    return result


def _pcg64_words(words: np.ndarray) -> np.ndarray:
    """:func:`_pcg64_states` as uint64 [n, 4] (state high and low words, increment high and
    low words), in uint64 array arithmetic modulo 2**128 (no Python integer per key)."""
    seeds = _seed_words(words)
    v0, v1, v2, v3 = (seeds[:, i] for i in range(4))
    one, s63 = np.uint64(1), np.uint64(63)
    inc_hi, inc_lo = (v2 << one) | (v3 >> s63), (v3 << one) | one
    with np.errstate(over="ignore"):
        lo = inc_lo + v1  # inc + seed
        hi = inc_hi + v0 + (lo < inc_lo).astype(np.uint64)
        product_lo = lo * _PCG_MULT_LO  # (inc + seed) * MULT
        product_hi = _mulhi(lo, _PCG_MULT_LO) + hi * _PCG_MULT_LO + lo * _PCG_MULT_HI
        state_lo = product_lo + inc_lo  # + inc
        state_hi = product_hi + inc_hi + (state_lo < product_lo).astype(np.uint64)
    return np.stack([state_hi, state_lo, inc_hi, inc_lo], axis=1)


def _seed_words(words: np.ndarray) -> np.ndarray:
    """The four uint64 words SeedSequence(entropy) generates to seed PCG64, for each row of
    ``words`` (uint32 [n, k])."""
    n, k = words.shape
    const = [_INIT_A]
    pool = [_hashmix(words[:, i] if i < k else np.zeros(n, np.uint32), const) for i in range(_POOL)]
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = _mix(pool[dst], _hashmix(pool[src], const))
    for src in range(_POOL, k):
        for dst in range(_POOL):
            pool[dst] = _mix(pool[dst], _hashmix(words[:, src], const))
    const_b = _INIT_B
    out = np.empty((n, 8), dtype=np.uint32)
    for i in range(8):  # generate_state(4, np.uint64): eight words, little-endian pairs
        value = pool[i % _POOL] ^ np.uint32(const_b)
        const_b = (const_b * _MULT_B) & 0xFFFFFFFF
        value = value * np.uint32(const_b)
        out[:, i] = value ^ (value >> np.uint32(16))
    return out.view("<u8").astype(np.uint64)


def _entropy_words(seed: int, stream: str, keys: np.ndarray) -> np.ndarray | None:
    """The entropy words (uint32 [n, 2 + k]) of :func:`keyed_rng`'s SeedSequence for each
    row of ``keys`` (int [n, k]), or None where a key or the seed is not below 2**32."""
    keys = np.asarray(keys, dtype=np.int64).reshape(len(keys), -1)
    if (keys < 0).any() or (keys >= 1 << 32).any() or not 0 <= int(seed) < 1 << 32:
        return None
    words = np.empty((len(keys), 2 + keys.shape[1]), dtype=np.uint32)
    words[:, 0], words[:, 1], words[:, 2:] = int(seed), STREAMS[stream], keys
    return words


def _keyed_states(seed: int, stream: str, keys: np.ndarray) -> list[tuple[int, int]]:
    """(state, inc) of :func:`keyed_rng`'s PCG64 for each row of ``keys`` (int [n, k]): in
    array operations where every key and the seed are below 2**32, else row by row."""
    words = _entropy_words(seed, stream, keys)
    if words is None:
        states = []
        for row in np.asarray(keys, dtype=np.int64).reshape(len(keys), -1).tolist():
            state = keyed_rng(seed, stream, *row).bit_generator.state["state"]  # multi-word keys
            states.append((int(state["state"]), int(state["inc"])))
        return states
    return _pcg64_states(words)


def keyed_rngs(seed: int, stream: str, keys: np.ndarray) -> list[np.random.Generator]:
    """``[keyed_rng(seed, stream, *row) for row in keys]`` (``keys`` int [n, k]), built in
    array operations: each generator is the one :func:`keyed_rng` gives, bit for bit.

    The generators are borrowed: their bit generators are this thread's, reset by the next
    call (draw from them before calling again)."""
    states = _keyed_states(seed, stream, keys)
    pool = _BITS.__dict__.setdefault("pool", [])
    while len(pool) < len(states):
        pool.append(np.random.PCG64(0))
    generators = []
    for bits, (state, inc) in zip(pool, states, strict=False):
        bits.state = {
            "bit_generator": "PCG64",
            "state": {"state": state, "inc": inc},
            "has_uint32": 0,
            "uinteger": 0,
        }
        generators.append(np.random.Generator(bits))
    return generators


def keyed_pcg64_states(seed: int, stream: str, keys: np.ndarray) -> np.ndarray:
    """The PCG64 states of :func:`keyed_rngs`' generators, as uint64 [n, 4]: the state's
    high and low words, the increment's high and low words (for compiled loops that step
    them: :mod:`fedrec_flwr.node.pcg_kernels`)."""
    words = _entropy_words(seed, stream, keys)
    if words is not None:  # array arithmetic, no Python integer per key
        with np.errstate(over="ignore"):
            return _pcg64_words(words)
    states = _keyed_states(seed, stream, keys)
    low = (1 << 64) - 1
    return np.array(
        [(s >> 64, s & low, i >> 64, i & low) for s, i in states], dtype=np.uint64
    ).reshape(len(states), 4)


_BITS = threading.local()  # each thread's PCG64 bit generators for keyed_rngs
