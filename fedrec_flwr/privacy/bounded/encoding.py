"""An honest client's input to the circuit (:mod:`.circuit`): its row changes clipped to the
bound, in fixed point, with the witnesses and bits the circuit checks.

The clip is the honest client's own doing (a client that skips it is refused, not clipped:
:mod:`.report`): each row's change is shortened to ``B - sqrt(row_dim) 2^-frac_bits`` in L2
(room for the rounding), a user that changed more than ``max_rows`` rows keeps the
``max_rows`` longest changes, and each coordinate is rounded stochastically (up with
probability equal to its fraction, drawn keyed by (seed, user, round): unbiased).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import numpy.typing as npt

from fedrec_flwr.privacy.bounded import field as gf
from fedrec_flwr.privacy.bounded.circuit import (
    LOSS_BITS,
    LOSS_FRAC_BITS,
    SAMPLE_BITS,
    WRAP_CHECKS,
    Bounds,
)
from fedrec_flwr.seeding import keyed_rng


@dataclass(frozen=True)
class Measurement:
    """A user's encoded input before the wrap-around bits: ``values`` (:attr:`Bounds.measured`
    field elements) and ``projected`` (the signed integers ``v = (d, w)`` the projections
    read)."""

    values: np.ndarray
    projected: np.ndarray


def isqrt(values: np.ndarray) -> np.ndarray:
    """Integer square roots of non-negative int64 values below 2^62."""
    v = np.asarray(values, dtype=np.int64)
    root = np.floor(np.sqrt(v.astype(np.float64))).astype(np.int64)
    for _ in range(2):  # float64's sqrt is off by at most one or two here
        root = np.where(root * root > v, root - 1, root)
        root = np.where((root + 1) * (root + 1) <= v, root + 1, root)
    return root


def bits_of(values: npt.ArrayLike, count: int) -> np.ndarray:
    """Little-endian ``count`` bits of non-negative integers, flattened value after value."""
    v = np.asarray(values, dtype=np.int64).reshape(-1, 1)
    if (v < 0).any() or (count < 63 and (v >> count).any()):
        raise ValueError(f"a value does not fit {count} bits")
    return ((v >> np.arange(count, dtype=np.int64)) & 1).astype(np.uint64).ravel()


def witnesses(slack: np.ndarray, rem_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Four greedy integer square roots of each slack and the remainder's bits."""
    rest = np.asarray(slack, dtype=np.int64).copy()
    roots = np.zeros((len(rest), 4), dtype=np.int64)
    for k in range(4):
        roots[:, k] = isqrt(rest)
        rest -= roots[:, k] * roots[:, k]
    return roots, bits_of(rest, rem_bits)


def clipped(bounds: Bounds, items: np.ndarray, changes: np.ndarray, draw) -> tuple:
    """(items kept, their fixed-point changes int64 [k, row_dim]): each row clipped, at most
    ``max_rows`` rows (the longest), rounded stochastically with ``draw`` (a generator)."""
    items = np.asarray(items, dtype=np.int64)
    changes = np.asarray(changes, dtype=np.float64).reshape(len(items), bounds.row_dim)
    norms = np.sqrt((changes * changes).sum(axis=1))
    if len(items) > bounds.max_rows:
        keep = np.sort(np.argsort(-norms, kind="stable")[: bounds.max_rows])
        items, changes, norms = items[keep], changes[keep], norms[keep]
    scale = 2.0**bounds.frac_bits
    room = bounds.bound - math.sqrt(bounds.row_dim) / scale
    factor = np.where(norms > room, room / np.maximum(norms, 1e-300), 1.0)
    scaled = changes * factor[:, None] * scale
    fixed = np.floor(scaled + draw.random(scaled.shape)).astype(np.int64)
    if ((fixed * fixed).sum(axis=1) > bounds.square_bound).any():
        raise AssertionError("a clipped row exceeds the bound after rounding")
    return items, fixed


def rounding_draw(seed: int, user: int, server_round: int) -> np.random.Generator:
    """The generator user ``user`` rounds its fixed-point changes with in ``server_round``
    (its report and :func:`clipped_sum` draw alike)."""
    return keyed_rng(seed, "secagg-rounding", int(user), server_round)


