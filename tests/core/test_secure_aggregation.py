"""Secure aggregation (fedrec_flwr/privacy/secagg.py): masks cancel exactly, the unmasked sum
is the plain aggregation up to the fixed point, a missing participant voids the round, key
agreement is symmetric, one upload alone looks uniform, and the impossible combinations are
refused."""

from __future__ import annotations

import numpy as np
import pytest
from flower_rounds import SMALL, connected, train_round
from flwr.app import ArrayRecord, ConfigRecord
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedrec_flwr.aggregation import RowUpload, row_changes
from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.messages import array_record, record_arrays
from fedrec_flwr.privacy import secagg
from fedrec_flwr.schema import ConfigError
from fedrec_flwr.server_app import run_federation
from fedrec_lab.audit.command import SECAGG
from fedrec_lab.audit.loop import run_plain
from fedrec_lab.audit.run import ATTACKS, audited_run
from fedrec_lab.local_grid import LocalGrid

SEED, ROUND = 7, 3


def keys(partitions):
    private = {p: secagg.private_key(SEED, p, "seeded") for p in partitions}
    public = np.stack([secagg.public_bytes(private[p]) for p in partitions])
    return private, public


def node_vector(layout, rng, users=2, rows_per_user=5, scale=3.0):
    """A node's unmasked vector and its plain upload (summed tuned rows) for ``users`` users."""
    items = np.concatenate(
        [rng.choice(layout.num_items, rows_per_user, replace=False) for _ in range(users)]
    )
    changes = rng.normal(0, scale, (len(items), layout.row_dim))
    vector = secagg.encode(
        layout, items, changes, {}, num_users=users, num_samples=10, loss_sum=1.5, total_users=100
    )
    return vector, items, changes


def test_masks_cancel_exactly():
    layout = secagg.Layout.of(20, 4, {})
    rng = np.random.default_rng(0)
    partitions = np.array([0, 3, 5, 9])
    private, public = keys(partitions)
    plain = [node_vector(layout, rng)[0] for _ in partitions]
    masked = [
        secagg.masked(v, private[p], p, partitions, public, ROUND)
        for v, p in zip(plain, partitions, strict=True)
    ]
    assert all(not np.array_equal(m, v) for m, v in zip(masked, plain, strict=True))
    assert np.array_equal(secagg.ring_sum(masked), secagg.ring_sum(plain))


def test_key_agreement_is_symmetric_and_masks_differ_by_round():
    a, b = (secagg.private_key(0, p, "random") for p in (1, 2))
    secret = secagg.shared_secret(a, secagg.public_bytes(b))
    assert secret == secagg.shared_secret(b, secagg.public_bytes(a))
    first, second = (secagg.mask_stream(secret, r, 64) for r in (1, 2))
    assert not np.array_equal(first, second)
    assert np.array_equal(first, secagg.mask_stream(secret, 1, 64))
    # seeded keys are reproducible, random ones are not
    assert np.array_equal(*(secagg.public_bytes(secagg.private_key(0, 1, "seeded")) for _ in "ab"))
    assert not np.array_equal(
        *(secagg.public_bytes(secagg.private_key(0, 1, "random")) for _ in "ab")
    )


def test_a_missing_participant_leaves_masks_in_the_sum():
    layout = secagg.Layout.of(20, 4, {})
    rng = np.random.default_rng(1)
    partitions = np.array([0, 1, 2])
    private, public = keys(partitions)
    plain = [node_vector(layout, rng)[0] for _ in partitions]
    masked = [
        secagg.masked(v, private[p], p, partitions, public, ROUND)
        for v, p in zip(plain, partitions, strict=True)
    ]
    partial = secagg.ring_sum(masked[:2])
    assert not np.array_equal(partial, secagg.ring_sum(plain[:2]))
    with pytest.raises(secagg.SecureAggregationError, match="masks do not cancel"):
        secagg.decode(layout, partial, 4, 100)


