"""Secure aggregation that survives dropouts (after SecAgg+, Bell et al., CCS 2020).

Each round's cohort is arranged on a sparse graph, public and keyed by (seed, round)
(:func:`neighbours`: a circulant graph of degree ``k`` over a permutation of the cohort), and
a node masks its vector towards its neighbours only, plus a **self-mask**, the ChaCha20
stream of a fresh 32-byte seed ``b``::

    y_u = x_u + PRG(b_u) + sum over neighbours j of (+m_uj if u < j else -m_uj)

With its masked vector the node sends ``b_u`` split into ``t``-of-``(k + 1)`` Shamir shares
(Flower's :func:`~flwr.common.secure_aggregation.crypto.shamir.create_shares`), one for itself
and one for each neighbour, each encrypted to its holder (AES-GCM under a key agreed with
the holder's X25519 key of the handshake, bound to the round, the sender and the holder).
Once the round's vectors are in, the server tells each node that answered which of its
neighbours did (the **unmask** step, :func:`unmask_answer`), and the node sends the shares
it holds of its surviving neighbours' self-mask seeds, and the seeds of its own pairwise
masks with the neighbours that dropped (it derived them: they serve this round only). The
server rebuilds every survivor's self-mask from ``t`` shares and removes the masks that
the dropped nodes' absence left (:func:`recover`): the survivors' exact sum.

Why a server that lies about who dropped learns no single upload: a node answers the
unmask step once per round, giving for each neighbour either a share of its self-mask
(told it survived) or their pairwise mask (told it dropped), never both, and only if at
least ``t - 1`` of its neighbours survived. To read ``x_u`` the server needs ``t`` shares of
``b_u`` (so ``t - 1`` neighbours told "u survived", who keep their masks with ``u`` to
themselves), and every ``m_uj``: those of the ``t - 1`` or more neighbours ``u`` was told
survived come only from them, told "u dropped". With ``t - 1 > k / 2`` (:func:`threshold`)
the two groups cannot both fit among ``u``'s ``k`` neighbours. A round completes when at
least ``t`` of each survivor's ``k + 1`` share holders answer.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from flwr.common.secure_aggregation.crypto.shamir import combine_shares, create_shares

from fedrec_flwr.privacy import secagg
from fedrec_flwr.seeding import keyed_rng

SEED_BYTES = 32
#: A Shamir share of a 32-byte seed (Flower's format: 4 bytes of index, 3 chunks of 16).
SHARE_BYTES = 52
#: An encrypted share: AES-GCM's 12-byte nonce, the share, its 16-byte tag.
SEALED_BYTES = 12 + SHARE_BYTES + 16


class DropoutError(ValueError):
    """The round cannot be unmasked as asked: a node refuses, or too few answered."""


def degree(cohort_size: int, wanted: int = 0) -> int:
    """Neighbours per node: ``wanted`` (even, at least 2), or ``2 ceil(1.5 log2 n)``
    (SecAgg+'s logarithmic degree), at most everyone else."""
    if cohort_size <= 1:
        return 0
    k = wanted if wanted > 0 else 2 * math.ceil(1.5 * math.log2(cohort_size))
    return min(cohort_size - 1, k + (k % 2))


def threshold(k: int) -> int:
    """Shares of a self-mask seed that rebuild it: more than half of a node's ``k``
    neighbours, plus its own (see the module's doc), and no more than its ``k + 1``."""
    return min(k + 1, k // 2 + 2)


def neighbours(seed: int, server_round: int, cohort: np.ndarray, k: int) -> dict[int, np.ndarray]:
    """Each cohort member's ``k`` neighbours (sorted): a circulant graph (``k / 2`` on each
    side) over a permutation of the cohort keyed by (seed, round), the same for everyone."""
    order = keyed_rng(seed, "secagg-graph", server_round).permutation(np.sort(cohort))
    n, half = len(order), k // 2
    out = {}
    for i, node in enumerate(order.tolist()):
        steps = [s for s in range(-half, half + 1) if s]
        if k % 2 and n % 2 == 0:  # odd k on even n: the opposite node too
            steps.append(n // 2)
        near = {int(order[(i + s) % n]) for s in steps} - {node}
        out[node] = np.array(sorted(near), dtype=np.int64)
    return out


# --------------------------------------------------------------------------- masks
def stream(key: bytes, length: int) -> np.ndarray:
    """``length`` ring elements of the ChaCha20 keystream under a 32-byte ``key``."""
    cipher = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
    return np.frombuffer(cipher.update(bytes(8 * length)), dtype=np.uint64)


def pair_seed(own: X25519PrivateKey, peer_public: np.ndarray, digest: bytes) -> bytes:
    """The seed of the pairwise mask with a peer in the round of ``digest`` (the same on
    both ends; revealing it opens that round's mask only)."""
    secret = secagg.shared_secret(own, peer_public)
    info = b"fedrec secure aggregation pair|" + digest
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


def _share_key(own: X25519PrivateKey, peer_public: np.ndarray, digest: bytes) -> bytes:
    secret = secagg.shared_secret(own, peer_public)
    info = b"fedrec secure aggregation shares|" + digest
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


def _bound(src: int, dst: int, digest: bytes) -> bytes:
    return b"share|%d|%d|" % (src, dst) + digest


def signed_pair(vector: np.ndarray, seed: bytes, node: int, peer: int, add: bool) -> None:
    """Add (``add``) or remove the pairwise mask of ``seed`` as ``node`` put it towards
    ``peer`` (``+`` towards a higher partition, ``-`` towards a lower), in place."""
    mask = stream(seed, len(vector))
    if (node < peer) == add:
        vector += mask
    else:
        vector -= mask


def mask_round(
    vector: np.ndarray,
    own: X25519PrivateKey,
    partition: int,
    near: Mapping[int, np.ndarray],
    digest: bytes,
    t: int,
) -> tuple[np.ndarray, np.ndarray, dict[int, bytes]]:
    """(the masked vector, the self-mask seed's shares sealed for the node itself and each
    neighbour, ``[k + 1, SEALED_BYTES]`` in the order (itself, then the neighbours sorted),
    the pairwise seeds by neighbour) of a node whose neighbours' public keys are ``near``."""
    self_seed = os.urandom(SEED_BYTES)
    out = np.array(vector, dtype=np.uint64) + stream(self_seed, len(vector))
    seeds = {}
    for peer, public in sorted(near.items()):
        seeds[peer] = pair_seed(own, public, digest)
        signed_pair(out, seeds[peer], partition, peer, add=True)
    holders = [partition, *sorted(near)]
    shares = create_shares(self_seed, t, len(holders))
    own_public = secagg.public_bytes(own)
    sealed = np.zeros((len(holders), SEALED_BYTES), dtype=np.uint8)
    for row, (holder, share) in enumerate(zip(holders, shares, strict=True)):
        public = own_public if holder == partition else near[holder]
        nonce = os.urandom(12)
        box = AESGCM(_share_key(own, public, digest))
        data = nonce + box.encrypt(nonce, share, _bound(partition, holder, digest))
        sealed[row] = np.frombuffer(data, dtype=np.uint8)
    return out, sealed, seeds


def open_share(
    own: X25519PrivateKey, sender_public: np.ndarray, sealed: np.ndarray, src: int, dst: int, digest
) -> bytes:
    """A share ``src`` sealed for ``dst`` (this node), refused if it was not."""
    raw = np.asarray(sealed, dtype=np.uint8).tobytes()
    try:
        return AESGCM(_share_key(own, sender_public, digest)).decrypt(
            raw[:12], raw[12:], _bound(src, dst, digest)
        )
    except Exception as error:  # cryptography's InvalidTag: not sealed by src for dst
        raise DropoutError(
            f"a share said to come from partition {src} does not open: the server "
            "forwarded another node's share or altered it"
        ) from error


def unmask_answer(
    partition: int,
    near: Iterable[int],
    seeds: Mapping[int, bytes],
    survivors: Iterable[int],
    shares: Mapping[int, bytes],
    t: int,
) -> tuple[dict[int, bytes], dict[int, bytes]]:
    """A node's answer to the unmask step: (shares it holds of its surviving neighbours'
    and its own self-mask seeds, its pairwise seeds with the neighbours that dropped).
    ``survivors``: the neighbours the server says answered; ``shares``: the opened shares it
    holds, by sender. Refused unless at least ``t - 1`` neighbours survived."""
    near, survivors = set(near), set(map(int, survivors))
    if not survivors <= near:
        raise DropoutError(
            f"partition {partition} is told of survivors {sorted(survivors - near)} that are "
            "not its neighbours"
        )
    if len(survivors) < t - 1:
        raise DropoutError(
            f"partition {partition}: {len(survivors)} of its {len(near)} neighbours survived, "
            f"fewer than {t - 1}: it reveals nothing (the server could unmask a node whose "
            "neighbours it says dropped)"
        )
    missing = sorted((survivors | {partition}) - set(shares))
    if missing:
        raise DropoutError(f"partition {partition} holds no share of {missing}")
    kept = {node: shares[node] for node in survivors | {partition}}
    return kept, {peer: seeds[peer] for peer in sorted(near - survivors)}


def recover(
    total: np.ndarray,
    survivors: Iterable[int],
    shares: Mapping[int, list[bytes]],
    pairs: Mapping[tuple[int, int], bytes],
    t: int,
) -> np.ndarray:
    """The survivors' exact sum from the sum of their masked vectors: each survivor's
    self-mask rebuilt from its ``shares`` (at least ``t``), and each pairwise mask a
    survivor ``u`` put towards a dropped neighbour ``d`` (``pairs[(u, d)]``) removed."""
    out = np.array(total, dtype=np.uint64)
    for node in survivors:
        held = shares.get(node, [])
        if len(held) < t:
            raise DropoutError(
                f"{len(held)} shares of partition {node}'s self-mask came back, {t} rebuild "
                "it: too many of its neighbours dropped"
            )
        out -= stream(combine_shares(held[:t]), len(out))
    for (node, dropped), seed in pairs.items():
        signed_pair(out, seed, node, dropped, add=False)
    return out
