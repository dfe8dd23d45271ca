"""Secure aggregation of the item table: the server learns the round's sum, no node's upload.

Under ``secure-aggregation`` every node is sent the full table (it requests no rows, so its
requests say nothing) and uploads, instead of its sparse rows, one dense vector over the
ring of integers modulo 2^64 (:class:`Layout`):

- the sum over its users of their tuned rows ``U_i`` (every row of the table, zero where no
  user trained it), each user's row in fixed point: ``round(x * 2^32)``
  (:data:`FRACTION_BITS`; resolution 2.3e-10);
- the number of its users that trained each row (so that the server can divide as
  ``round-mean`` and ``toucher-mean`` do);
- the sum of its users' tuned shared-dense parameters (FedNCF's and FedRecGEL's MLP), in
  the same fixed point;
- its number of users, of training samples, and its loss sum (``2^16`` fixed point);

plus masks that cancel in the sum: towards each neighbour of the round's graph a pairwise
mask (``+m`` from the lower partition id, ``-m`` from the higher; ``m`` the ChaCha20
keystream under a key agreed with X25519 and derived for the round), and a self-mask the
unmask step removes (:mod:`~fedrec_flwr.privacy.secagg_dropout`; the node's checks before it
masks: :mod:`~fedrec_flwr.privacy.secagg_trust`). The sum is exact integer arithmetic, so
the unmasked total depends neither on the masks nor on how users are packed into nodes;
the table the server computes differs from the plain one by at most the fixed point's
resolution per coordinate.

Range: a user's value of one coordinate must stay strictly within ``2^30 / num_users`` (the
decoded total then stays within half the signed 64-bit range, so a vector shifted by 2^63
never decodes); a node whose value does not (or is NaN) fails its round with an error that
says so. The server refuses a sum that is not a round's (:func:`decode`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedrec_flwr.aggregation import DefenceKeys, RowUpload
from fedrec_flwr.privacy.decoys import DecoyKeys
from fedrec_flwr.schema import NON_NEGATIVE, ConfigError, Group, RunValues, key
from fedrec_flwr.seeding import keyed_rng

#: Fixed point of the row and dense changes: ``x`` travels as ``round(x * 2^32)``.
FRACTION_BITS = 32
#: Fixed point of the loss sum (a sum over many samples: a wider range, a coarser step).
LOSS_FRACTION_BITS = 16
#: The decoded total of one coordinate lies strictly within +-2^(62 - FRACTION_BITS): half the
#: signed range, so that a vector shifted by 2^63 (a wrap-around) never decodes.
TOTAL_LIMIT = 2.0 ** (62 - FRACTION_BITS)
KEY_BYTES = 32


class SecureAggregationError(ValueError):
    """A node's upload cannot be encoded, or the server's keys or sum are malformed."""


class KeySource(StrEnum):
    """``secure-aggregation-keys``: where a node's X25519 key pair comes from."""

    RANDOM = "random"
    SEEDED = "seeded"


def check_secure_aggregation(config: RunValues) -> None:
    keys = config.group(SecAggKeys)
    if not keys.secure_aggregation:
        if keys.secure_aggregation_keys != KeySource.RANDOM:
            raise ConfigError(
                "secure-aggregation-keys shapes secure aggregation: set secure-aggregation = "
                "true, or leave secure-aggregation-keys = 'random'."
            )
        return
    defences = config.group(DefenceKeys)
    if defences.robust_aggregation != "none" or defences.row_update_bound > 0:
        raise ConfigError(
            "secure-aggregation = true hides every single upload from the server, so its "
            "defences against poisoning (robust-aggregation, row-update-bound) have nothing "
            "to look at. Set robust-aggregation = 'none' and row-update-bound = 0; to bound "
            "each user's change, set secure-aggregation-bound (each user proves its bound)."
        )
    if config.group(DecoyKeys).decoy_ratio > 0:
        raise ConfigError(
            "secure-aggregation = true already sends every node the full table and hides "
            "which rows it changed: decoys add nothing. Set decoy-ratio = 0."
        )


