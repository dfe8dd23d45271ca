"""Bounded secure aggregation in the round (``secure-aggregation-bound``): each user's
report is verified by the server and the helper before the table moves; a client that does
not follow the protocol is dropped and the others aggregate; honest rounds give the plain
round's table and metrics."""

from __future__ import annotations

import numpy as np
import pytest
from bounded_cheats import CHEATS, cheating_report
from flower_rounds import SMALL, connected, train_round
from scipy import stats

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.messages import array_record, record_arrays
from fedrec_flwr.privacy import secagg
from fedrec_flwr.privacy.bounded import circuit, client, encoding
from fedrec_flwr.privacy.bounded import field as gf
from fedrec_flwr.privacy.bounded import report as rep
from fedrec_flwr.schema import ConfigError
from fedrec_flwr.server_app import run_federation
from fedrec_lab.audit.command import CONFIGS
from fedrec_lab.audit.loop import run_plain
from fedrec_lab.audit.run import ATTACKS, audited_run
from fedrec_lab.local_grid import LocalGrid

BOUNDED = {
    "secure-aggregation": True,
    "secure-aggregation-keys": "seeded",
    "secure-aggregation-bound": 3.0,
    "secure-aggregation-max-rows": 40,
}


# ------------------------------------------------------------------------ the keys
@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ({"secure-aggregation-bound": 2.0}, "set secure-aggregation = true"),
        ({"secure-aggregation-bound": float("inf")}, "not a usable number"),
        ({"secure-aggregation": True, "secure-aggregation-max-rows": 5}, "bound"),
        ({"secure-aggregation": True, "secure-aggregation-bound": -1.0}, ">= 0"),
    ],
)
def test_the_keys_are_checked_early(keys, match):
    with pytest.raises(ConfigError, match=match):
        RunConfig.from_mapping(keys)


@pytest.mark.usefixtures("private_cache")
@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ({"method": "fedncf"}, "shared-dense parameters"),
        ({"secure-aggregation-bound": 1e9}, "lower the bound"),
    ],
)
def test_what_no_proof_covers_is_refused_before_the_first_round(tmp_path, keys, match):
    with pytest.raises(ConfigError, match=match):
        connected(tmp_path, 3, **{**BOUNDED, **keys})


# ---------------------------------------------------------------- honest rounds
@pytest.mark.usefixtures("private_cache")
def test_each_user_sends_a_report_and_the_sum_is_the_plain_update(tmp_path):
    """With a bound no honest change reaches, the table is the plain round's up to the fixed
    point's resolution; each node sends one report per user and no plaintext."""
    wide = {"secure-aggregation-bound": 100.0, "secure-aggregation-max-rows": 0}
    bounded, grid = connected(tmp_path / "b", 3, **{"item-lr": 1.0, **BOUNDED, **wide})
    plain, plain_grid = connected(tmp_path / "p", 3, **{"item-lr": 1.0})
    messages, replies = train_round(bounded, grid)
    for message in messages:  # the helper's key, signed
        assert {"helper-key", "helper-signature"} <= set(record_arrays(message.content["arrays"]))
    for message, reply in zip(messages, replies, strict=True):
        arrays = record_arrays(reply.content["arrays"])
        assert set(arrays) == set(client.ARRAYS) and not reply.content["metrics"]
        sent = record_arrays(message.content["arrays"])["train-users"]
        assert sorted(arrays["bounded-users"].tolist()) == sorted(sent.tolist())
    bounded.aggregate_train(1, replies)
    plain.aggregate_train(1, train_round(plain, plain_grid)[1])
    step = 2.0**-bounded.secure.bounded.bounds.frac_bits
    assert np.abs(bounded.model.table - plain.model.table).max() <= 30 * step
    assert bounded.round_log.train_users == 30 and bounded.round_log.rejected_replies == 0