def test_an_upload_alone_is_indistinguishable_from_uniform():
    """Chi-square of the top byte of every entry: a node's plain vector is mostly zeros (the
    test rejects it), its masked one passes (seeded keys: the outcome is fixed)."""
    layout = secagg.Layout.of(400, 8, {})
    partitions = np.array([0, 1, 2, 3])
    private, public = keys(partitions)
    vector = node_vector(layout, np.random.default_rng(2), users=1, rows_per_user=30)[0]

    def p_value(values):
        top = (values >> np.uint64(56)).astype(np.int64)
        return stats.chisquare(np.bincount(top, minlength=256)).pvalue

    assert p_value(vector) < 1e-12
    masked = secagg.masked(vector, private[2], 2, partitions, public, ROUND)
    assert p_value(masked) > 1e-4  # a uniform vector's p-value is uniform: 1e-4 is rare
    for bits in (vector, masked):  # the low bits too: Kolmogorov-Smirnov
        low = (bits & np.uint64(0xFFFF)).astype(np.float64) / 65536
        uniform = stats.kstest(low, "uniform").pvalue > 1e-4
        assert uniform == (bits is masked)


@settings(max_examples=40, deadline=None)
@given(
    nodes=st.integers(1, 4),
    users=st.integers(1, 3),
    scale=st.sampled_from([1e-3, 1.0, 50.0]),
    rule=st.sampled_from(["round-mean", "toucher-mean"]),
    seed=st.integers(0, 2**16),
)
def test_the_unmasked_sum_is_the_plain_aggregation(nodes, users, scale, rule, seed):
    rng = np.random.default_rng(seed)
    layout = secagg.Layout.of(12, 3, {"w": (2, 2)})
    table = rng.normal(0, 1, (12, 3)).astype(np.float32)
    dense = {"w": rng.normal(0, 1, (2, 2)).astype(np.float32)}
    partitions = np.arange(nodes)
    private, public = keys(partitions)
    vectors, plain = [], []
    for p in partitions:
        items = np.concatenate([rng.choice(12, 4, replace=False) for _ in range(users)])
        tuned = (table[items] + rng.normal(0, scale, (len(items), 3))).astype(np.float32)
        dense_tuned = (dense["w"] + rng.normal(0, scale, (users, 2, 2))).astype(np.float32)
        vector = secagg.encode(
            layout,
            items,
            tuned,
            {"w": dense_tuned},
            num_users=users,
            num_samples=5,
            loss_sum=0.25,
            total_users=nodes * users,
        )
        vectors.append(secagg.masked(vector, private[p], p, partitions, public, ROUND))
        ids, inverse = np.unique(items, return_inverse=True)
        sums = np.zeros((len(ids), 3))
        np.add.at(sums, inverse, tuned.astype(np.float64))
        counts = np.bincount(inverse)
        plain.append(RowUpload(ids, sums, counts, users, {"w": dense_tuned.sum(0, dtype=float)}))
    aggregate = secagg.decode(layout, secagg.ring_sum(vectors), nodes * users, nodes * users)
    touched, change = row_changes(table, plain, rule)
    secure_touched, secure_change = row_changes(table, [aggregate.upload], rule)
    resolution = nodes * users * 2.0**-secagg.FRACTION_BITS
    assert np.array_equal(touched, secure_touched)
    np.testing.assert_allclose(secure_change, change, rtol=0, atol=resolution + 1e-12 * scale)
    assert aggregate.upload.num_users == nodes * users
    assert aggregate.num_samples == 5 * nodes and aggregate.loss_sum == 0.25 * nodes
    mean = sum(u.dense_sums["w"] for u in plain) / (nodes * users)
    got = aggregate.upload.dense_sums["w"] / (nodes * users)
    np.testing.assert_allclose(got, mean, rtol=0, atol=resolution + 1e-12 * scale)


