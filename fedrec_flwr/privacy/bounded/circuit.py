"""The validity circuit of one user's report: its bounded change of the item table.

A report encodes, over the field of :mod:`.field` (fixed point with :attr:`Bounds.frac_bits`
fractional bits), the user's change ``d_i`` of every row ``i`` of the table (``U_i - G_i``,
zero where it trained nothing), a count ``c_i`` per row, a user count and its sample and
loss counts. The circuit accepts it when, as integers:

- every ``c_i`` is 0 or 1, and at most ``max_rows`` (L0) of them are 1 (``L0 - sum c`` in
  bits);
- every row's squared L2 norm satisfies ``|d_i|^2 <= c_i B^2`` (B: ``bound``), so a row the
  user did not touch is zero: the client adds four *witnesses* ``w_i`` and remainder bits
  with ``|d_i|^2 + |w_i|^2 + rem_i = c_i B^2`` (the slack as a sum of squares plus a few
  bits: four greedy integer square roots leave a remainder below :attr:`Bounds.rem_bits`
  bits);
- the user count is 1, the sample count and the loss sum are in range (their bits);
- **no wrap-around** (PINE, Rothblum et al. 2023): squares computed modulo P could be small
  for a vector that is huge as integers, so the circuit also checks ``num_checks`` random
  projections ``<z_k, v>`` of ``v = (d, w)`` (``z`` in {-1, 0, 1} with probabilities 1/4,
  1/2, 1/4, from the wrap-around joint randomness) to lie in ``[-beta, beta)`` (their bits).
  A vector with ``|v| >= 9 beta`` as integers fails each check with probability at least
  1/2 (one coordinate above ``2 beta``: condition on the others; otherwise Berry-Esseen), and
  ``81 beta^2 + B^2 + 2^rem_bits < P`` (:meth:`Bounds.of` chooses ``frac_bits`` so), so a
  vector that passes them all has its rows' squares computed exactly.

All checks are compressed into one sum (``linear + sum_k left_k right_k = 0``, the form
:mod:`.flp` proves) with independent random coefficients ``rho`` (the verification joint
randomness, drawn after the whole input is fixed): a false check survives with probability
1/P. :meth:`Circuit.evaluate` computes ``left``, ``right`` and ``linear`` from one
aggregator's share; the leader adds the constants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from fedrec_flwr.privacy.bounded import field as gf

#: Wrap-around checks: each lets a wrapped vector through with probability at most 1/2.
WRAP_CHECKS = 64
#: An honest projection lies within ``WRAP_ALPHA`` times the honest norm bound but with
#: probability ``2 exp(-alpha^2 / 2)`` (Hoeffding; the client retries with fresh randomness).
WRAP_ALPHA = 4.0
#: ``|v| >= WRAP_FACTOR * beta`` fails a check with probability >= 1/2 (see the module doc).
WRAP_FACTOR = 9
SAMPLE_BITS, LOSS_BITS, LOSS_FRAC_BITS = 32, 48, 16
#: The finest fixed point used (finer steps add nothing to float32 rows).
MAX_FRAC_BITS = 24
#: The coarsest fixed point accepted (2^-8 of a row coordinate).
MIN_FRAC_BITS = 8


class BoundsError(ValueError):
    """The bounds cannot be enforced as asked (no fixed point fits the field)."""


def _rem_bits(square_bound: int) -> int:
    """Bits of what four greedy integer square roots leave of any slack up to the bound."""
    rest = square_bound
    for _ in range(4):
        rest = 2 * math.isqrt(rest)
    return max(1, rest.bit_length())


@dataclass(frozen=True)
class Bounds:
    """What a report proves and how it is laid out: ``num_items`` rows of ``row_dim``, each
    changed by at most ``bound`` in L2, at most ``max_rows`` of them, in fixed point with
    ``frac_bits`` fractional bits."""

    num_items: int
    row_dim: int
    bound: float
    max_rows: int
    frac_bits: int

    @classmethod
    def of(cls, num_items: int, row_dim: int, bound: float, max_rows: int = 0) -> Bounds:
        """The finest fixed point (up to :data:`MAX_FRAC_BITS`) whose squares cannot wrap
        (see the module's doc); ``max_rows`` 0: every row."""
        max_rows = min(max_rows or num_items, num_items)
        for frac_bits in range(MAX_FRAC_BITS, MIN_FRAC_BITS - 1, -1):
            spec = cls(num_items, row_dim, float(bound), max_rows, frac_bits)
            if spec.exact():
                return spec
        raise BoundsError(
            f"secure-aggregation-bound {bound:g} over {max_rows} rows leaves no fixed point of "
            f"at least {MIN_FRAC_BITS} fractional bits in the 61-bit field: lower the bound or "
            "secure-aggregation-max-rows"
        )

    # ------------------------------------------------------------------ the constants
    @cached_property
    def square_bound(self) -> int:
        """``B^2`` in fixed point (a row's squared norm, ``2 frac_bits`` fractional bits)."""
        return math.floor(self.bound**2 * 4.0**self.frac_bits)

    @cached_property
    def rem_bits(self) -> int:
        return _rem_bits(self.square_bound)

    @cached_property
    def rows_bits(self) -> int:
        return self.max_rows.bit_length()

    @cached_property
    def wrap_bits(self) -> int:
        """Bits of a shifted projection: ``beta = 2^(wrap_bits - 1)`` is at least alpha times
        the honest norm bound ``sqrt(max_rows B^2)``."""
        honest = WRAP_ALPHA * math.sqrt(self.max_rows * self.square_bound)
        return max(2, math.ceil(math.log2(honest)) + 1)

    @property
    def beta(self) -> int:
        return 1 << (self.wrap_bits - 1)

    def exact(self) -> bool:
        """A vector passing the wrap-around checks has its rows' squares computed exactly."""
        limit = (WRAP_FACTOR * self.beta) ** 2 + self.square_bound + (1 << self.rem_bits)
        return limit < gf.P

    # ------------------------------------------------------------------- the layout
    @cached_property
    def offsets(self) -> dict[str, tuple[int, int]]:
        """Where each part lies in the input: (start, end)."""
        n, sizes = self.num_items, {}
        sizes["d"] = n * self.row_dim
        sizes["w"] = 4 * n
        sizes["c"] = n
        sizes["rem"] = n * self.rem_bits
        sizes["rows"] = self.rows_bits
        sizes["user"] = 1
        sizes["samples"] = SAMPLE_BITS
        sizes["loss"] = LOSS_BITS
        sizes["wrap"] = WRAP_CHECKS * self.wrap_bits
        out, start = {}, 0
        for name, size in sizes.items():
            out[name] = (start, start + size)
            start += size
        return out

    def part(self, values: np.ndarray, name: str) -> np.ndarray:
        lo, hi = self.offsets[name]
        return values[..., lo:hi]

    @property
    def length(self) -> int:
        return self.offsets["wrap"][1]

    @property
    def measured(self) -> int:
        """Elements before the wrap-around bits (what the wrap-around randomness hashes)."""
        return self.offsets["wrap"][0]

    @property
    def projected(self) -> int:
        """Elements the projections cover: ``v = (d, w)``."""
        return self.offsets["w"][1]

    @property
    def bit_parts(self) -> tuple[str, ...]:
        return ("c", "rem", "rows", "samples", "loss", "wrap")

    @cached_property
    def num_bits(self) -> int:
        return sum(self.offsets[p][1] - self.offsets[p][0] for p in self.bit_parts)

    @property
    def num_products(self) -> int:
        return self.num_bits + self.num_items * (self.row_dim + 4)

    @property
    def num_coefficients(self) -> int:
        """Random coefficients: one per bit, per row, per projection, rows and user."""
        return self.num_bits + self.num_items + WRAP_CHECKS + 2

    @property
    def output_length(self) -> int:
        """What is aggregated: the changes, the counts, users, samples, loss."""
        return self.num_items * (self.row_dim + 1) + 3

    def digest(self) -> bytes:
        """The parameters, for the key derivations (reports of other bounds never mix)."""
        text = f"{self.num_items}|{self.row_dim}|{self.bound!r}|{self.max_rows}|{self.frac_bits}"
        return text.encode()


def from_bits(bits: np.ndarray, count: int) -> np.ndarray:
    """The values (mod P) of little-endian groups of ``count`` bits (shares alike)."""
    groups = gf.elements(bits).reshape(-1, count)
    return gf.total(gf.rotate(groups, np.arange(count, dtype=np.uint64)), axis=1)


def _trit_table() -> np.ndarray:
    """Each byte's four trits, its bit pairs from the high end: 00 -> -1, 01 and 10 -> 0,
    11 -> 1."""
    pairs = (np.arange(256)[:, None] >> np.array([6, 4, 2, 0])) & 3
    return np.array([-1.0, 0.0, 0.0, 1.0])[pairs]


_TRITS = _trit_table()
#: Coordinates whose signs are drawn at a time (a block of signs stays in cache).
SIGN_BLOCK = 2048


def project(key: bytes, vectors: np.ndarray) -> np.ndarray:
    """``[m, WRAP_CHECKS]``: each row of ``vectors`` (float64 ``[m, width]``) times the random
    signs ``z`` of ``key``: in {-1, 0, 1} with probabilities 1/4, 1/2, 1/4 (two keystream
    bits each, coordinate after coordinate, the checks of a coordinate together). Exact
    while the sums stay below 2^53."""
    vectors = np.atleast_2d(vectors)
    width = vectors.shape[1]
    raw = np.frombuffer(gf.stream(key, width * WRAP_CHECKS // 4), dtype=np.uint8)
    raw = raw.reshape(width, WRAP_CHECKS // 4)
    out = np.zeros((vectors.shape[0], WRAP_CHECKS))
    for lo in range(0, width, SIGN_BLOCK):
        signs = np.take(_TRITS, raw[lo : lo + SIGN_BLOCK], axis=0).reshape(-1, WRAP_CHECKS)
        out += vectors[:, lo : lo + SIGN_BLOCK] @ signs
    return out


@dataclass(frozen=True)
class Circuit:
    """The circuit of :class:`Bounds` under its joint randomness: the key of the projections'
    signs (:func:`project`) and the ``coefficients`` (:attr:`Bounds.num_coefficients`)."""

    bounds: Bounds
    wrap_key: bytes
    coefficients: np.ndarray

    def project(self, values: np.ndarray) -> np.ndarray:
        """The projections ``<z_k, v>`` of (a share of) an input, modulo P."""
        limb_sums = project(self.wrap_key, gf.limbs(values[: self.bounds.projected]))
        return gf.from_limb_sums(limb_sums)

    def products(self, values: np.ndarray, leader: bool) -> tuple[np.ndarray, np.ndarray]:
        """(left, right) of (a share of) an input: each bit ``rho b (b - 1)``, each row's
        squares ``-rho x x``; the leader adds the constants."""
        b, rho = self.bounds, self.coefficients
        nb, n = b.num_bits, b.num_items
        bits = np.concatenate([b.part(values, p) for p in b.bit_parts])
        squares = np.concatenate(
            [b.part(values, "d").reshape(n, b.row_dim), b.part(values, "w").reshape(n, 4)], axis=1
        )
        row_rho = rho[nb : nb + n]
        left = np.concatenate(
            [gf.mul(rho[:nb], bits), gf.neg(gf.mul(row_rho[:, None], squares)).ravel()]
        )
        right = np.concatenate([gf.sub(bits, np.uint64(leader)), squares.ravel()])
        return left, right

    def linear(self, values: np.ndarray, leader: bool) -> np.ndarray:
        """The linear part of (a share of) an input; the leader adds the constants."""
        b, rho = self.bounds, self.coefficients
        one = np.uint64(leader)
        nb, n = b.num_bits, b.num_items
        row_rho = rho[nb : nb + n]
        wrap_rho = rho[nb + n : nb + n + WRAP_CHECKS]
        rows_rho, user_rho = rho[-2], rho[-1]
        # each row: c_i B^2 - rem_i (its squares are products)
        rem = from_bits(b.part(values, "rem"), b.rem_bits)
        row_terms = gf.sub(gf.mul(b.part(values, "c"), np.uint64(b.square_bound)), rem)
        linear = gf.dot(row_rho, row_terms)
        # each projection: <z, v> + beta - (its bits)
        shifted = gf.add(self.project(values), np.uint64(b.beta) * one)
        wrapped = gf.sub(shifted, from_bits(b.part(values, "wrap"), b.wrap_bits))
        linear = gf.add(linear, gf.dot(wrap_rho, wrapped))
        # rows touched: sum c + (the slack's bits) = max_rows; the user count is 1
        slack = from_bits(b.part(values, "rows"), b.rows_bits)
        touched = gf.add(gf.total(b.part(values, "c")), slack)
        linear = gf.add(linear, gf.mul(rows_rho, gf.sub(touched, np.uint64(b.max_rows) * one)))
        user = gf.sub(b.part(values, "user")[0], one)
        return gf.add(linear, gf.mul(user_rho, user))

    def evaluate(
        self, values: np.ndarray, leader: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(left, right, linear) of (a share of) an input."""
        return (*self.products(values, leader), self.linear(values, leader))


def output_of(bounds: Bounds, values: np.ndarray) -> np.ndarray:
    """The aggregated part of (a share of) an input: changes, counts, user count, samples and
    the loss sum (its fixed point :data:`LOSS_FRAC_BITS`), :attr:`Bounds.output_length`."""
    samples = from_bits(bounds.part(values, "samples"), SAMPLE_BITS)
    loss = from_bits(bounds.part(values, "loss"), LOSS_BITS)
    return np.concatenate(
        [
            bounds.part(values, "d"),
            bounds.part(values, "c"),
            bounds.part(values, "user"),
            samples,
            loss,
        ]
    )
