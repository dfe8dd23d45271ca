"""What a node checks before it masks: secure aggregation against a server that deviates.

The masks of :mod:`fedrec_flwr.privacy.secagg` hide a node's upload only if the peers the
server lists are the round's real participants with their own keys. So each node checks the
server's list (:func:`check_round`) and refuses the round, with an error that names what is
wrong, unless:

- every listed public key is **signed by its partition's identity key** (Ed25519, or the
  EC P-384 key a SuperNode authenticates with), over (run id, partition, key): a key the
  server made or moved to another partition fails the check. The identity keys come from a
  roster the node reads itself (node config ``secagg-roster``: a folder of
  ``<partition>.pub`` OpenSSH public keys, what ``fedrec deploy-local --secure`` writes),
  else from the seed (``secure-aggregation-keys = "seeded"``: simulation; whoever knows the
  seed can sign), else the node pins each partition's identity key the first time the server
  shows it (trust on first use: it holds against a server that deviates only later);
- its own partition appears once, with its own key, and no key appears twice (the same
  mask added and subtracted) nor its own key under another partition;
- the listed partitions are exactly the round's cohort, the partitions holding the users
  that the public schedule (:func:`fedrec_flwr.partition.participants`) makes train, and
  there are at least ``secure-aggregation-min-peers`` other participants;
- the users the server asks it to train are its users among them (so the server cannot tell
  every other node to train nobody and read the target's upload as the sum).

The masks' key derivation holds the run id, the round and a digest of what every participant
must have received alike (:func:`round_digest`: the cohort, the table, the shared-dense
parameters): nodes sent different models do not cancel each other's masks, so the sum says
nothing (model inconsistency, Pasquini et al., CCS 2022).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from fedrec_flwr.partition import participants
from fedrec_flwr.privacy.secagg import SecAggKeys
from fedrec_flwr.privacy.secagg_dropout import degree, neighbours
from fedrec_flwr.run_keys import RunGroups, TrainingKeys
from fedrec_flwr.seeding import keyed_rng

#: The helper aggregator's id where a node's is its partition id (bounded secure
#: aggregation, :mod:`fedrec_flwr.privacy.bounded.helper`): beyond any partition; its roster
#: file is ``helper.pub``.
HELPER_ID = 1 << 32
#: Bytes of a signature as it travels: Ed25519's 64, or P-384 ECDSA's r and s (48 each).
SIGNATURE_BYTES = 96
P384_HALF = 48

PrivateIdentity = Ed25519PrivateKey | ec.EllipticCurvePrivateKey
PublicIdentity = Ed25519PublicKey | ec.EllipticCurvePublicKey


class SecureRoundRefused(ValueError):  # noqa: N818 (a refusal, not a bug)
    """The server's round does not pass the node's checks: the node masks nothing."""


# ------------------------------------------------------------------ identity keys
def identity_key(seed: int, partition: int, source: str, path: str = "") -> PrivateIdentity:
    """The node's identity key: the private key file ``path`` (OpenSSH or PEM, Ed25519 or
    EC P-384: a SuperNode's authentication key serves), else Ed25519 keyed by (seed,
    partition) (``seeded``) or fresh from the OS."""
    if path:
        data = Path(path).read_bytes()
        loader = (
            serialization.load_ssh_private_key
            if b"OPENSSH" in data
            else serialization.load_pem_private_key
        )
        key = loader(data, password=None)
        if not isinstance(key, (Ed25519PrivateKey, ec.EllipticCurvePrivateKey)):
            raise SecureRoundRefused(f"{path} is not an Ed25519 or EC key")
        return key
    if source == "seeded":
        raw = keyed_rng(seed, "secagg-identity", partition).bytes(32)
        return Ed25519PrivateKey.from_private_bytes(raw)
    return Ed25519PrivateKey.generate()


def public_identity(key: PrivateIdentity) -> bytes:
    """The identity's public key as OpenSSH text (what a roster file holds)."""
    return key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )


def load_identity(text: bytes) -> PublicIdentity:
    key = serialization.load_ssh_public_key(bytes(text).strip())
    if not isinstance(key, (Ed25519PublicKey, ec.EllipticCurvePublicKey)):
        raise SecureRoundRefused("an identity key is neither Ed25519 nor EC")
    return key