def test_packing_does_not_change_the_sum():
    """Each user's change is rounded on its own: two users in one node give the same
    integers as two one-user nodes."""
    layout = secagg.Layout.of(10, 2, {})
    rng = np.random.default_rng(3)
    items = [rng.choice(10, 4, replace=False) for _ in range(2)]
    changes = [rng.normal(0, 1, (4, 2)) for _ in range(2)]
    kw = {"num_samples": 0, "loss_sum": 0.0, "total_users": 2}
    both = secagg.encode(
        layout, np.concatenate(items), np.concatenate(changes), {}, num_users=2, **kw
    )
    alone = [
        secagg.encode(layout, i, c, {}, num_users=1, **kw)
        for i, c in zip(items, changes, strict=True)
    ]
    assert np.array_equal(both, secagg.ring_sum(alone))


def test_a_change_out_of_range_fails_with_a_message():
    layout = secagg.Layout.of(4, 2, {})
    for bad in (np.inf, np.nan, 1e9):
        with pytest.raises(secagg.SecureAggregationError, match="diverged"):
            secagg.encode(
                layout,
                np.array([1]),
                np.array([[bad, 0.0]]),
                {},
                num_users=1,
                num_samples=1,
                loss_sum=0.0,
                total_users=943,
            )


def test_the_encoding_limit_is_exclusive():
    """At exactly 2^30 / users the total of every user could reach 2^30: refused; the next
    float below it encodes."""
    layout = secagg.Layout.of(4, 2, {})
    limit = secagg.value_limit(943)
    kw = {"num_users": 1, "num_samples": 1, "loss_sum": 0.0, "total_users": 943}
    with pytest.raises(secagg.SecureAggregationError, match="strictly within"):
        secagg.encode(layout, np.array([1]), np.array([[limit, 0.0]]), {}, **kw)
    secagg.encode(layout, np.array([1]), np.array([[np.nextafter(limit, 0), 0.0]]), {}, **kw)


def a_round(layout, nodes=3, users=2):
    """The masked vectors of a round of ``nodes`` nodes of ``users`` users each."""
    rng = np.random.default_rng(5)
    partitions = np.arange(nodes)
    private, public = keys(partitions)
    return [
        secagg.masked(node_vector(layout, rng, users)[0], private[p], p, partitions, public, ROUND)
        for p in partitions
    ]


RING = 2**64


@pytest.mark.parametrize(
    ("where", "shift", "match"),
    [
        ("row", 2**63, "beyond what its users can encode"),  # 2^31 in value: a wrap-around
        ("row", -(2**63), "beyond what its users can encode"),
        ("untouched", 1, "a row no user trained must be zero"),
        ("count", 2**40, "more than the 6 that trained"),
        ("count", -(2**40), "a participant's masks do not cancel"),
        ("users", 1, "7 users where 6 trained"),
        ("users", -1, "5 users where 6 trained"),
    ],
)
def test_a_tampered_sum_is_refused(where, shift, match):
    """Whatever one participant adds to its masked vector, the sum does not decode unless
    it is a round's: the users the schedule says, counts within them, untouched rows zero,
    values within their users' range."""
    layout = secagg.Layout.of(20, 4, {})
    vectors = a_round(layout)
    plain = secagg.decode(layout, secagg.ring_sum(vectors), 6, 100).upload
    untouched = int(np.setdiff1d(np.arange(20), plain.item_ids)[0])
    index = {
        "row": int(plain.item_ids[0]) * 4,
        "untouched": untouched * 4 + 1,
        "count": layout.rows_end + int(plain.item_ids[0]),
        "users": layout.length - 3,
    }[where]
    vectors[1] = vectors[1].copy()
    vectors[1][index : index + 1] += np.array([shift % RING], dtype=np.uint64)  # wraps
    with pytest.raises(secagg.SecureAggregationError, match=match):
        secagg.decode(layout, secagg.ring_sum(vectors), 6, 100)


def test_a_wrong_participant_list_is_refused():
    partitions = np.array([0, 1])
    private, public = keys(partitions)
    vector = np.zeros(5, np.uint64)
    with pytest.raises(secagg.SecureAggregationError, match="participants"):
        secagg.masked(vector, private[0], 0, partitions, public[::-1], ROUND)


