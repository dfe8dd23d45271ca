"""A node's side of secure aggregation, without Flower (the ClientApp keeps its state).

- :func:`handshake_keys`: a fresh X25519 key pair; the public key signed by the node's
  identity key (:mod:`fedrec_flwr.privacy.secagg_trust`);
- :func:`check_train`: the checks of a train message before any training (the round not
  answered yet, the server's cohort, peers, keys and users);
- :func:`masked_upload`: the vector masked towards the node's neighbours plus its
  self-mask, the self-mask seed's shares sealed for its holders, and what the unmask step
  needs (:mod:`fedrec_flwr.privacy.secagg_dropout`);
- :func:`unmask`: the answer to the round's unmask step (once);
- :func:`bounded_upload`: under ``secure-aggregation-bound``, instead of the masked vector,
  one report per user proving its bounded change (:mod:`fedrec_flwr.privacy.bounded`),
  sealed for the helper whose signed key the train message carries.

State travels as plain arrays by name (``saved``): the ClientApp stores them in
``context.state``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedrec_flwr.privacy import secagg, secagg_dropout, secagg_trust
from fedrec_flwr.privacy.bounded import client as bounded_client
from fedrec_flwr.privacy.bounded import report as bounded_report
from fedrec_flwr.privacy.bounded.keys import round_bounds
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.stages import UserChanges

#: The run and round this node last answered (a train message), and whether it unmasked it.
ROUND, UNMASKED = "round", "unmasked"


def handshake_keys(
    config: RunGroups, partition: int, run_id: int, identity_path: str
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(the private key's bytes, the handshake reply's arrays: the public key, its
    signature and the identity's public key)."""
    seed, source = config.training.seed, config.group(secagg.SecAggKeys).secure_aggregation_keys
    key = secagg.private_key(seed, partition, source)
    public = secagg.public_bytes(key)
    identity = secagg_trust.identity_key(seed, partition, source, identity_path)
    told = secagg_trust.statement(run_id, partition, public)
    return secagg.private_bytes(key), {
        "secagg_public": public,
        "secagg_signature": secagg_trust.sign(identity, told),
        "secagg_identity": np.frombuffer(secagg_trust.public_identity(identity), np.uint8),
    }


def check_train(
    runtime: Any,
    run_id: int,
    server_round: int,
    private: np.ndarray,
    received: Mapping[str, np.ndarray],
    saved: Mapping[str, np.ndarray],
    roster: secagg_trust.Roster,
) -> np.ndarray:
    """Refuse a train message before training (a round not later than the last one this
    node answered in the run, or one failing :func:`secagg_trust.check_round`); return the
    node's neighbours."""
    last = saved.get(ROUND)
    if last is not None and int(last[0]) == run_id and server_round <= int(last[1]):
        raise secagg_trust.SecureRoundRefused(
            f"secure aggregation: the server asks for round {server_round} after round "
            f"{int(last[1])} of the same run; a repeated round would let it subtract two "
            "answers under the same masks: refused"
        )
    return secagg_trust.check_round(
        config=runtime.config,
        server_round=server_round,
        run_id=run_id,
        partition=runtime.partition_id,
        num_partitions=runtime.num_partitions,
        num_users=runtime.prepared.num_users,
        own_users=runtime.users,
        own_public=secagg.public_bytes(secagg.load_private(private)),
        train_users=received["train-users"],
        cohort=received["secagg-cohort"],
        peers=received["secagg-peers"],
        keys=received["secagg-keys"],
        signatures=received["secagg-signatures"],
        identities=received.get("secagg-identities"),
        roster=roster,
    )