@pytest.mark.usefixtures("private_cache")
def test_a_bounded_run_gives_the_plain_runs_metrics(tmp_path):
    """Flower with 3 nodes, three rounds, a bound no honest change reaches: the plain
    loop's test metrics."""
    mapping = {**SMALL, "results-dir": str(tmp_path), "item-lr": 8.0}
    config = RunConfig.from_mapping(
        {**mapping, **BOUNDED, "secure-aggregation-bound": 1e3, "secure-aggregation-max-rows": 0}
    )
    summary = run_federation(LocalGrid(client_app, config.to_mapping(), num_nodes=3), config)
    plain = run_plain(RunConfig.from_mapping(mapping), prepare(config))["test"]
    for name, value in plain.items():
        assert summary["test"][name] == pytest.approx(value, abs=1e-9)


SCALED = {"secure-aggregation-bound-scale": 0.2, "secure-aggregation-bound-floor": 0.05}


@pytest.mark.usefixtures("private_cache")
@pytest.mark.parametrize(
    "scaled",
    [{}, SCALED, {**SCALED, "secure-aggregation-helper": "process"}],
    ids=["fixed", "scaled", "helper-process"],
)
def test_the_audits_loop_gives_the_bounded_runs_metrics(tmp_path, scaled):
    """A bound that clips (B = 3, or each round's bound 0.2 x the table's median row norm, at
    most 3): the audit's Flower-free loop, which sums each user's clipped change, gives the
    metrics of the Flower run whose reports are proven (the nodes, the server and the
    helper each compute the round's bound from the table; the helper in the ServerApp's
    process, or in its own)."""
    mapping = {**SMALL, "results-dir": str(tmp_path), "item-lr": 8.0, **BOUNDED, **scaled}
    config = RunConfig.from_mapping(mapping)
    summary = run_federation(LocalGrid(client_app, config.to_mapping(), num_nodes=3), config)
    plain = run_plain(config, prepare(config))["test"]
    unbounded = run_plain(RunConfig.from_mapping({**SMALL, "item-lr": 8.0}), prepare(config))
    assert plain != unbounded["test"]  # the bound moves the table
    if scaled:  # the schedule moves it again
        fixed = {**SMALL, "item-lr": 8.0, **BOUNDED}
        assert plain != run_plain(RunConfig.from_mapping(fixed), prepare(config))["test"]
    for name, value in plain.items():
        assert summary["test"][name] == pytest.approx(value, abs=1e-9)


@pytest.mark.usefixtures("private_cache")
def test_the_audits_attacks_are_at_chance_on_bounded_reports():
    """The audit's attacks on what the server sees under the bound (the leader's share of
    each user's report, its own node), the malicious server's deviations included."""
    keys_ = {**SMALL, "synthetic-mean-degree": 15, "method": "pfedrec", "item-lr": 8.0}
    secure = audited_run({**keys_, **CONFIGS["secagg-bounded"]}, [3], 10, 0)["attacks"]
    for name in ATTACKS:
        assert abs(secure[name]["auc"] - 0.5) < 0.1, name


@pytest.mark.usefixtures("private_cache")
def test_the_audit_runs_the_bound_beside_promote_clients():
    """``secagg-bounded-promote``: the bounded audit with 5 % ``promote`` clients; the
    attacks stay at chance on the honest users' reports, the target's ER@10 is recorded at
    every round, and the malicious clients' reports move the table (the run differs from
    ``secagg-bounded`` on the same seed)."""
    keys_ = {**SMALL, "synthetic-mean-degree": 15, "method": "pfedrec", "item-lr": 8.0}
    promote = CONFIGS["secagg-bounded-promote"]
    assert promote["malicious-attack"] == "promote" and promote["secure-aggregation-bound"]
    attacked = audited_run({**keys_, **promote}, [3], 10, 0)
    for name in ATTACKS:
        assert abs(attacked["attacks"][name]["auc"] - 0.5) < 0.1, name
    exposure = attacked["exposure"]
    assert sorted(exposure["rounds"]) == [1, 2, 3]
    assert exposure["best"] == exposure["rounds"][attacked["best_round"]]
    assert exposure["max"] == max(exposure["rounds"].values())
    honest = audited_run({**keys_, **CONFIGS["secagg-bounded"]}, [3], 10, 0)
    assert "exposure" not in honest
    assert honest["test"] != attacked["test"]


