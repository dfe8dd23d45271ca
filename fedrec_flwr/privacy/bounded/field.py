"""Arithmetic modulo the Mersenne prime ``P = 2^61 - 1``, vectorised over NumPy arrays.

Elements are ``uint64`` values in ``[0, P)``. A product of two elements takes 122 bits, so
:func:`mul` splits each factor into 31- and 30-bit halves (every partial product fits 64
bits) and folds the result with ``2^61 = 1 (mod P)``. Long sums of products (matrix
products, dot products) go through float64 BLAS on 21-bit limbs (:func:`matmul`): a limb
product takes 42 bits, so up to ``2^11`` of them add up exactly within float64's 53-bit
mantissa.

Keyed expansion (:func:`expand`): field elements from the ChaCha20 stream under a key
derived with BLAKE2b from a label and its inputs (:func:`derive`), the same on every party.
"""

from __future__ import annotations

import hashlib

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

#: The field's modulus, the Mersenne prime 2^61 - 1.
P = (1 << 61) - 1
_P = np.uint64(P)
_LOW31 = np.uint64((1 << 31) - 1)
_LOW30 = np.uint64((1 << 30) - 1)
_LIMB = 21
_LIMB_MASK = np.uint64((1 << _LIMB) - 1)
#: The most limb products one float64 sum holds exactly (42-bit products, 53-bit mantissa).
EXACT_TERMS = 1 << 11
#: Bytes of one element as it travels (little-endian uint64).
ELEMENT_BYTES = 8


def elements(values) -> np.ndarray:
    """``values`` (non-negative integers below P) as field elements."""
    return np.asarray(values, dtype=np.uint64)


def _below(x: np.ndarray) -> np.ndarray:
    """``x`` for ``x < P``, else ``x - P`` (for ``x < 2P``: the wrapped difference is larger)."""
    with np.errstate(over="ignore"):
        return np.minimum(x, x - _P)


def _fold(x: np.ndarray) -> np.ndarray:
    """``x mod P`` for ``x < 2^64`` (two folds, then one conditional subtraction)."""
    x = (x & _P) + (x >> np.uint64(61))
    x = (x & _P) + (x >> np.uint64(61))
    return _below(x)


def _add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _below(a + b)


def _sub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _below(a + (_P - b))


def _mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a_hi, a_lo = a >> np.uint64(31), a & _LOW31
    b_hi, b_lo = b >> np.uint64(31), b & _LOW31
    cross = a_hi * b_lo
    cross += a_lo * b_hi  # < 2^62
    # a*b = hi*2^62 + cross*2^31 + lo, with 2^62 = 2 and cross*2^31 = cross_hi + cross_lo*2^31
    total = (a_hi * b_hi) << np.uint64(1)
    total += cross >> np.uint64(30)
    cross &= _LOW30
    cross <<= np.uint64(31)
    total += cross
    total += a_lo * b_lo  # < 2^61 + 2^32 + 2^61 + 2^62 < 2^64
    return _below((total & _P) + (total >> np.uint64(61)))


#: Elements per block of an elementwise operation: blocks of 128 KiB keep NumPy's temporaries
#: in the allocator's reused memory (a fresh large array each step costs page faults, ten
#: times the arithmetic).
BLOCK = 1 << 14