class SecAggKeys(Group):
    title = "Secure aggregation (plug-in)"
    check = check_secure_aggregation

    secure_aggregation: bool = key(
        default=False,
        help="every node gets the full table and uploads a masked dense vector (fixed-point "
        "row changes and counts, pairwise X25519 masks): the server learns only the "
        "round's sum; a missing participant voids the round's shared update",
    )
    secure_aggregation_min_peers: int = key(
        default=2,
        help="the fewest other participants a node masks towards: with fewer, it refuses the "
        "round (the sum of too few uploads says too much about each)",
        range=NON_NEGATIVE,
    )
    secure_aggregation_neighbours: int = key(
        default=0,
        help="each node's neighbours on the round's graph (masks and self-mask shares go to "
        "them; a round survives dropouts while more than half of each survivor's "
        "neighbours answer); 0 = 2 ceil(1.5 log2 n) for a cohort of n nodes (SecAgg+)",
        range=NON_NEGATIVE,
    )
    secure_aggregation_keys: str = key(
        default=KeySource.RANDOM.value,
        help="each node's X25519 key pair: `random` (fresh at each handshake) or `seeded` "
        "(keyed by seed and partition: reproducible uploads for simulation; anyone who "
        "knows the seed can unmask)",
        choices=KeySource,
    )


# --------------------------------------------------------------------- fixed point
def value_limit(total_users: int) -> float:
    """The largest magnitude a user's value of one coordinate may have, exclusive: the
    round's total of ``total_users`` such values then stays strictly within
    +-2^(63 - FRACTION_BITS), so it decodes without wrapping around."""
    return TOTAL_LIMIT / max(total_users, 1)


def fixed(values: np.ndarray, bits: int, limit: float, what: str) -> np.ndarray:
    """``round(values * 2^bits)`` in the ring (uint64), refused at ``+-limit`` and beyond."""
    values = np.asarray(values, dtype=np.float64)
    if values.size and not np.abs(values).max() < limit:  # NaN fails too
        worst = np.abs(values).max()
        raise SecureAggregationError(
            f"secure aggregation encodes a user's {what} strictly within +-{limit:.4g} per "
            f"coordinate (2^30 over the number of users), this one is {worst:.4g}: training "
            "has diverged; lower lr, item-lr or dense-lr."
        )
    return np.rint(values * 2.0**bits).astype(np.int64).view(np.uint64)


def signed(values: np.ndarray) -> np.ndarray:
    """The ring's values as signed integers (two's complement)."""
    return np.asarray(values, dtype=np.uint64).view(np.int64)


@dataclass(frozen=True)
class Layout:
    """Where each part lies in the uploaded vector: the ``num_items x row_dim`` row sums,
    ``num_items`` counts, each shared-dense parameter's sum (by name), then the number of
    users, of samples and the loss sum."""

    num_items: int
    row_dim: int
    dense: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @classmethod
    def of(cls, num_items: int, row_dim: int, dense: Mapping[str, tuple[int, ...]]) -> Layout:
        return cls(num_items, row_dim, tuple(sorted((k, tuple(v)) for k, v in dense.items())))

    @property
    def rows_end(self) -> int:
        return self.num_items * self.row_dim

    def dense_slices(self) -> dict[str, slice]:
        start, out = self.rows_end + self.num_items, {}
        for name, shape in self.dense:
            size = int(np.prod(shape, dtype=np.int64))
            out[name] = slice(start, start + size)
            start += size
        return out

    @property
    def length(self) -> int:
        return self.rows_end + self.num_items + sum(int(np.prod(s)) for _, s in self.dense) + 3


def encode(
    layout: Layout,
    items: np.ndarray,
    rows: np.ndarray,
    dense: Mapping[str, np.ndarray],
    *,
    num_users: int,
    num_samples: int,
    loss_sum: float,
    total_users: int,
) -> np.ndarray:
    """The unmasked vector of some users: ``rows[k]`` is one user's tuned row ``items[k]``
    (a user's rows each once), ``dense[name]`` ``[users, ...]`` each user's tuned copy of a
    shared-dense parameter. Each user's values are rounded on their own, so the vector of
    several users is the exact sum of theirs. ``total_users`` (the federation's) bounds a
    user's value (:data:`TOTAL_LIMIT` over it)."""
    limit = value_limit(total_users)
    out = np.zeros(layout.length, dtype=np.uint64)
    out_rows = out[: layout.rows_end].reshape(layout.num_items, layout.row_dim)
    items = np.asarray(items, dtype=np.int64)
    np.add.at(out_rows, items, fixed(rows, FRACTION_BITS, limit, "item row"))
    counts = np.bincount(items, minlength=layout.num_items).astype(np.uint64)
    out[layout.rows_end : layout.rows_end + layout.num_items] += counts
    for name, where in layout.dense_slices().items():
        value = fixed(dense[name], FRACTION_BITS, limit, f"'{name}'")
        out[where] += value.reshape(len(value), -1).sum(axis=0, dtype=np.uint64)
    out[-3:] = np.array([num_users, num_samples, 0], dtype=np.int64).view(np.uint64)
    out[-1:] = fixed(np.array([loss_sum]), LOSS_FRACTION_BITS, 2.0**46, "loss sum")
    return out