def masked_upload(
    vector: np.ndarray,
    private: np.ndarray,
    partition: int,
    received: Mapping[str, np.ndarray],
    digest: bytes,
    k: int,
    round_key: tuple[int, int],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(the train reply's arrays: the masked vector and the sealed shares, the state the
    unmask step needs) of the round ``round_key`` (run id, round)."""
    peers = np.asarray(received["secagg-peers"], dtype=np.int64)
    keys = np.asarray(received["secagg-keys"], dtype=np.uint8)
    near = {int(p): keys[j] for j, p in enumerate(peers.tolist()) if p != partition}
    out, sealed, seeds = secagg_dropout.mask_round(
        vector, secagg.load_private(private), partition, near, digest, secagg_dropout.threshold(k)
    )
    order = sorted(near)
    state = {
        ROUND: np.array(round_key, dtype=np.uint64),  # Flower's run ids reach 2^64 - 1
        UNMASKED: np.zeros(1, dtype=np.int64),
        "near": np.array(order, dtype=np.int64),
        "near-keys": np.stack([near[p] for p in order]) if order else keys[:0],
        "pair-seeds": np.array([np.frombuffer(seeds[p], np.uint8) for p in order]).reshape(
            len(order), 32
        ),
        "digest": np.frombuffer(digest, dtype=np.uint8),
        "k": np.array([k], dtype=np.int64),
    }
    return {"secure": out, "secagg_shares": sealed}, state


def unmask(
    private: np.ndarray,
    partition: int,
    run_id: int,
    server_round: int,
    saved: Mapping[str, np.ndarray],
    request: Mapping[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """The answer to the unmask step of ``server_round`` (see
    :func:`secagg_dropout.unmask_answer`): ``share-of`` / ``shares`` (opened shares of the
    surviving neighbours' and its own self-mask seeds) and ``pair-with`` / ``pair-seeds``
    (its pairwise seeds with the neighbours that dropped). Refused unless the node masked
    this round and has not answered its unmask step yet."""
    _check_unmask(partition, run_id, server_round, saved)
    near = saved["near"].tolist()
    keys = {p: saved["near-keys"][j] for j, p in enumerate(near)}
    own = secagg.load_private(private)
    keys[partition] = secagg.public_bytes(own)
    digest = saved["digest"].tobytes()
    senders = np.asarray(request["senders"], dtype=np.int64).tolist()
    survivors = set(np.asarray(request["survivors"], dtype=np.int64).tolist())
    if set(senders) != survivors | {partition} or len(senders) != len(set(senders)):
        raise secagg_dropout.DropoutError(
            f"partition {partition} is sent shares of {sorted(senders)}, not of its surviving "
            f"neighbours {sorted(survivors)} and itself"
        )
    if not survivors <= set(near):
        raise secagg_dropout.DropoutError(
            f"partition {partition} is told of survivors {sorted(survivors - set(near))} that "
            "are not its neighbours"
        )
    opened = {
        sender: secagg_dropout.open_share(
            own, keys[sender], request["sealed"][j], sender, partition, digest
        )
        for j, sender in enumerate(senders)
    }
    seeds = {p: saved["pair-seeds"][j].tobytes() for j, p in enumerate(near)}
    t = secagg_dropout.threshold(int(saved["k"][0]))
    shares, pairs = secagg_dropout.unmask_answer(partition, near, seeds, survivors, opened, t)
    share_of = sorted(shares)
    pair_with = sorted(pairs)
    return {
        "share_of": np.array(share_of, dtype=np.int64),
        "shares": np.array(
            [np.frombuffer(shares[p], np.uint8) for p in share_of], dtype=np.uint8
        ).reshape(len(share_of), -1),
        "pair_with": np.array(pair_with, dtype=np.int64),
        "pair_seeds": np.array(
            [np.frombuffer(pairs[p], np.uint8) for p in pair_with], dtype=np.uint8
        ).reshape(len(pair_with), 32),
    }


def _check_unmask(
    partition: int, run_id: int, server_round: int, saved: Mapping[str, np.ndarray]
) -> None:
    """Refuse an unmask step for a round this node did not mask, or answered already."""
    if ROUND not in saved or tuple(saved[ROUND].tolist()) != (run_id, server_round):
        raise secagg_dropout.DropoutError(
            f"partition {partition} did not mask round {server_round}: nothing to unmask"
        )
    if int(saved[UNMASKED][0]):
        raise secagg_dropout.DropoutError(
            f"partition {partition} answered the unmask step of round {server_round} already: "
            "a second answer could hand over a self-mask share and a pairwise mask of the "
            "same neighbour"
        )


def bounded_upload(
    config: RunGroups,
    table: np.ndarray,
    private: np.ndarray,
    round_key: tuple[int, int],
    received: Mapping[str, np.ndarray],
    changes: UserChanges,
    roster: secagg_trust.Roster,
) -> dict[str, np.ndarray]:
    """The train reply's arrays under ``secure-aggregation-bound``: each user's report
    (:func:`~fedrec_flwr.privacy.bounded.client.user_reports`), its seed sealed for the
    helper, each proven against the round's bounds for ``table`` (the table as received:
    :func:`~fedrec_flwr.privacy.bounded.keys.round_bounds`). Refused
    (:class:`~fedrec_flwr.privacy.secagg_trust.SecureRoundRefused`) unless the helper's key is
    signed by the helper's identity key (the roster's ``helper``)."""
    run_id, server_round = round_key
    helper_key = np.asarray(received["helper-key"], dtype=np.uint8)
    shown = received.get("helper-identity")
    identity = roster.key_of(
        secagg_trust.HELPER_ID, None if shown is None else np.asarray(shown).tobytes()
    )
    told = secagg_trust.statement(run_id, secagg_trust.HELPER_ID, helper_key)
    if not secagg_trust.verifies(identity, told, received["helper-signature"]):
        raise secagg_trust.SecureRoundRefused(
            "secure aggregation: the helper's key is not signed by the helper's identity key: "
            "a server that substitutes it could open every report: refused"
        )
    bounds = round_bounds(config, table)
    reports = bounded_client.user_reports(
        bounds,
        lambda user: bounded_report.context(run_id, server_round, user, bounds),
        [int(user) for user in changes.users],
        changes.blocks,
        changes.num_samples,
        changes.loss_sum,
        seed=config.training.seed,
        source=config.group(secagg.SecAggKeys).secure_aggregation_keys,
        server_round=server_round,
        own=secagg.load_private(private),
        helper_public=helper_key,
    )
    return {name.replace("-", "_"): v for name, v in bounded_client.pack(reports).items()}