@pytest.mark.parametrize(
    ("keys_", "match"),
    [
        ({"robust-aggregation": "median"}, "robust-aggregation"),
        ({"row-update-bound": 5.0}, "row-update-bound"),
        ({"decoy-ratio": 1.0}, "decoys"),
    ],
)
def test_impossible_combinations_are_refused(keys_, match):
    with pytest.raises(ConfigError, match=match):
        RunConfig.from_mapping({"secure-aggregation": True, **keys_})


def test_the_key_source_needs_secure_aggregation():
    with pytest.raises(ConfigError, match="secure-aggregation = true"):
        RunConfig.from_mapping({"secure-aggregation-keys": "seeded"})
    for method in ("fedncf", "fedrecgel", "fedmf"):  # dense parameters are masked too
        RunConfig.from_mapping({"secure-aggregation": True, "method": method})


# ------------------------------------------------------------------ through Flower
@pytest.mark.usefixtures("private_cache")
@pytest.mark.parametrize("method", ["pfedrec", "fedncf"])
def test_the_server_sees_masked_vectors_and_the_sum_is_the_plain_update(tmp_path, method):
    keys_ = {"method": method, "item-lr": 1.0}
    secure, grid = connected(tmp_path / "s", 3, **keys_, **{"secure-aggregation": True})
    plain, plain_grid = connected(tmp_path / "p", 3, **keys_)
    messages, replies = train_round(secure, grid)
    for message in messages:  # the full table, the round's three keys, no request
        arrays = record_arrays(message.content["arrays"])
        assert "item-ids" not in arrays and arrays["item-rows"].shape[0] == 300
        assert arrays["secagg-peers"].tolist() == arrays["secagg-cohort"].tolist() == [0, 1, 2]
    for reply in replies:  # a masked vector and its self-mask's sealed shares
        assert set(record_arrays(reply.content["arrays"])) == {"secure", "secagg-shares"}
        assert not reply.content["metrics"]  # no loss, no sample count in the clear
    secure.aggregate_train(1, replies)
    plain.aggregate_train(1, train_round(plain, plain_grid)[1])
    np.testing.assert_allclose(secure.model.table, plain.model.table, rtol=1e-6, atol=1e-6)
    for name, value in plain.model.dense.items():
        np.testing.assert_allclose(secure.model.dense[name], value, rtol=1e-6, atol=1e-6)
    assert secure.round_log.train_users == 30
    assert secure.round_log.metrics["train-loss"] == pytest.approx(
        plain.round_log.metrics["train-loss"],
        rel=1e-6,  # the loss sum: 2^-16 fixed point
    )


@pytest.mark.usefixtures("private_cache")
def test_three_nodes_cannot_survive_a_dropout(tmp_path, caplog):
    """Three nodes: each has two neighbours, and a self-mask needs all three shares (more
    than half of the neighbours and its own): a missing participant voids the round."""
    strategy, grid = connected(tmp_path, 3, **{"secure-aggregation": True})
    table = strategy.model.table
    _, replies = train_round(strategy, grid)
    assert strategy.aggregate_train(1, replies[1:]) == (None, None)
    assert strategy.model.table is table
    assert strategy.round_log.train_failures == 1
    assert "1 of its 2 neighbours survived, fewer than 2: it reveals nothing" in caplog.text
    assert "secure aggregation void" in caplog.text


@pytest.mark.usefixtures("private_cache")
@pytest.mark.parametrize(("neighbours", "dropped"), [(0, (2, 5)), (4, (2,))])
def test_the_round_survives_dropouts_with_the_survivors_exact_sum(
    tmp_path, neighbours, dropped, monkeypatch
):
    """Eight nodes, some drop after the train message (every one a neighbour of all others,
    or four neighbours each, at most one of them dropped): the survivors' masks are removed
    through the unmask step, and the table is the plain round's of the same nodes. The run
    id is one of Flower's, beyond 2^63."""
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", 2**64 - 7)
    keys_ = {"item-lr": 1.0, "secure-aggregation-neighbours": neighbours}
    secure, grid = connected(tmp_path / "s", 8, **keys_, **{"secure-aggregation": True})
    plain, plain_grid = connected(tmp_path / "p", 8, **keys_)
    _, replies = train_round(secure, grid)
    kept = [r for r in replies if secure.nodes[r.metadata.src_node_id].partition_id not in dropped]
    secure.aggregate_train(1, kept)
    _, plain_replies = train_round(plain, plain_grid)
    plain_kept = [
        r for r in plain_replies if plain.nodes[r.metadata.src_node_id].partition_id not in dropped
    ]
    plain.aggregate_train(1, plain_kept)
    assert secure.round_log.train_failures == len(dropped)
    assert secure.round_log.train_users == plain.round_log.train_users > 0
    np.testing.assert_allclose(secure.model.table, plain.model.table, rtol=1e-6, atol=1e-6)
    assert not np.array_equal(secure.model.table, connected(tmp_path / "x", 8)[0].model.table)


