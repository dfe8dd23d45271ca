"""A user's report, split between two aggregators, and each aggregator's verification (after
Prio3 and PINE, the IETF VDAF drafts).

The client (:func:`shard`) encodes its input ``x`` (:mod:`.encoding`), draws a 32-byte
seed ``sigma`` and splits ``x = s + h``: the **helper**'s share ``h`` is the keystream of
``sigma`` (it travels as ``sigma``, sealed for the helper: AES-GCM under the X25519 key the
client agrees with the helper, bound to the run, round and user), the **leader**'s (the
server's) ``s = x - h``. The proof of :mod:`.flp` is split alike. Neither share says
anything about ``x`` alone.

Joint randomness (Fiat-Shamir, as Prio3 derives it): each aggregator's *part* hashes its
share with a blind (the leader's blind travels to the leader; the helper's comes from
``sigma``), the seeds hash both parts. The wrap-around seed hashes the parts of the
measurement (everything before the wrap-around bits, which depend on it), the verification
seed the parts of the whole input; the client sends the leader the helper's parts, the
leader sends the helper its own, and the helper checks the client's claim against the parts
it computes. The query point comes from the aggregators' verification key, which clients
never see.

Each aggregator computes its share of the verifier message (:func:`leader_share`,
:func:`helper_share`); their sum decides (:func:`~.flp.decide`). An accepted report's
output shares (:func:`~.circuit.output_of`) join each aggregator's sum.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedrec_flwr.privacy import secagg
from fedrec_flwr.privacy.bounded import field as gf
from fedrec_flwr.privacy.bounded import flp
from fedrec_flwr.privacy.bounded.circuit import Bounds, Circuit, project
from fedrec_flwr.privacy.bounded.encoding import Measurement, wrap_bits

#: Calls of the proof's gadget (see :meth:`~.flp.ProofShape.of`).
GADGET_CALLS = 32
SEED_BYTES = 32
#: A sealed seed: the nonce, the seed, the tag.
SEALED_BYTES = 12 + SEED_BYTES + 16
#: Fresh draws before a client gives up on the wrap-around checks (each try fails with
#: probability about 4 %: :data:`~.circuit.WRAP_ALPHA`).
MAX_TRIES = 64


class ReportRefused(ValueError):  # noqa: N818 (a refusal, not a bug)
    """A report that does not verify (or cannot be opened): its user is dropped."""


def proof_shape(bounds: Bounds) -> flp.ProofShape:
    return flp.ProofShape.of(bounds.num_products, GADGET_CALLS)


def context(run_id: int, server_round: int, user: int, bounds: Bounds) -> bytes:
    """What a report is bound to: the run, the round, the user and the bounds."""
    head = b"run %d|round %d|user %d|" % (run_id, server_round, user)
    return gf.derive(b"context", head, bounds.digest())


@dataclass(frozen=True)
class Report:
    """What a client sends the leader for one user: its shares, the leader's blind, the
    helper's joint-randomness parts (claimed) and ``sigma`` sealed for the helper."""

    user: int
    share: np.ndarray
    proof: np.ndarray
    blind: bytes
    helper_parts: tuple[bytes, bytes]
    sealed: bytes

    @property
    def num_bytes(self) -> int:
        elements = len(self.share) + len(self.proof)
        return elements * gf.ELEMENT_BYTES + len(self.blind) + 2 * SEED_BYTES + len(self.sealed)


@dataclass(frozen=True)
class Expanded:
    """The helper's share of a report, expanded from ``sigma``."""

    share: np.ndarray
    proof: np.ndarray
    blind: bytes


def expand(bounds: Bounds, sigma: bytes) -> Expanded:
    shape = proof_shape(bounds)
    return Expanded(
        gf.expand(gf.derive(b"input", sigma), bounds.length),
        gf.expand(gf.derive(b"proof", sigma), shape.proof_len),
        gf.derive(b"blind", sigma),
    )


def parts(bounds: Bounds, ctx: bytes, blind: bytes, share: np.ndarray) -> tuple[bytes, bytes]:
    """An aggregator's (wrap-around, verification) joint-randomness parts of its share: the
    first hashes the measurement's elements, the second the rest besides."""
    measured = gf.derive(b"measured", ctx, blind, gf.element_bytes(share[: bounds.measured]))
    rest = gf.element_bytes(share[bounds.measured :])
    return gf.derive(b"wrap part", measured), gf.derive(b"verify part", measured, rest)


def circuit(bounds: Bounds, ctx: bytes, leader: tuple, helper: tuple) -> Circuit:
    """The circuit under the joint randomness of the two aggregators' parts."""
    wrap_seed = gf.derive(b"wrap", ctx, leader[0], helper[0])
    verify_seed = gf.derive(b"verify", ctx, leader[1], helper[1])
    return Circuit(bounds, wrap_seed, gf.expand(verify_seed, bounds.num_coefficients))


def query_point(verify_key: bytes, ctx: bytes, last_node: int) -> np.ndarray:
    """The verifier's random point: from the aggregators' key, never a node ``0..last_node``."""
    for attempt in range(8):
        point = gf.expand(gf.derive(b"query", verify_key, ctx, bytes([attempt])), 1)
        if int(point[0]) > last_node:
            return point
    raise AssertionError("the query point kept hitting the nodes")


# ------------------------------------------------------------------------ sealing
def _box(own: X25519PrivateKey, peer_public: np.ndarray, ctx: bytes) -> AESGCM:
    secret = secagg.shared_secret(own, peer_public)
    info = b"fedrec bounded report seed|" + ctx
    return AESGCM(HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret))