def _flat(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``x`` broadcast to ``shape`` and flattened (a scalar stays one)."""
    if x.size == 1:
        return x.reshape(())
    return x.reshape(-1) if x.shape == shape else np.broadcast_to(x, shape).reshape(-1)


def _blockwise(kernel, a, b) -> np.ndarray:
    a, b = elements(a), elements(b)
    shape = np.broadcast_shapes(a.shape, b.shape)
    size = int(np.prod(shape, dtype=np.int64))
    if size <= BLOCK:
        return kernel(a, b)
    flat = [_flat(x, shape) for x in (a, b)]
    out = np.empty(size, dtype=np.uint64)
    for lo in range(0, size, BLOCK):
        parts = [x if x.ndim == 0 else x[lo : lo + BLOCK] for x in flat]
        out[lo : lo + BLOCK] = kernel(*parts)
    return out.reshape(shape)


def add(a, b) -> np.ndarray:
    return _blockwise(_add, a, b)


def sub(a, b) -> np.ndarray:
    return _blockwise(_sub, a, b)


def neg(a) -> np.ndarray:
    return sub(np.uint64(0), a)


def mul(a, b) -> np.ndarray:
    """``a * b mod P`` elementwise (broadcasting)."""
    return _blockwise(_mul, a, b)


def rotate(values, shift) -> np.ndarray:
    """``values * 2^shift mod P``: a rotation of the 61 bits (``shift`` an integer below 61,
    or an array of them broadcasting with ``values``)."""
    v, s = elements(values), np.asarray(shift, dtype=np.uint64) % np.uint64(61)
    return ((v << s) & _P) | (v >> (np.uint64(61) - s))


def power(a, exponent: int) -> np.ndarray:
    """``a ** exponent mod P`` elementwise (square and multiply)."""
    result = np.ones_like(elements(a))
    base = elements(a).copy()
    while exponent:
        if exponent & 1:
            result = mul(result, base)
        base = mul(base, base)
        exponent >>= 1
    return result


def inv(a) -> np.ndarray:
    """Inverses (Fermat); zero has none and maps to zero."""
    return power(a, P - 2)


def from_signed(values) -> np.ndarray:
    """Integers of magnitude below P/2 (int64) as field elements."""
    v = np.asarray(values, dtype=np.int64)
    return np.where(v < 0, v + np.int64(P), v).astype(np.uint64)


def to_signed(values) -> np.ndarray:
    """Elements lifted to the integers nearest zero: ``(-P/2, P/2)`` as int64."""
    v = elements(values)
    return np.where(v > _P >> np.uint64(1), v.astype(np.int64) - np.int64(P), v.astype(np.int64))


def reduce_signed(values) -> np.ndarray:
    """Exact integers of magnitude below P (int64, any sign) reduced modulo P."""
    v = np.asarray(values, dtype=np.int64)
    return np.where(v < 0, v + np.int64(P), v).astype(np.uint64)


def limbs(values) -> np.ndarray:
    """The three 21-bit limbs of each element as float64, on a new first axis (each limb a
    contiguous array, as BLAS wants it)."""
    v = elements(values)
    out = np.empty((3, *v.shape), dtype=np.float64)
    for k in range(3):
        out[k] = (v >> np.uint64(_LIMB * k)) & _LIMB_MASK
    return out


def _combine(partials: list[np.ndarray]) -> np.ndarray:
    """``sum_k partials[k] * 2^(21 k) mod P`` of exact integers (int64, magnitude < P)."""
    out = reduce_signed(partials[0])
    for k in range(1, len(partials)):
        out = add(out, rotate(reduce_signed(partials[k]), _LIMB * k))
    return out


def _exact(product: np.ndarray) -> np.ndarray:
    return np.rint(product).astype(np.int64)


def matmul(a, b) -> np.ndarray:
    """``a @ b mod P`` for 2-D field matrices (``a`` [m, k], ``b`` [k, n])."""
    a, b = elements(a), elements(b)
    out = np.zeros((a.shape[0], b.shape[1]), dtype=np.uint64)
    for lo in range(0, a.shape[1], EXACT_TERMS):
        la, lb = limbs(a[:, lo : lo + EXACT_TERMS]), limbs(b[lo : lo + EXACT_TERMS])
        # each limb product is exact (< 2^53); three of them still fit int64
        partials = [np.zeros(out.shape, dtype=np.int64) for _ in range(5)]
        for i in range(3):
            for j in range(3):
                partials[i + j] += _exact(la[i] @ lb[j])
        out = add(out, _combine([_fold(p.view(np.uint64)).view(np.int64) for p in partials]))
    return out


def from_limb_sums(sums: np.ndarray) -> np.ndarray:
    """Elements from exact float64 sums of each limb (``[3, ...]``, magnitude below 2^53:
    e.g. limbs times small signs, summed)."""
    return _combine([_exact(part) for part in sums])


def dot(a, b) -> np.ndarray:
    """``sum(a * b) mod P`` over the last axis."""
    return matmul(np.atleast_2d(elements(a)), elements(b).reshape(-1, 1))[..., 0]


def total(values, axis: int = -1) -> np.ndarray:
    """Sums of elements along ``axis`` (the 32-bit halves summed apart, then folded)."""
    v = elements(values)
    lo = (v & np.uint64(0xFFFFFFFF)).sum(axis=axis, dtype=np.uint64)
    hi = (v >> np.uint64(32)).sum(axis=axis, dtype=np.uint64)
    return add(rotate(_fold(hi), 32), _fold(lo))


def derive(label: bytes, *parts: bytes) -> bytes:
    """A 32-byte key from a label and inputs (BLAKE2b-256 over length-prefixed parts)."""
    h = hashlib.blake2b(b"fedrec bounded secure aggregation|" + label, digest_size=32)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


def stream(key: bytes, num_bytes: int) -> bytes:
    """``num_bytes`` of the ChaCha20 keystream under a 32-byte key."""
    return (
        Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor().update(bytes(num_bytes))
    )


def expand(key: bytes, length: int) -> np.ndarray:
    """``length`` field elements of the keystream under ``key`` (61 bits of each 64; the
    one value equal to P is taken as 0, a bias of 2^-61)."""
    raw = np.frombuffer(stream(key, 8 * length), dtype=np.uint64) & _P
    return np.where(raw == _P, np.uint64(0), raw)


def element_bytes(values) -> bytes:
    """Field elements as they are hashed and sent (little-endian uint64)."""
    return np.ascontiguousarray(elements(values), dtype="<u8").tobytes()
