"""A server that deviates from secure aggregation (fedrec_flwr/privacy/secagg_trust.py): each
attack that reads a node's upload from an unchecked protocol, played against the project's
own ClientApp, is refused by the nodes with an error that says what is wrong."""

from __future__ import annotations

import flower_rounds
import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from flwr.app import ArrayRecord, ConfigRecord

from fedrec_flwr.config import RunConfig
from fedrec_flwr.messages import record_arrays
from fedrec_flwr.privacy import secagg, secagg_trust

pytestmark = pytest.mark.usefixtures("private_cache")
SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 40,
    "synthetic-items": 200,
    "synthetic-mean-degree": 10,
    "num-server-rounds": 3,
    "checkpoint-every": 0,
    "secure-aggregation": True,
}
TARGET = 1  # the partition whose upload the server wants


def connected(tmp_path, nodes=4, **overrides):
    return flower_rounds.connected(tmp_path, nodes, SMALL, **overrides)


def round_messages(strategy, grid, server_round=1):
    """The round's honest train messages, by partition."""
    messages = strategy.configure_train(server_round, ArrayRecord(), ConfigRecord(), grid)
    return {strategy.nodes[m.metadata.dst_node_id].partition_id: m for m in messages}


def answers(grid, messages):
    """Each partition's reply: its masked vector, or the reason it refused."""
    out = {}
    for partition, message in messages.items():
        (reply,) = grid.send_and_receive([message], timeout=600)
        out[partition] = reply.error.reason if reply.has_error() else reply
    return out


def test_the_honest_round_passes_every_check(tmp_path):
    strategy, grid = connected(tmp_path)
    replies = answers(grid, round_messages(strategy, grid))
    assert all(not isinstance(reply, str) for reply in replies.values())


def test_peers_that_are_not_the_nodes_neighbours_are_refused(tmp_path):
    """The cohort as the schedule says, but the target told its only neighbour is one
    partition (which masks towards others): refused."""
    strategy, grid = connected(tmp_path, 8, **{"secure-aggregation-neighbours": 2})
    messages = round_messages(strategy, grid)

    def fewer(arrays):
        keep = np.arange(len(arrays["secagg-peers"])) < 2
        for name in ("secagg-peers", "secagg-keys", "secagg-signatures", "secagg-identities"):
            arrays[name] = arrays[name][keep]

    flower_rounds.edit(messages[TARGET], fewer)
    assert "are not its neighbours" in answers(grid, {TARGET: messages[TARGET]})[TARGET]


def test_the_target_alone_is_refused(tmp_path):
    """Peers [target]: no mask would be added, the vector would be the plain upload."""
    strategy, grid = connected(tmp_path)
    messages = round_messages(strategy, grid)

    def alone(arrays):
        keep = arrays["secagg-peers"] == TARGET
        for name in ("secagg-peers", "secagg-keys", "secagg-signatures", "secagg-identities"):
            arrays[name] = arrays[name][keep]
        arrays["secagg-cohort"] = arrays["secagg-peers"]

    flower_rounds.edit(messages[TARGET], alone)
    reason = answers(grid, {TARGET: messages[TARGET]})[TARGET]
    assert "partition 1 refuses round 1" in reason
    assert "are not the round's cohort [0, 1, 2, 3]" in reason


def test_too_few_peers_are_refused_even_when_the_schedule_makes_them():
    config = RunConfig.from_mapping({**SMALL, "secure-aggregation-min-peers": 3})
    own = secagg.private_key(0, 0, "seeded")
    public = secagg.public_bytes(own)
    with pytest.raises(secagg_trust.SecureRoundRefused, match="fewer than secure-aggregation"):
        secagg_trust.check_round(
            config=config,
            server_round=1,
            run_id=1,
            partition=0,
            num_partitions=3,
            num_users=40,
            own_users=np.arange(0, 40, 3),
            own_public=public,
            train_users=np.arange(0, 40, 3),
            cohort=np.arange(3),
            peers=np.arange(3),
            keys=np.stack(
                [secagg.public_bytes(secagg.private_key(0, p, "seeded")) for p in range(3)]
            ),
            signatures=np.zeros((3, secagg_trust.SIGNATURE_BYTES), np.uint8),
            identities=None,
            roster=secagg_trust.Roster(0, "seeded"),
        )