@dataclass(frozen=True)
class Aggregate:
    """The unmasked sum of a round as the server's model takes it."""

    upload: RowUpload  # one upload holding the round's sums (row_changes divides it)
    num_samples: int
    loss_sum: float


def decode(layout: Layout, total: np.ndarray, num_users: int, total_users: int) -> Aggregate:
    """The round's sum as one :class:`~fedrec_flwr.aggregation.RowUpload` (the touched rows'
    sums and counts, the shared-dense sums). Refused (:class:`SecureAggregationError`) unless
    it is the sum of ``num_users`` users (the survivors, by the public schedule) of a
    federation of ``total_users``: counts within 0..num_users, rows no user trained zero,
    every value within its users' share of the encoding's range (:func:`value_limit`)."""
    values = signed(total)
    if len(values) != layout.length:
        raise SecureAggregationError(f"the sum has {len(values)} entries, not {layout.length}")
    decoded_users, num_samples = int(values[-3]), int(values[-2])
    counts = values[layout.rows_end : layout.rows_end + layout.num_items]
    wrong = decoded_users != num_users or num_samples < 0 or values[-1] < 0
    if wrong or not 0 <= counts.min(initial=0) <= counts.max(initial=0):
        raise SecureAggregationError(
            f"the unmasked sum is not the round's ({decoded_users} users where "
            f"{num_users} trained, counts {counts.min(initial=0)}..{counts.max(initial=0)}): "
            "a participant's masks do not cancel, or its vector was tampered with"
        )
    if counts.max(initial=0) > num_users:
        raise SecureAggregationError(
            f"the unmasked sum counts {counts.max()} users of one row, more than the "
            f"{num_users} that trained: a participant's vector was tampered with"
        )
    rows = values[: layout.rows_end].reshape(layout.num_items, layout.row_dim)
    bound = value_limit(total_users) * 2.0**FRACTION_BITS  # per user, in the ring's units
    beyond = np.abs(rows.astype(np.float64)) >= counts[:, None] * bound
    beyond &= (rows != 0) | (counts[:, None] > 0)
    shapes = dict(layout.dense)
    dense_raw = {name: values[where] for name, where in layout.dense_slices().items()}
    dense_beyond = [
        name
        for name, raw in dense_raw.items()
        if not (np.abs(raw.astype(np.float64)) < max(num_users, 1) * bound).all()
    ]
    if beyond.any() or dense_beyond:
        where = (
            f"row {int(np.flatnonzero(beyond.any(axis=1))[0])}"
            if beyond.any()
            else f"'{dense_beyond[0]}'"
        )
        raise SecureAggregationError(
            f"the unmasked sum holds a value of {where} beyond what its users can encode "
            "(a row no user trained must be zero): a participant's vector was tampered with"
        )
    scale = 2.0**-FRACTION_BITS
    touched = np.flatnonzero(counts)
    sums = rows[touched].astype(np.float64) * scale
    dense_sums = {
        name: raw.astype(np.float64).reshape(shapes[name]) * scale
        for name, raw in dense_raw.items()
    }
    upload = RowUpload(touched, sums, counts[touched].astype(np.int64), num_users, dense_sums)
    return Aggregate(upload, num_samples, float(values[-1]) * 2.0**-LOSS_FRACTION_BITS)


# ------------------------------------------------------------------------ the keys
def private_key(seed: int, partition: int, source: str) -> X25519PrivateKey:
    """A node's key pair: fresh from the OS (``random``) or keyed by (seed, partition)."""
    if source == KeySource.SEEDED:
        raw = keyed_rng(seed, "secagg-key", partition).bytes(KEY_BYTES)
        return X25519PrivateKey.from_private_bytes(raw)
    return X25519PrivateKey.generate()


def private_bytes(key: X25519PrivateKey) -> np.ndarray:
    from cryptography.hazmat.primitives import serialization as ser

    raw = key.private_bytes(ser.Encoding.Raw, ser.PrivateFormat.Raw, ser.NoEncryption())
    return np.frombuffer(raw, dtype=np.uint8).copy()


