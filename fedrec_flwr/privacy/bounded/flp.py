"""A fully linear proof (FLP, Boneh et al., CRYPTO 2019; the VDAF draft's generic FLP) that a
list of ``n`` products sums, with a linear part, to zero: ``linear + sum_k left_k *
right_k = 0``, where ``left`` and ``right`` are affine in the prover's input.

A validity circuit (:mod:`.circuit`) compresses all its checks into such a sum with random
coefficients. The gadget is ``ParallelSum(Mul, chunk)``: call ``m`` (of ``calls``) takes
``chunk`` pairs and returns the sum of their products. The prover interpolates each of the
``2 chunk`` wires over the nodes ``0..calls`` (node 0 holds a random *wire seed*, which
hides the wire's values), and sends the gadget polynomial ``G(X) = sum_j L_j(X) R_j(X)``
(degree ``2 calls``) as its values at the nodes ``0..2 calls``, after the wire seeds:
``proof = [seeds (2 chunk), G(0..2 calls)]``.

Every step of the verifier up to its decision is linear in (input, proof), so each
aggregator computes it on its share (:func:`query`, the constants added by the leader
only) and the shares add up to the verifier message ``[out, L_1(r)..L_c(r), R_1(r)..R_c(r),
G(r)]`` at a random point ``r`` (not a node). :func:`decide` accepts when ``out = 0`` and
``sum_j L_j(r) R_j(r) = G(r)``. If ``G`` is not the gadget of the wires, the two
polynomials of degree at most ``2 calls`` agree at ``r`` with probability at most
``2 calls / (P - 2 calls - 1)`` (:func:`soundness_error`). The wire seeds make each
``L_j(r)``, ``R_j(r)`` uniform, so the verifier message says nothing but "valid"."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fedrec_flwr.privacy.bounded import field as gf


@dataclass(frozen=True)
class ProofShape:
    """How ``products`` pairs are laid out: ``calls`` gadget calls of ``chunk`` pairs."""

    products: int
    chunk: int
    calls: int

    @classmethod
    def of(cls, products: int, calls: int = 32) -> ProofShape:
        """``calls`` gadget calls (fewer when there are few products): a small number keeps
        the prover's polynomial extension cheap (``calls^2 chunk`` limb products), at a
        verifier message of ``2 chunk + 2`` elements."""
        calls = max(1, min(calls, products))
        return cls(products, max(1, math.ceil(products / calls)), calls)

    @property
    def proof_len(self) -> int:
        return 2 * self.chunk + 2 * self.calls + 1

    @property
    def verifier_len(self) -> int:
        return 2 * self.chunk + 2

    def wires(self, left: np.ndarray, right: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        """The wire values ``[calls + 1, 2 chunk]``: row 0 the seeds, row ``m`` call ``m``'s
        inputs (left pairs, then right pairs; zero past the products)."""
        size = self.calls * self.chunk
        out = np.zeros((self.calls + 1, 2 * self.chunk), dtype=np.uint64)
        out[0] = seeds
        out[1:, : self.chunk] = _padded(left, size).reshape(self.calls, self.chunk)
        out[1:, self.chunk :] = _padded(right, size).reshape(self.calls, self.chunk)
        return out


def _padded(values: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.uint64)
    out[: len(values)] = values
    return out


@lru_cache(maxsize=16)
def _weights(last: int) -> tuple[int, ...]:
    """``1 / prod_{j != k} (k - j)`` over the nodes ``0..last``, which is
    ``(-1)^(last - k) / (k! (last - k)!)``."""
    fact = [1] * (last + 1)
    for k in range(1, last + 1):
        fact[k] = fact[k - 1] * k % gf.P
    out = []
    for k in range(last + 1):
        w = pow(fact[k] * fact[last - k] % gf.P, gf.P - 2, gf.P)
        out.append(w if (last - k) % 2 == 0 else (gf.P - w) % gf.P)
    return tuple(out)


def lagrange(last: int, points) -> np.ndarray:
    """``[len(points), last + 1]``: the Lagrange basis of the nodes ``0..last`` at each point
    (no point may be a node)."""
    weights = _weights(last)
    rows = []
    for point in np.atleast_1d(points).tolist():
        diffs = [(int(point) - k) % gf.P for k in range(last + 1)]
        if 0 in diffs:
            raise ValueError("a Lagrange point is one of the nodes")
        total = 1
        for diff in diffs:
            total = total * diff % gf.P
        rows.append(
            [
                total * pow(diff, gf.P - 2, gf.P) % gf.P * w % gf.P
                for diff, w in zip(diffs, weights, strict=True)
            ]
        )
    return gf.elements(rows)


@lru_cache(maxsize=8)
def _extension(calls: int) -> np.ndarray:
    """The values at ``calls + 1 .. 2 calls`` of the polynomials of degree ``calls`` given
    by their values at ``0..calls``: ``[calls, calls + 1]``."""
    return lagrange(calls, np.arange(calls + 1, 2 * calls + 1))


def prove(shape: ProofShape, left: np.ndarray, right: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """The proof (:data:`ProofShape.proof_len` elements) that ``sum(left * right)`` is the
    gadget outputs' total, with the wire seeds ``seeds`` (``2 chunk`` random elements).

    At a node ``k <= calls`` the gadget is the wires' products summed; beyond, with
    ``lam(x)`` the Lagrange basis of the nodes at ``x``, ``G(x) = lam(x)^T K lam(x)`` where
    ``K = L^T R`` sums the products of the left and right wires' values at each pair of
    nodes (one small matrix product instead of extending every wire)."""
    wires = shape.wires(left, right, seeds)
    lefts, rights = wires[:, : shape.chunk], wires[:, shape.chunk :]
    at_nodes = gf.total(gf.mul(lefts, rights), axis=1)
    pairs = gf.matmul(np.ascontiguousarray(lefts), np.ascontiguousarray(rights.T))
    basis = _extension(shape.calls)
    beyond = gf.total(gf.mul(gf.matmul(basis, pairs), basis), axis=1)
    return np.concatenate([gf.elements(seeds), at_nodes, beyond])


def query(
    shape: ProofShape,
    left: np.ndarray,
    right: np.ndarray,
    linear: np.ndarray,
    proof: np.ndarray,
    point: np.ndarray,
) -> np.ndarray:
    """One aggregator's share of the verifier message, from its shares of the products'
    inputs (``left``, ``right``), of the circuit's linear part (``linear``, one element)
    and of the proof, at the query point ``point``."""
    width = 2 * shape.chunk
    seeds, gadget = proof[:width], proof[width:]
    wires = shape.wires(left, right, seeds)
    at_point = gf.matmul(lagrange(shape.calls, point), wires)[0]
    gadget_at = gf.dot(lagrange(2 * shape.calls, point)[0], gadget)
    out = gf.add(gf.elements(linear).reshape(1), gf.total(gadget[1 : shape.calls + 1]))
    return np.concatenate([out.reshape(1), at_point, np.atleast_1d(gadget_at)])


def decide(shape: ProofShape, verifier: np.ndarray) -> bool:
    """Accept the summed verifier message: zero output and the gadget check at the point."""
    verifier = gf.elements(verifier)
    left, right = verifier[1 : 1 + shape.chunk], verifier[1 + shape.chunk : -1]
    return bool(verifier[0] == 0 and gf.total(gf.mul(left, right)) == verifier[-1])


def soundness_error(shape: ProofShape) -> float:
    """The probability that :func:`decide` accepts for a gadget polynomial that is not the
    wires' (the point uniform among the non-nodes)."""
    degree = 2 * shape.calls
    return degree / (gf.P - degree - 1)