def test_a_genuine_key_listed_twice_is_refused(tmp_path):
    """Another node's genuine key (and signature) under a second partition: the target would
    add and subtract the same mask."""
    strategy, grid = connected(tmp_path)
    messages = round_messages(strategy, grid)

    def twice(arrays):
        for name in ("secagg-keys", "secagg-signatures", "secagg-identities"):
            arrays[name][3] = arrays[name][2]

    flower_rounds.edit(messages[TARGET], twice)
    reason = answers(grid, {TARGET: messages[TARGET]})[TARGET]
    assert "one key is listed twice (partitions [2, 3])" in reason


def test_the_targets_own_key_under_another_partition_is_refused(tmp_path):
    strategy, grid = connected(tmp_path)
    messages = round_messages(strategy, grid)

    def own_twice(arrays):
        for name in ("secagg-keys", "secagg-signatures", "secagg-identities"):
            arrays[name][0] = arrays[name][TARGET]

    flower_rounds.edit(messages[TARGET], own_twice)
    assert (
        "one key is listed twice (partitions [0, 1])"
        in answers(grid, {TARGET: messages[TARGET]})[TARGET]
    )


@pytest.mark.parametrize("source", ["seeded", "random"])
def test_keys_substituted_by_the_server_are_refused(tmp_path, source):
    """The server's own key pairs in place of the other nodes', signed with identity keys it
    made: with a roster (here the seed's) refused at once; trusting the first keys shown
    (``random``), refused from the round after the node first saw the real ones."""
    strategy, grid = connected(tmp_path, **{"secure-aggregation-keys": source})
    if source == "random":  # round 1 honest: the node pins every identity key
        answers(grid, round_messages(strategy, grid, 1))
    server_round = 1 if source == "seeded" else 2
    messages = round_messages(strategy, grid, server_round)

    def substituted(arrays):
        run_id = int(messages[TARGET].metadata.run_id)
        for j, peer in enumerate(arrays["secagg-peers"].tolist()):
            if peer == TARGET:
                continue
            fake = secagg.private_key(0, 0, "random")
            identity = Ed25519PrivateKey.generate()
            public = secagg.public_bytes(fake)
            arrays["secagg-keys"][j] = public
            told = secagg_trust.statement(run_id, peer, public)
            arrays["secagg-signatures"][j] = secagg_trust.sign(identity, told)
            text = np.frombuffer(secagg_trust.public_identity(identity), np.uint8)
            arrays["secagg-identities"][j] = 0
            arrays["secagg-identities"][j, : len(text)] = text

    flower_rounds.edit(messages[TARGET], substituted)
    reason = answers(grid, {TARGET: messages[TARGET]})[TARGET]
    expected = "not signed by its identity key" if source == "seeded" else "another identity key"
    assert expected in reason and "a substituted key" in reason


def test_every_other_node_told_to_train_nobody_is_refused(tmp_path):
    """The others sent no users would upload masks only, and the sum would be the target's
    upload: each of them refuses, so no sum of this round exists."""
    strategy, grid = connected(tmp_path)
    messages = round_messages(strategy, grid)
    others = {p: m for p, m in messages.items() if p != TARGET}
    for message in others.values():
        flower_rounds.edit(
            message, lambda arrays: arrays.__setitem__("train-users", arrays["train-users"][:0])
        )
    for partition, reason in answers(grid, others).items():
        assert isinstance(reason, str), partition
        assert "asks this node to train 0 users, the schedule 10" in reason