def statement(run_id: int, partition: int, public: np.ndarray) -> bytes:
    """What a node signs: its X25519 key for ``partition`` in run ``run_id``."""
    head = b"fedrec secure aggregation key|run %d|partition %d|" % (run_id, partition)
    return head + np.asarray(public, dtype=np.uint8).tobytes()


def sign(key: PrivateIdentity, message: bytes) -> np.ndarray:
    """``key``'s signature of ``message`` as :data:`SIGNATURE_BYTES` uint8."""
    if isinstance(key, Ed25519PrivateKey):
        raw = key.sign(message)
    else:
        r, s = decode_dss_signature(key.sign(message, ec.ECDSA(hashes.SHA384())))
        raw = r.to_bytes(P384_HALF, "big") + s.to_bytes(P384_HALF, "big")
    out = np.zeros(SIGNATURE_BYTES, dtype=np.uint8)
    out[: len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    return out


def verifies(key: PublicIdentity, message: bytes, signature: np.ndarray) -> bool:
    raw = np.asarray(signature, dtype=np.uint8).tobytes()
    try:
        if isinstance(key, Ed25519PublicKey):
            key.verify(raw[:64], message)
        else:
            r = int.from_bytes(raw[:P384_HALF], "big")
            s = int.from_bytes(raw[P384_HALF:], "big")
            key.verify(encode_dss_signature(r, s), message, ec.ECDSA(hashes.SHA384()))
    except (InvalidSignature, ValueError):
        return False
    return True


class Roster:
    """Each partition's identity public key, as the node knows it (see the module's doc)."""

    def __init__(
        self, seed: int, source: str, folder: str = "", pinned: Mapping[str, bytes] | None = None
    ) -> None:
        self.seed, self.source, self.folder = seed, source, folder
        #: Trust on first use: partition (as text) -> the identity key first shown for it.
        self.pinned: dict[str, bytes] = dict(pinned or {})

    def key_of(self, partition: int, shown: bytes | None) -> PublicIdentity:
        """``partition``'s identity key; ``shown``: the one the server relays (used only
        when the node has no roster and no seed to derive it)."""
        if self.folder:
            name = "helper" if partition == HELPER_ID else str(partition)
            path = Path(self.folder) / f"{name}.pub"
            if not path.is_file():
                raise SecureRoundRefused(
                    f"the roster {self.folder} has no key of partition {partition}"
                )
            return load_identity(path.read_bytes())
        if self.source == "seeded":
            return identity_key(self.seed, partition, "seeded").public_key()
        if shown is None:
            raise SecureRoundRefused(f"the server sent no identity key of partition {partition}")
        pinned = self.pinned.setdefault(str(partition), bytes(shown).rstrip(b"\0"))
        if pinned != bytes(shown).rstrip(b"\0"):
            raise SecureRoundRefused(
                f"the server shows partition {partition} with another identity key than "
                "before: a substituted key"
            )
        return load_identity(pinned)


# ------------------------------------------------------------------ the checks
def expected_cohort(
    training: TrainingKeys, server_round: int, num_users: int, num_partitions: int
) -> tuple[np.ndarray, np.ndarray]:
    """The partitions holding a participant of ``server_round`` (the public schedule), and
    the participants."""
    users = participants(training.seed, server_round, num_users, training.fraction_train)
    return np.unique(users % num_partitions), users


def check_round(
    *,
    config: RunGroups,
    server_round: int,
    run_id: int,
    partition: int,
    num_partitions: int,
    num_users: int,
    own_users: np.ndarray,
    own_public: np.ndarray,
    train_users: np.ndarray,
    cohort: np.ndarray,
    peers: np.ndarray,
    keys: np.ndarray,
    signatures: np.ndarray,
    identities: np.ndarray | None,
    roster: Roster,
) -> np.ndarray:
    """Refuse (:class:`SecureRoundRefused`) a round that fails a check of the module's doc;
    return the node's neighbours. ``cohort``: the round's participants as the server lists
    them; ``peers``: the node and its neighbours on the round's graph
    (:func:`~fedrec_flwr.privacy.secagg_dropout.neighbours`), with their keys."""
    peers = np.asarray(peers, dtype=np.int64)
    keys = np.asarray(keys, dtype=np.uint8).reshape(len(peers), -1)
    signatures = np.asarray(signatures, dtype=np.uint8).reshape(len(peers), -1)
    refuse = _refusal(partition, server_round)
    secure = config.group(SecAggKeys)
    expected, chosen = expected_cohort(config.training, server_round, num_users, num_partitions)
    cohort = np.sort(np.asarray(cohort, dtype=np.int64))
    if not np.array_equal(cohort, expected):
        refuse(
            f"the peers {_few(cohort)} are not the round's cohort {_few(expected)} (the "
            "partitions of the users the public schedule makes train)"
        )
    if len(cohort) - 1 < secure.secure_aggregation_min_peers:
        refuse(
            f"{len(cohort) - 1} other participants, fewer than secure-aggregation-min-peers="
            f"{secure.secure_aggregation_min_peers}"
        )
    _check_peer_list(peers, keys, partition, own_public, refuse)
    k = degree(len(cohort), secure.secure_aggregation_neighbours)
    near = neighbours(config.training.seed, server_round, cohort, k)[partition]
    if not np.array_equal(np.sort(peers[peers != partition]), near):
        refuse(f"the peers {_few(np.sort(peers))} are not its neighbours {_few(near)} on the graph")
    mine_by_schedule = own_users[np.isin(own_users, chosen)]
    if not np.array_equal(np.sort(np.asarray(train_users, np.int64)), mine_by_schedule):
        refuse(
            f"the server asks this node to train {len(train_users)} users, the schedule "
            f"{len(mine_by_schedule)}"
        )
    _check_signatures(run_id, peers, keys, signatures, identities, roster, refuse)
    return near


def _check_peer_list(
    peers: np.ndarray, keys: np.ndarray, partition: int, own_public: np.ndarray, refuse
) -> None:
    """The node listed once with its own key, no partition and no key listed twice."""
    mine = np.flatnonzero(peers == partition)
    if len(mine) != 1 or not np.array_equal(keys[mine[0]], own_public):
        refuse(
            f"the peer list holds partition {partition} {len(mine)} times, or with a key "
            "not its own"
        )
    if len(np.unique(peers)) != len(peers):
        refuse("a partition is listed twice")
    raw = [key.tobytes() for key in keys]
    if len(set(raw)) != len(raw):
        twice = [int(p) for p, k in zip(peers, raw, strict=True) if raw.count(k) > 1]
        refuse(f"one key is listed twice (partitions {twice}): the same mask added and subtracted")


def _check_signatures(
    run_id: int,
    peers: np.ndarray,
    keys: np.ndarray,
    signatures: np.ndarray,
    identities: np.ndarray | None,
    roster: Roster,
    refuse,
) -> None:
    """Every peer's key signed by its identity key (the roster's, or the one first shown)."""
    for j, peer in enumerate(peers.tolist()):
        shown = None if identities is None else identities[j].tobytes()
        identity = roster.key_of(peer, shown)
        if not verifies(identity, statement(run_id, peer, keys[j]), signatures[j]):
            refuse(
                f"the key of partition {peer} is not signed by its identity key: a substituted key"
            )


def _refusal(partition: int, server_round: int):
    def refuse(why: str) -> None:
        raise SecureRoundRefused(
            f"secure aggregation: partition {partition} refuses round {server_round}: {why}"
        )

    return refuse


def _few(values: np.ndarray) -> str:
    shown = values[:8].tolist()
    return f"{shown}{'...' if len(values) > 8 else ''} ({len(values)})"


def round_digest(
    run_id: int, server_round: int, peers: np.ndarray, table: np.ndarray, dense: Mapping
) -> bytes:
    """SHA-256 of what every participant must receive alike: the run, the round, the cohort,
    the table and the shared-dense parameters (by name)."""
    digest = hashlib.sha256(b"fedrec round|%d|%d|" % (run_id, server_round))
    digest.update(np.sort(np.asarray(peers, dtype=np.int64)).tobytes())
    digest.update(np.ascontiguousarray(table, dtype=np.float32).tobytes())
    for name in sorted(dense):
        digest.update(name.encode() + b"|")
        digest.update(np.ascontiguousarray(dense[name], dtype=np.float32).tobytes())
    return digest.digest()