@pytest.mark.usefixtures("private_cache")
def test_a_dropped_node_leaves_the_others_reports_to_aggregate(tmp_path):
    """A node that does not answer: its users' reports are missing, the others' sum moves
    the table as a plain round of the same nodes does."""
    wide = {"secure-aggregation-bound": 100.0, "secure-aggregation-max-rows": 0}
    bounded, grid = connected(tmp_path / "b", 4, **{"item-lr": 1.0, **BOUNDED, **wide})
    plain, plain_grid = connected(tmp_path / "p", 4, **{"item-lr": 1.0})
    bounded.aggregate_train(1, train_round(bounded, grid)[1][1:])
    plain.aggregate_train(1, train_round(plain, plain_grid)[1][1:])
    assert bounded.round_log.train_failures == 1
    assert bounded.round_log.train_users == plain.round_log.train_users < 30
    step = 2.0**-bounded.secure.bounded.bounds.frac_bits
    assert np.abs(bounded.model.table - plain.model.table).max() <= 30 * step


# ------------------------------------------------- clients that cheat, refused
@pytest.mark.usefixtures("private_cache")
@pytest.mark.parametrize("cheat", list(CHEATS))
def test_a_client_off_the_protocol_is_dropped_and_the_others_aggregate(tmp_path, cheat, caplog):
    """One user's report replaced by one breaking a bound: it is refused, the round goes
    on, and the table is the round's without that user, exactly."""
    cheater, honest = [connected(tmp_path / n, 4, **BOUNDED) for n in ("c", "h")]
    replies = [train_round(*pair)[1] for pair in (cheater, honest)]
    strategy = cheater[0]
    helper_public = secagg.public_bytes(strategy.secure.bounded.helper.key)
    bounds = strategy.secure.bounded.bounds
    for which, reply in enumerate(r[1] for r in replies):
        arrays = record_arrays(reply.content["arrays"])
        reports = client.unpack(arrays)
        user = reports[0].user
        partition = strategy.nodes[reply.metadata.src_node_id].partition_id
        if which == 0:  # the cheater's user, its key the node's
            key = secagg.private_key(strategy.config.training.seed, partition, "seeded")
            ctx = rep.context(1, 1, user, bounds)
            rng = np.random.default_rng(5)
            reports[0] = cheating_report(bounds, ctx, user, cheat, key, helper_public, rng)
        else:  # the same user left out
            reports = reports[1:]
        reply.content["arrays"] = array_record(client.pack(reports))
    for (strategy_, _), got in zip((cheater, honest), replies, strict=True):
        strategy_.aggregate_train(1, got)
    assert f"user {user} dropped: its report is refused" in caplog.text
    assert cheater[0].round_log.rejected_replies == 1
    assert cheater[0].round_log.train_users == honest[0].round_log.train_users == 29
    np.testing.assert_array_equal(cheater[0].model.table, honest[0].model.table)


# --------------------------------------------------------- what the server sees
def test_the_servers_share_of_a_report_looks_uniform():
    """The server's share of a report (the input minus the helper's keystream) is uniform
    over the field whatever the change: an honest user's and a zero change's shares pass
    the same Kolmogorov-Smirnov test against the uniform law."""
    bounds = circuit.Bounds.of(300, 8, 3.0, 40)
    rng = np.random.default_rng(0)
    helper_key = secagg.private_key(0, 1 << 32, "seeded")
    for scale in (0.0, 2.5):
        items = np.arange(30)
        changes = scale * rng.normal(size=(30, 8)) / np.sqrt(8)
        ctx = rep.context(1, 1, 0, bounds)
        measured = encoding.measure(bounds, items, changes, 10, 1.0, rng)
        report = rep.shard(
            bounds,
            ctx,
            0,
            measured,
            lambda attempt: rng.bytes(96),
            lambda sigma, ctx=ctx: rep.seal(
                sigma, helper_key, secagg.public_bytes(helper_key), ctx
            ),
        )
        values = report.share.astype(np.float64) / float(gf.P)
        assert stats.kstest(values, "uniform").pvalue > 1e-3
