"""A node's side of a bounded round: one report per user (:func:`user_reports`), and the
reports as the arrays a train reply carries (:func:`pack`, :func:`unpack`).

Each user's report proves its own change of the table (per user, not per node: a node
packing several users sends several reports). The users' sample and loss sums are the
node's, carried by its first user's report (they are metrics, range-checked, not rows).
Secrets (the report seed, the leader's blind, the proof's randomness) come from the OS, or
under ``secure-aggregation-keys = "seeded"`` keyed by (seed, user, round, attempt) like the
stochastic rounding, so that simulations are reproducible (and anyone who knows the seed
can read them).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from fedrec_flwr.privacy.bounded import field as gf
from fedrec_flwr.privacy.bounded import report as rep
from fedrec_flwr.privacy.bounded.circuit import Bounds
from fedrec_flwr.privacy.bounded.encoding import measure, rounding_draw
from fedrec_flwr.seeding import keyed_rng

#: The arrays of a train reply under bounded secure aggregation.
ARRAYS = ("bounded-users", "bounded-shares", "bounded-proofs", "bounded-seeds")
#: Bytes of a report's seeds: the leader's blind, the two claimed parts, the sealed seed.
META_BYTES = 3 * rep.SEED_BYTES + rep.SEALED_BYTES


def secrets(seed: int, source: str, user: int, server_round: int):
    """The report secrets of ``user`` in ``server_round`` (see the module's doc)."""

    def draw(attempt: int) -> bytes:
        if source == "seeded":
            return keyed_rng(seed, "secagg-bound", user, server_round, attempt).bytes(96)
        return os.urandom(96)

    return draw


def user_reports(
    bounds: Bounds,
    ctx_of,
    users: Sequence[int],
    blocks: Sequence[tuple[np.ndarray, np.ndarray]],
    num_samples: int,
    loss_sum: float,
    *,
    seed: int,
    source: str,
    server_round: int,
    own: X25519PrivateKey,
    helper_public: np.ndarray,
) -> list[rep.Report]:
    """The reports of ``users``: user ``users[j]`` changed rows ``blocks[j][0]`` by
    ``blocks[j][1]`` (``[k, row_dim]``); ``ctx_of(user)`` is its report context."""
    out = []
    for j, (user, (items, changes)) in enumerate(zip(users, blocks, strict=True)):
        user = int(user)
        draw = rounding_draw(seed, user, server_round)
        first = j == 0
        measurement = measure(
            bounds, items, changes, num_samples if first else 0, loss_sum if first else 0.0, draw
        )
        ctx = ctx_of(user)
        out.append(
            rep.shard(
                bounds,
                ctx,
                user,
                measurement,
                secrets(seed, source, user, server_round),
                lambda sigma, ctx=ctx: rep.seal(sigma, own, helper_public, ctx),
            )
        )
    return out


def share_rows(bounds: Bounds, report: rep.Report) -> np.ndarray:
    """What the leader reads of a report's row changes: its share of them, signed, in the
    table's units (``[num_items, row_dim]``): the server's view of a user."""
    d = gf.to_signed(bounds.part(report.share, "d")).astype(np.float64)
    return d.reshape(bounds.num_items, bounds.row_dim) * 2.0**-bounds.frac_bits


def pack(reports: Sequence[rep.Report]) -> dict[str, np.ndarray]:
    """The reports as a train reply's arrays (:data:`ARRAYS`)."""
    seeds = [
        np.frombuffer(r.blind + r.helper_parts[0] + r.helper_parts[1] + r.sealed, np.uint8)
        for r in reports
    ]
    values = (
        np.array([r.user for r in reports], dtype=np.int64),
        np.stack([r.share for r in reports]),
        np.stack([r.proof for r in reports]),
        np.stack(seeds),
    )
    return dict(zip(ARRAYS, values, strict=True))


def unpack(arrays: dict[str, np.ndarray]) -> list[rep.Report]:
    """The reports of a train reply's arrays (refused when malformed)."""
    users, shares = arrays["bounded-users"], arrays["bounded-shares"]
    proofs, seeds = arrays["bounded-proofs"], arrays["bounded-seeds"]
    if users.dtype != np.int64 or users.ndim != 1:
        raise rep.ReportRefused("'bounded-users' is not a vector of int64 user ids")
    if not (len(shares) == len(proofs) == len(seeds) == len(users)):
        raise rep.ReportRefused("the reports' arrays have different lengths")
    if seeds.dtype != np.uint8 or seeds.shape[1:] != (META_BYTES,):
        raise rep.ReportRefused(f"'bounded-seeds' is {seeds.dtype} {seeds.shape}")
    out = []
    for j, user in enumerate(users.tolist()):
        raw = seeds[j].tobytes()
        k = rep.SEED_BYTES
        parts = (raw[k : 2 * k], raw[2 * k : 3 * k])
        out.append(rep.Report(int(user), shares[j], proofs[j], raw[:k], parts, raw[3 * k :]))
    return out