def seal(sigma: bytes, own: X25519PrivateKey, helper_public: np.ndarray, ctx: bytes) -> bytes:
    nonce = os.urandom(12)
    return nonce + _box(own, helper_public, ctx).encrypt(nonce, sigma, ctx)


def open_sealed(
    sealed: bytes, own: X25519PrivateKey, client_public: np.ndarray, ctx: bytes
) -> bytes:
    try:
        return _box(own, client_public, ctx).decrypt(sealed[:12], sealed[12:], ctx)
    except Exception as error:  # cryptography's InvalidTag
        raise ReportRefused("the report's sealed seed does not open for this user") from error


# ------------------------------------------------------------------------- client
def shard(
    bounds: Bounds,
    ctx: bytes,
    user: int,
    measurement: Measurement,
    secrets,
    sealer,
) -> Report:
    """The report of a user's measurement. ``secrets(attempt)``: 96 secret bytes (``sigma``,
    the leader's blind, the proof's randomness); ``sealer(sigma)``: ``sigma`` sealed for
    the helper. Fresh secrets until every projection lies in range."""
    shape = proof_shape(bounds)
    for attempt in range(MAX_TRIES):
        raw = secrets(attempt)
        sigma, blind, prover = raw[:32], raw[32:64], raw[64:96]
        helper = expand(bounds, sigma)
        measured = gf.sub(measurement.values, helper.share[: bounds.measured])
        helper_parts = parts(bounds, ctx, helper.blind, helper.share)
        own = gf.derive(b"measured", ctx, blind, gf.element_bytes(measured))
        wrap_seed = gf.derive(b"wrap", ctx, gf.derive(b"wrap part", own), helper_parts[0])
        exact = project(wrap_seed, measurement.projected.astype(np.float64))[0]
        bits = wrap_bits(bounds, np.rint(exact))
        if bits is None:
            continue
        values = np.concatenate([measurement.values, bits])
        share = gf.sub(values, helper.share)
        full = circuit(bounds, ctx, parts(bounds, ctx, blind, share), helper_parts)
        left, right = full.products(values, leader=True)
        seeds = gf.expand(gf.derive(b"wire seeds", prover), 2 * shape.chunk)
        proof = flp.prove(shape, left, right, seeds)
        return Report(
            user=user,
            share=share,
            proof=gf.sub(proof, helper.proof),
            blind=blind,
            helper_parts=helper_parts,
            sealed=sealer(sigma),
        )
    raise AssertionError(f"no draw of {MAX_TRIES} passed the wrap-around checks")


# ------------------------------------------------------------------- aggregators
@dataclass(frozen=True)
class LeaderShare:
    """What the leader computed of a report and sends the helper with it."""

    parts: tuple[bytes, bytes]
    verifier: np.ndarray


def check_shapes(bounds: Bounds, report: Report) -> None:
    shape = proof_shape(bounds)
    share, proof = np.asarray(report.share), np.asarray(report.proof)
    if share.dtype != np.uint64 or share.shape != (bounds.length,):
        raise ReportRefused(
            f"the input share is {share.dtype} {share.shape}, not ({bounds.length},)"
        )
    if proof.dtype != np.uint64 or proof.shape != (shape.proof_len,):
        raise ReportRefused(f"the proof share is {proof.dtype} {proof.shape}")
    if (share >= np.uint64(gf.P)).any() or (proof >= np.uint64(gf.P)).any():
        raise ReportRefused("a share holds a value outside the field")
    if len(report.blind) != SEED_BYTES or len(report.sealed) != SEALED_BYTES:
        raise ReportRefused("the blind or the sealed seed has the wrong size")
    if any(len(part) != SEED_BYTES for part in report.helper_parts):
        raise ReportRefused("a joint-randomness part has the wrong size")


def leader_share(bounds: Bounds, ctx: bytes, report: Report, verify_key: bytes) -> LeaderShare:
    """The leader's parts and verifier share of a report (refused when malformed)."""
    check_shapes(bounds, report)
    shape = proof_shape(bounds)
    own = parts(bounds, ctx, report.blind, report.share)
    full = circuit(bounds, ctx, own, report.helper_parts)
    left, right, linear = full.evaluate(report.share, leader=True)
    point = query_point(verify_key, ctx, 2 * shape.calls)
    return LeaderShare(own, flp.query(shape, left, right, linear, report.proof, point))


def helper_share(
    bounds: Bounds,
    ctx: bytes,
    sigma: bytes,
    leader: LeaderShare,
    claimed: tuple[bytes, bytes],
    verify_key: bytes,
) -> tuple[np.ndarray, Expanded]:
    """The helper's verifier share of a report whose seed it opened (refused when the
    client's claim of the helper's parts is not what the seed gives)."""
    shape = proof_shape(bounds)
    helper = expand(bounds, sigma)
    own = parts(bounds, ctx, helper.blind, helper.share)
    if own != tuple(claimed):
        raise ReportRefused("the client's joint-randomness parts are not its seed's")
    full = circuit(bounds, ctx, leader.parts, own)
    left, right, linear = full.evaluate(helper.share, leader=False)
    point = query_point(verify_key, ctx, 2 * shape.calls)
    return flp.query(shape, left, right, linear, helper.proof, point), helper


def accepts(bounds: Bounds, leader: np.ndarray, helper: np.ndarray) -> bool:
    """The decision on the summed verifier message."""
    return flp.decide(proof_shape(bounds), gf.add(leader, helper))
