"""Reports of clients that do not follow bounded secure aggregation's protocol: an input
that breaks one bound, shared and proven as the protocol shares and proves (an honest proof
of a false statement), for any :class:`~fedrec_flwr.privacy.bounded.circuit.Bounds`."""

from __future__ import annotations

import math

import numpy as np

from fedrec_flwr.privacy.bounded import circuit as circ
from fedrec_flwr.privacy.bounded import encoding as enc
from fedrec_flwr.privacy.bounded import field as gf
from fedrec_flwr.privacy.bounded import flp
from fedrec_flwr.privacy.bounded import report as rep

SIGMA, BLIND = bytes(range(32)), bytes(range(32, 64))


def signed_rows(bounds, values):
    """The input's row changes ``[n, r]`` and row counts, as signed integers."""
    n, r = bounds.num_items, bounds.row_dim
    return gf.to_signed(bounds.part(values, "d")).reshape(n, r), gf.to_signed(
        bounds.part(values, "c")
    )


def rebuilt(bounds, values, d, counts):
    """``values`` with rows ``d`` and ``counts``, and witnesses, remainders and the rows'
    slack bits made to fit them (only the check a cheat targets fails)."""
    slack = counts * bounds.square_bound - (d * d).sum(axis=1)
    w, rem = enc.witnesses(np.maximum(slack, 0), bounds.rem_bits)
    for name, part in (
        ("d", gf.from_signed(d.ravel())),
        ("w", gf.elements(w.ravel())),
        ("c", gf.from_signed(counts)),
        ("rem", rem),
        ("rows", enc.bits_of(max(bounds.max_rows - int(counts.sum()), 0), bounds.rows_bits)),
    ):
        lo, hi = bounds.offsets[name]
        values[lo:hi] = part
    return values


def long_row(bounds, values):
    """One row changed by 1.5 B (its witnesses made of a zero slack)."""
    d, counts = signed_rows(bounds, values)
    top = int(np.flatnonzero(counts)[0])
    d[top] = int(1.5 * bounds.bound * 2**bounds.frac_bits / math.sqrt(bounds.row_dim))
    return rebuilt(bounds, values, d, counts)


def too_many_rows(bounds, values):
    """One row more than max-rows, each within the bound."""
    d, counts = signed_rows(bounds, values)
    counts[: bounds.max_rows + 1] = 1
    return rebuilt(bounds, values, d, counts)


def count_of_two(bounds, values):
    """A row worth two users (its slack made to fit)."""
    d, counts = signed_rows(bounds, values)
    counts[int(np.flatnonzero(counts)[0])] = 2
    return rebuilt(bounds, values, d, counts)


def two_users(bounds, values):
    values[bounds.offsets["user"][0]] = 2
    return values


CHEATS = {
    "a row changed beyond B": long_row,
    "more rows than max-rows": too_many_rows,
    "a row count of 2": count_of_two,
    "a user count of 2": two_users,
}


def with_wrap_bits(bounds, ctx, values):
    """``values`` and the bits of its projections under :func:`forged`'s randomness (bits
    of the projection's low part when it is out of range: a lie)."""
    expanded = rep.expand(bounds, SIGMA)
    measured = gf.sub(values, expanded.share[: bounds.measured])
    own = gf.derive(b"measured", ctx, BLIND, gf.element_bytes(measured))
    helper_part = rep.parts(bounds, ctx, expanded.blind, expanded.share)[0]
    wrap_seed = gf.derive(b"wrap", ctx, gf.derive(b"wrap part", own), helper_part)
    signed = gf.to_signed(values[: bounds.projected]).astype(np.float64)
    if np.abs(signed).max() < 2**30:
        projections = np.rint(circ.project(wrap_seed, signed)[0]).astype(np.int64)
    else:  # huge entries: the projections modulo P, lifted
        limbs = circ.project(wrap_seed, gf.limbs(values[: bounds.projected]))
        projections = gf.to_signed(gf.from_limb_sums(limbs))
    shifted = (projections + bounds.beta) & ((1 << bounds.wrap_bits) - 1)
    return np.concatenate([values, enc.bits_of(shifted, bounds.wrap_bits)])


def forged(bounds, ctx, user, values, own_key, helper_public, lie=False) -> rep.Report:
    """A report of ``values`` (the whole input), shared and proven as the protocol does;
    ``lie``: a proof that lies about one gadget output so that the circuit's output is
    zero."""
    expanded = rep.expand(bounds, SIGMA)
    share = gf.sub(values, expanded.share)
    parts_h = rep.parts(bounds, ctx, expanded.blind, expanded.share)
    full = rep.circuit(bounds, ctx, rep.parts(bounds, ctx, BLIND, share), parts_h)
    left, right, linear = full.evaluate(values, leader=True)
    shape = rep.proof_shape(bounds)
    proof = flp.prove(shape, left, right, gf.expand(gf.derive(b"seeds"), 2 * shape.chunk))
    if lie:  # the gadget's first output shifted so that the circuit outputs zero
        first = 2 * shape.chunk + 1
        out = gf.add(linear, gf.total(proof[first : first + shape.calls]))
        proof[first] = gf.sub(proof[first], out).item()
    sealed = rep.seal(SIGMA, own_key, helper_public, ctx)
    return rep.Report(user, share, gf.sub(proof, expanded.proof), BLIND, parts_h, sealed)


def cheating_report(bounds, ctx, user, cheat, own_key, helper_public, rng) -> rep.Report:
    """User ``user``'s report of an honest-looking change edited by ``cheat``."""
    items = np.sort(rng.choice(bounds.num_items, 4, replace=False))
    changes = rng.normal(size=(4, bounds.row_dim))
    changes *= 0.5 * bounds.bound / np.linalg.norm(changes, axis=1, keepdims=True)
    measured = enc.measure(bounds, items, changes, 10, 1.5, rng)
    values = with_wrap_bits(bounds, ctx, CHEATS[cheat](bounds, measured.values.copy()))
    return forged(bounds, ctx, user, values, own_key, helper_public)