def test_a_different_model_sent_to_the_target_leaves_the_sum_masked(tmp_path):
    """Model inconsistency: the target gets another table than its peers. It cannot tell,
    but its masks are derived from what it received, so they cancel with no peer's and the
    sum does not decode."""
    strategy, grid = connected(tmp_path)
    table = strategy.model.table
    messages = round_messages(strategy, grid)
    flower_rounds.edit(messages[TARGET], lambda arrays: arrays["item-rows"].__setitem__(0, 0.0))
    replies = answers(grid, messages)
    assert strategy.aggregate_train(1, list(replies.values())) == (None, None)
    assert strategy.model.table is table


def test_a_supernode_authentication_key_signs_and_the_roster_verifies(tmp_path):
    """``fedrec deploy-local --secure``: each SuperNode's EC P-384 authentication key is its
    identity key, and the roster folder holds every partition's public key."""
    from fedrec_lab.secure import write_node_key

    roster = tmp_path / "roster"
    roster.mkdir()
    keys = {}
    for partition in range(2):
        pair = write_node_key(tmp_path / f"node-{partition}", "auth-key")
        (roster / f"{partition}.pub").write_bytes(pair.public.read_bytes())
        keys[partition] = secagg_trust.identity_key(0, partition, "random", str(pair.private))
    public = secagg.public_bytes(secagg.private_key(0, 0, "random"))
    told = secagg_trust.statement(7, 0, public)
    signature = secagg_trust.sign(keys[0], told)
    known = secagg_trust.Roster(0, "random", str(roster))
    assert secagg_trust.verifies(known.key_of(0, None), told, signature)
    assert not secagg_trust.verifies(known.key_of(1, None), told, signature)
    assert not secagg_trust.verifies(
        known.key_of(0, None), told.replace(b"run 7", b"run 8"), signature
    )
    with pytest.raises(secagg_trust.SecureRoundRefused, match="has no key of partition 2"):
        known.key_of(2, None)


def test_the_audits_malicious_server_recovers_nothing_from_nodes_that_refuse():
    """Each deviation of the audit's malicious server, against a user's faithful-mode node,
    is refused; a node that let one through would hand it the plaintext (scored as
    ``direction``), a refused one leaves it a random guess."""
    from fedrec_lab.audit import malicious_server

    config = RunConfig.from_mapping({**SMALL, "secure-aggregation-keys": "seeded"})
    refused = malicious_server.refusals(config, 40, 7, 2)
    assert set(refused) == set(malicious_server.DEVIATIONS)
    assert all(why for why in refused.values()), refused
    rng = np.random.default_rng(0)
    sent, plain = np.zeros((5, 2)), np.array([[1.0, 1], [1, 1], [-1, -1], [-1, -1], [-1, -1]])
    assert not np.array_equal(malicious_server.scores(refused, sent, plain, rng)[:2], [2, 2])
    opened = {**refused, "alone": None}
    got = malicious_server.scores(opened, sent, plain, rng)
    assert got[0] > got[2] and got[1] > got[4]  # the recovered positives rank first


def test_a_second_unmask_step_of_a_round_is_refused(tmp_path, caplog):
    """A node answers the unmask step once a round: asked again (to hand over, say, its
    pairwise masks after a self-mask share), it refuses."""
    from fedrec_flwr.privacy.secagg_dropout import DropoutError
    from fedrec_flwr.server.secure_rounds import masked_vectors, unmasked_total

    strategy, grid = connected(tmp_path)
    messages = round_messages(strategy, grid)
    replies = [grid.send_and_receive([m], timeout=600)[0] for m in messages.values()]
    reader = strategy.secure(1, strategy.nodes, list(messages.values()), strategy.round_log)
    layout_length = len(record_arrays(replies[0].content["arrays"])["secure"])
    answered = masked_vectors(reader, replies, dict(strategy.orders), layout_length)
    unmasked_total(reader, answered)
    with pytest.raises(DropoutError, match="shares of partition"):
        unmasked_total(reader, answered)
    assert "answered the unmask step of round 1 already" in caplog.text