def public_bytes(key: X25519PrivateKey) -> np.ndarray:
    from cryptography.hazmat.primitives import serialization as ser

    raw = key.public_key().public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)
    return np.frombuffer(raw, dtype=np.uint8).copy()


def load_private(raw: np.ndarray) -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(np.asarray(raw, dtype=np.uint8).tobytes())


def shared_secret(own: X25519PrivateKey, peer_public: np.ndarray) -> bytes:
    """X25519 agreement with a peer's public key (the same bytes on both sides)."""
    peer = np.asarray(peer_public, dtype=np.uint8)
    if peer.shape != (KEY_BYTES,):
        raise SecureAggregationError(f"a public key is {KEY_BYTES} bytes, not {peer.shape}")
    return own.exchange(X25519PublicKey.from_public_bytes(peer.tobytes()))


def mask_stream(secret: bytes, server_round: int, length: int, context: bytes = b"") -> np.ndarray:
    """``length`` ring elements of the ChaCha20 keystream keyed by HKDF(secret, round,
    context): ``context`` is the round's digest (the run id, the round, the cohort and the
    model sent: :func:`~fedrec_flwr.privacy.secagg_trust.round_digest`), so a mask serves
    one round of one run, and only peers sent the same model share it."""
    info = b"fedrec secure aggregation round %d|" % server_round + context
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)
    stream = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
    return np.frombuffer(stream.update(bytes(8 * length)), dtype=np.uint64)


def masked(
    vector: np.ndarray,
    own: X25519PrivateKey,
    partition: int,
    peers: np.ndarray,
    keys: np.ndarray,
    server_round: int,
    context: bytes = b"",
) -> np.ndarray:
    """``vector`` plus one mask per other peer (``peers``: partition ids, ``keys`` their
    public keys ``[p, 32]``): added towards a higher partition id, subtracted towards a
    lower one, so that the masks of the round cancel in the sum."""
    peers = np.asarray(peers, dtype=np.int64)
    keys = np.asarray(keys, dtype=np.uint8).reshape(len(peers), -1)
    mine = np.flatnonzero(peers == partition)
    if len(mine) != 1 or not np.array_equal(keys[mine[0]], public_bytes(own)):
        raise SecureAggregationError(
            f"the server's list of the round's participants does not hold partition "
            f"{partition} with this node's public key: the round cannot be aggregated"
        )
    out = np.array(vector, dtype=np.uint64)
    for peer, peer_key in zip(peers, keys, strict=True):
        if peer == partition:
            continue
        mask = mask_stream(shared_secret(own, peer_key), server_round, len(out), context)
        if partition < peer:
            out += mask
        else:
            out -= mask
    return out


def ring_sum(vectors: Sequence[np.ndarray]) -> np.ndarray:
    """The sum of the uploads modulo 2^64: the masks cancel, the round's total remains."""
    total = np.zeros(len(vectors[0]), dtype=np.uint64)
    for vector in vectors:
        total += vector
    return total


# ------------------------------------------------------- the audit's faithful view
#: Called with (user, round, the item rows the server reads of the user's upload, the full
#: table it was sent, the user's rows in the clear; rows ``[num_items, row_dim]``) in the
#: faithful mode's view (each user its own node, every other participant a peer): under
#: secure aggregation its masked vector read as fixed point, under
#: ``secure-aggregation-bound`` the leader's share of its report. An observer with
#: ``wants(user, round)`` is asked first (the masks are costly).
Observer = Callable[[int, int, np.ndarray, np.ndarray, np.ndarray], None]
OBSERVERS: list[Observer] = []


def wanted(user: int, server_round: int) -> list[Observer]:
    """The observers that want ``user``'s view of ``server_round``."""
    return [
        observer
        for observer in OBSERVERS
        if getattr(observer, "wants", lambda *_: True)(user, server_round)
    ]


@lru_cache(maxsize=65536)
def _user_key(seed: int, user: int, source: str) -> tuple[X25519PrivateKey, bytes]:
    key = private_key(seed, user, source)
    return key, public_bytes(key).tobytes()


def faithful_view(
    seed: int, source: str, server_round: int, user: int, participants: np.ndarray, vector
) -> np.ndarray:
    """What the server receives from ``user`` as its own node (partition id = user id)
    among the round's ``participants``: its vector masked with every other's key."""
    others = np.asarray(participants, dtype=np.int64)
    keys = np.stack([np.frombuffer(_user_key(seed, int(u), source)[1], np.uint8) for u in others])
    return masked(vector, _user_key(seed, user, source)[0], user, others, keys, server_round)
