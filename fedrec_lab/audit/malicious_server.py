"""The audit's malicious server: under secure aggregation, it plays against each audited
user's node every deviation that reads an upload from an unchecked protocol, through the
node's own checks (:func:`fedrec_flwr.privacy.secagg_trust.check_round`), in the faithful
mode's view (each user its own node, partition = user id, ``seeded`` keys as the audit runs):

- ``alone``: peers ``[target]``, no mask added (the cohort as the server says it);
- ``key-twice``: another participant's genuine key and signature under a second partition,
  the same mask added and subtracted;
- ``substituted``: the server's own keys in place of the other participants', signed with
  identity keys it made;
- ``others-train-nobody``: every other participant told ``train-users = []`` (seen from one
  of them: the sum would be the target's upload).

What it recovers: the user's plaintext upload if any deviation passes the checks (then it
scores the rows as ``direction`` does), else nothing: a random guess (AUC 0.5 in the mean).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedrec_flwr.partition import participants
from fedrec_flwr.privacy import secagg, secagg_dropout, secagg_trust
from fedrec_flwr.privacy.secagg import SecAggKeys
from fedrec_flwr.run_keys import RunGroups

DEVIATIONS = ("alone", "key-twice", "substituted", "others-train-nobody")
RUN_ID = 0  # the audit's view has no Flower run: the nodes would sign run 0


@lru_cache(maxsize=65536)
def _signed(seed: int, partition: int) -> tuple[bytes, bytes]:
    """A faithful-mode node's public key and its signature (seeded keys)."""
    public = secagg.public_bytes(secagg.private_key(seed, partition, "seeded"))
    identity = secagg_trust.identity_key(seed, partition, "seeded")
    signature = secagg_trust.sign(identity, secagg_trust.statement(RUN_ID, partition, public))
    return public.tobytes(), signature.tobytes()


def _honest(seed: int, peers: np.ndarray) -> dict[str, np.ndarray]:
    pairs = [_signed(seed, int(p)) for p in peers]
    return {
        "peers": np.asarray(peers, dtype=np.int64),
        "keys": np.stack([np.frombuffer(k, np.uint8) for k, _ in pairs]),
        "signatures": np.stack([np.frombuffer(s, np.uint8) for _, s in pairs]),
    }


def refusals(
    config: RunGroups, num_users: int, user: int, server_round: int
) -> dict[str, str | None]:
    """Each deviation against ``user`` in ``server_round``: the node's refusal, or None if
    the node would let it through."""
    chosen = participants(
        config.training.seed, server_round, num_users, config.training.fraction_train
    )
    seed = config.training.seed
    out: dict[str, str | None] = {}
    k = secagg_dropout.degree(len(chosen), config.group(SecAggKeys).secure_aggregation_neighbours)
    graph = secagg_dropout.neighbours(seed, server_round, chosen, k)
    near = np.sort(np.append(graph[user], user))
    honest = _honest(seed, near)
    at = int(np.searchsorted(near, user))
    other = int(graph[user][0])
    alone = np.array([user])
    deviations = {
        "alone": (user, alone, _honest(seed, alone), alone),
        "key-twice": (user, chosen, _duplicated(honest, at), alone),
        "substituted": (user, chosen, _substituted(honest, at), alone),
        "others-train-nobody": (
            other,
            chosen,
            _honest(seed, np.sort(np.append(graph[other], other))),
            np.array([], dtype=np.int64),
        ),
    }
    for name, (node, cohort, listed, train_users) in deviations.items():
        try:
            secagg_trust.check_round(
                config=config,
                server_round=server_round,
                run_id=RUN_ID,
                partition=node,
                num_partitions=num_users,
                num_users=num_users,
                own_users=np.array([node]),
                own_public=np.frombuffer(_signed(seed, node)[0], np.uint8),
                train_users=train_users,
                cohort=cohort,
                peers=listed["peers"],
                keys=listed["keys"],
                signatures=listed["signatures"],
                identities=None,
                roster=secagg_trust.Roster(seed, "seeded"),
            )
            out[name] = None
        except secagg_trust.SecureRoundRefused as refusal:
            out[name] = str(refusal)
    return out


def _duplicated(honest: dict, at: int) -> dict:
    """Another participant's key and signature copied over a third's."""
    listed = {name: value.copy() for name, value in honest.items()}
    n = len(listed["peers"])
    if n >= 3:
        source, dest = (at + 1) % n, (at + 2) % n
        listed["keys"][dest] = listed["keys"][source]
        listed["signatures"][dest] = listed["signatures"][source]
    return listed


def _substituted(honest: dict, at: int) -> dict:
    """The server's own keys, signed by identities it made, for every other participant."""
    listed = {name: value.copy() for name, value in honest.items()}
    for j, peer in enumerate(listed["peers"].tolist()):
        if j == at:
            continue
        fake = secagg.public_bytes(secagg.private_key(0, 0, "random"))
        identity = Ed25519PrivateKey.generate()
        listed["keys"][j] = fake
        told = secagg_trust.statement(RUN_ID, peer, fake)
        listed["signatures"][j] = secagg_trust.sign(identity, told)
    return listed


def scores(
    refused: dict[str, str | None], sent: np.ndarray, plain: np.ndarray | None, rng
) -> np.ndarray:
    """The malicious server's scores of one upload: ``direction`` on the plaintext it
    recovers if a deviation passed, a random guess if every one was refused."""
    from fedrec_lab.audit.attacks import direction_scores

    if plain is not None and any(why is None for why in refused.values()):
        return direction_scores(sent, plain)
    return rng.random(len(sent))