@pytest.mark.usefixtures("private_cache")
def test_a_repeated_round_is_refused_before_training(tmp_path):
    """The same round's train message again (or an earlier round's): every node refuses,
    so no two answers under the same masks exist."""
    strategy, grid = connected(tmp_path, 3, **{"secure-aggregation": True})
    _, replies = train_round(strategy, grid, server_round=2)
    assert not any(reply.has_error() for reply in replies)
    for server_round in (2, 1):
        again = list(strategy.configure_train(server_round, ArrayRecord(), ConfigRecord(), grid))
        for reply in grid.send_and_receive(again, timeout=600):
            assert reply.has_error() and "a repeated round" in reply.error.reason


@pytest.mark.usefixtures("private_cache")
def test_a_tampered_vector_voids_the_round_and_blames_no_node(tmp_path, caplog):
    """2^31 added to one row of one node's masked vector (its counts left alone): the sum
    does not decode, the table stays as it was, no node is told it diverged."""
    strategy, grid = connected(tmp_path, 3, **{"secure-aggregation": True})
    table = strategy.model.table
    _, replies = train_round(strategy, grid)
    arrays = record_arrays(replies[1].content["arrays"])
    arrays["secure"][7:8] += np.array([2**63], dtype=np.uint64)
    replies[1].content["arrays"] = array_record(arrays)
    assert strategy.aggregate_train(1, replies) == (None, None)
    assert strategy.model.table is table
    assert "beyond what its users can encode" in caplog.text and "diverged" not in caplog.text


@pytest.mark.usefixtures("private_cache")
@pytest.mark.parametrize("extra", [{}, {"ldp-mechanism": "gaussian", "ldp-clip": 5.0}])
def test_a_secure_run_gives_the_plain_runs_metrics(tmp_path, extra):
    """Flower with 3 nodes, the plain loop, with and without secure aggregation (and with
    LDP on each user's rows before masking): the same test metrics (the fixed point's
    resolution is far below what moves a ranking here)."""
    results = []
    for secure in (False, True):
        mapping = {**SMALL, "results-dir": str(tmp_path / str(secure)), "item-lr": 8.0, **extra}
        config = RunConfig.from_mapping({**mapping, "secure-aggregation": secure})
        summary = run_federation(LocalGrid(client_app, config.to_mapping(), num_nodes=3), config)
        results += [summary["test"], run_plain(config, prepare(config))["test"]]
    for other in results[1:]:
        for name, value in results[0].items():
            assert other[name] == pytest.approx(value, abs=1e-9)


@pytest.mark.usefixtures("private_cache")
def test_the_audits_attacks_are_at_chance_on_masked_uploads():
    """The audit's attacks on what the server sees: each user's masked vector (its own node
    among every participant) and its full-table request. Without the masks the same
    attacks find the positives."""
    keys_ = {**SMALL, "synthetic-mean-degree": 15, "method": "pfedrec", "item-lr": 8.0}
    plain = audited_run(keys_, [3], 10, 0)["attacks"]
    secure = audited_run({**keys_, **SECAGG}, [3], 10, 0)["attacks"]
    assert plain["direction"]["auc"] > 0.9 and plain["pubpara"]["auc"] > 0.9
    for name in ATTACKS:
        assert abs(secure[name]["auc"] - 0.5) < 0.1, name
    assert "malicious-server" not in plain  # it attacks the secure protocol