def clipped_sum(
    bounds: Bounds,
    users: Sequence[int] | np.ndarray,
    blocks: Sequence[tuple[np.ndarray, np.ndarray]],
    seed: int,
    server_round: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(the users' clipped fixed-point changes summed, int64 ``[num_items, row_dim]``; each
    row's count of users): what the verified reports of ``users`` add up to (user
    ``users[j]`` changed rows ``blocks[j][0]`` by ``blocks[j][1]``), rounded with the draws
    their reports use (:func:`~fedrec_flwr.privacy.bounded.client.user_reports`)."""
    total = np.zeros((bounds.num_items, bounds.row_dim), dtype=np.int64)
    counts = np.zeros(bounds.num_items, dtype=np.int64)
    for user, (items, changes) in zip(users, blocks, strict=True):
        kept, fixed = clipped(bounds, items, changes, rounding_draw(seed, user, server_round))
        total[kept] += fixed
        counts[kept] += 1
    return total, counts


def measure(
    bounds: Bounds,
    items: np.ndarray,
    changes: np.ndarray,
    num_samples: int,
    loss_sum: float,
    draw,
) -> Measurement:
    """A user's input (changes of rows ``items`` by ``changes``, its sample count and loss
    sum) as the circuit reads it, before the wrap-around bits."""
    n, r = bounds.num_items, bounds.row_dim
    kept, fixed = clipped(bounds, items, changes, draw)
    d = np.zeros((n, r), dtype=np.int64)
    d[kept] = fixed
    counts = np.zeros(n, dtype=np.int64)
    counts[kept] = 1
    slack = counts * bounds.square_bound - (d * d).sum(axis=1)
    w, rem = witnesses(slack, bounds.rem_bits)
    loss = round(float(loss_sum) * 2.0**LOSS_FRAC_BITS)
    if not 0 <= loss < 1 << LOSS_BITS or not 0 <= int(num_samples) < 1 << SAMPLE_BITS:
        raise ValueError(
            f"a user's loss sum {loss_sum:g} or sample count {num_samples} is out of range: "
            "training has diverged; lower lr, item-lr or dense-lr"
        )
    projected = np.concatenate([d.ravel(), w.ravel()])
    parts = [
        gf.from_signed(projected),
        counts.astype(np.uint64),
        rem,
        bits_of(bounds.max_rows - len(kept), bounds.rows_bits),
        gf.elements([1]),
        bits_of(int(num_samples), SAMPLE_BITS),
        bits_of(loss, LOSS_BITS),
    ]
    return Measurement(np.concatenate(parts), projected)


def wrap_bits(bounds: Bounds, projections: np.ndarray) -> np.ndarray | None:
    """The bits of each projection plus ``beta``, or None when one lies outside
    ``[-beta, beta)`` (the client draws fresh randomness and tries again)."""
    shifted = np.asarray(projections, dtype=np.int64) + bounds.beta
    if len(shifted) != WRAP_CHECKS or (shifted < 0).any() or (shifted >> bounds.wrap_bits).any():
        return None
    return bits_of(shifted, bounds.wrap_bits)


class Aggregate(TypedDict):
    """What :func:`decode` reads from the aggregate of accepted reports."""

    changes: np.ndarray
    counts: np.ndarray
    users: int
    samples: int
    loss: float


def decode(bounds: Bounds, total: np.ndarray) -> Aggregate:
    """The aggregate of accepted reports (:func:`~.circuit.output_of` summed) as numbers:
    ``changes`` [num_items, row_dim] float64, ``counts``, ``users``, ``samples``, ``loss``."""
    values = gf.to_signed(total)
    n, r = bounds.num_items, bounds.row_dim
    return {
        "changes": values[: n * r].reshape(n, r).astype(np.float64) * 2.0**-bounds.frac_bits,
        "counts": values[n * r : n * r + n],
        "users": int(values[-3]),
        "samples": int(values[-2]),
        "loss": float(values[-1]) * 2.0**-LOSS_FRAC_BITS,
    }
