"""Poisoning and the bounds on it: configuration values that are not numbers, the server's
per-row norm bound and robust aggregation, malicious clients and the targets' exposure."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch

from fedrec_flwr.aggregation import RowUpload, bounded_changes, defended_row_changes, row_changes
from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.node import malicious
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.schema import ConfigError, Key
from fedrec_flwr.server.model import ServerModel, UpdateRefusedError
from fedrec_flwr.server.optimizer import ServerOptimizer
from fedrec_flwr.server_app import run_federation
from fedrec_lab.local_grid import LocalGrid

SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 30,
    "synthetic-items": 200,
    "synthetic-mean-degree": 10,
    "num-server-rounds": 2,
    "batch-size": 32,
    "item-lr": 0.5,
    "run-name": "run",
}
FLOAT_KEYS = [key.name for key in RunConfig.declared_keys() if key.type is float]


# ------------------------------------------------------------------ configuration
@pytest.mark.parametrize("name", FLOAT_KEYS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e300])
def test_every_float_key_refuses_values_that_are_not_usable_numbers(name, value):
    with pytest.raises(ConfigError, match=f"{name}=.* is not a usable number: give a finite"):
        RunConfig.from_mapping({name: value})


def test_non_finite_refusal_is_a_property_of_every_float_key():
    key = Key("some-rate", 0.5, "a float key with no range")
    key.validate(3.0)
    key.validate(-1e12)
    for value in (math.nan, math.inf, 2e12):
        with pytest.raises(ConfigError, match=r"e\.g\. the default some-rate = 0\.5"):
            key.validate(value)
    Key("some-count", 3, "an int key").validate(10**15)  # int keys: their ranges only


# ------------------------------------------------------------------ defences
def upload(item_ids, rows, counts=None, users=1, dtype=np.float64) -> RowUpload:
    return RowUpload(
        item_ids=np.asarray(item_ids, dtype=np.int64),
        row_sums=np.asarray(rows, dtype=dtype),
        row_counts=np.asarray(counts or [users] * len(item_ids), dtype=np.int64),
        num_users=users,
    )


def server(bound: float = 0.0, robust: str = "none", aggregation: str = "round-mean"):
    table = np.ones((3, 4), dtype=np.float32)
    return ServerModel(
        table,
        {},
        ServerOptimizer("none", 1.0, 0.9),
        aggregation,
        row_update_bound=bound,
        robust_aggregation=robust,
    )


@pytest.mark.parametrize("value", [5e3, -5e3])
@pytest.mark.parametrize("robust", ["none", "trimmed-mean", "median"])
@pytest.mark.parametrize("aggregation", ["round-mean", "toucher-mean"])
def test_a_long_reply_cannot_move_a_row_beyond_the_bound(value, robust, aggregation):
    """Within update-limit the bound clips: the reply still counts, shortened."""
    model = server(bound=0.5, robust=robust, aggregation=aggregation)
    start = model.table.copy()
    honest = upload([0, 1], np.ones((2, 4)) + 0.01)
    poisoned = upload([0, 2], np.full((2, 4), value), users=2)  # a packed node's sums
    model.apply([honest, poisoned])
    moved = np.linalg.norm(model.table.astype(np.float64) - start, axis=1)
    assert np.isfinite(model.table).all()
    assert (moved <= 0.5 * (1 + 1e-6)).all()
    # clipped, not dropped: row 2 (the node's alone) moves the full bound, over the round
    share = 2 / 3 if aggregation == "round-mean" else 1.0
    assert moved[2] == pytest.approx(0.5 * share, rel=1e-6)


@pytest.mark.parametrize("value", [1e300, 1e6, -1e30, 2.0**31])
@pytest.mark.parametrize(("bound", "robust"), [(0.0, "none"), (0.5, "none"), (0.5, "median")])
def test_a_reply_beyond_the_update_limit_is_refused_and_the_rest_aggregate(value, bound, robust):
    """Not clipped: the reply is left out whole, the table is the honest replies' alone."""
    honest = upload([0, 1], np.ones((2, 4)) + 0.01)
    poisoned = upload([0, 2], np.full((2, 4), value), users=2)
    alone, model = server(bound, robust), server(bound, robust)
    assert model.refusals([honest, poisoned])[1] and "update-limit" in model.refusals([poisoned])[0]
    alone.apply([honest])
    model.apply([honest, poisoned])
    assert np.array_equal(model.table, alone.table)
    with pytest.raises(UpdateRefusedError, match="every upload of the round is refused"):
        model.apply([poisoned])


def test_apply_never_writes_a_table_beyond_its_values():
    """A refused update leaves the model as it was, the optimiser's momentum included."""
    table = np.ones((3, 4), dtype=np.float32)
    model = ServerModel(
        table, {}, ServerOptimizer("sgd-momentum", 1e6, 0.9), "round-mean", value_limit=100.0
    )
    model.apply([upload([0], np.full((1, 4), 1.0 + 1e-7))])
    state = {k: v.copy() for k, v in model.optimizer.state_arrays().items()}
    before = model.table.copy()
    with pytest.raises(UpdateRefusedError, match="beyond 100"):
        model.apply([upload([0], np.full((1, 4), 2.0))])  # a step of 1e6
    assert np.array_equal(model.table, before)
    for key, value in model.optimizer.state_arrays().items():
        assert np.array_equal(value, state[key])
    float32 = ServerModel(table, {}, ServerOptimizer("sgd-momentum", 1e36, 0.0), "round-mean")
    with pytest.raises(UpdateRefusedError, match="non-finite"):
        float32.apply([upload([0], np.full((1, 4), 9e3))])  # 1e36 x 9e3: beyond float32


def test_the_bound_clips_each_users_mean_change_and_zeroes_non_finite_ones():
    changes = np.array([[3.0, 4.0], [0.3, 0.4], [1e300, 1e300], [np.nan, 0.0], [6.0, 8.0]])
    out = bounded_changes(changes, np.array([1, 1, 1, 1, 2]), 1.0)
    np.testing.assert_allclose(out[0], [0.6, 0.8])
    np.testing.assert_array_equal(out[1], changes[1])  # short enough: unchanged
    np.testing.assert_allclose(out[2], [math.sqrt(0.5)] * 2)
    np.testing.assert_array_equal(out[3], [0.0, 0.0])
    np.testing.assert_allclose(out[4], [1.2, 1.6])  # two users: their sum up to 2


def test_without_defences_the_defended_path_is_the_mean():
    table = np.ones((3, 4), dtype=np.float32)
    rng = np.random.default_rng(0)
    ups = [upload([0, 2], rng.normal(size=(2, 4)) + 1, users=u) for u in (1, 3)]
    for rule in ("round-mean", "toucher-mean"):
        touched, delta = row_changes(table, ups, rule)
        got_touched, got = defended_row_changes(table, ups, rule, 0.0, "none")
        np.testing.assert_array_equal(got_touched, touched)
        np.testing.assert_allclose(got, delta, rtol=1e-12)


def test_median_and_trimmed_mean_ignore_one_outlier_among_a_rows_contributors():
    table = np.zeros((1, 2), dtype=np.float32)
    honest = [upload([0], [[v, -v]]) for v in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)]
    ups = [*honest, upload([0], [[1e6, 1e6]])]
    _, median = defended_row_changes(table, ups, "toucher-mean", 0.0, "median")
    np.testing.assert_allclose(median, [[0.55, -0.45]])
    _, trimmed = defended_row_changes(table, ups, "toucher-mean", 0.0, "trimmed-mean")
    np.testing.assert_allclose(trimmed, [[np.mean(np.arange(2, 10) / 10), -0.45]])
    _, round_mean = defended_row_changes(table, ups[:4], "round-mean", 0.0, "median")
    np.testing.assert_allclose(round_mean, [[0.25, -0.25]])  # 4 of the round's 4 users


def test_robust_aggregation_refuses_packed_nodes_and_decoys():
    server(robust="median").check_contributors(1)
    server(bound=1.0).check_contributors(5)
    with pytest.raises(ConfigError, match="Run one user per node"):
        server(robust="median").check_contributors(2)
    with pytest.raises(ConfigError, match="Set decoy-ratio = 0"):
        RunConfig.from_mapping({"robust-aggregation": "trimmed-mean", "decoy-ratio": 1.0})


# ------------------------------------------------------------------ malicious clients
def test_malicious_keys_go_together_and_need_the_strict_protocol():
    with pytest.raises(ConfigError, match="go together"):
        RunConfig.from_mapping({"malicious-fraction": 0.1})
    with pytest.raises(ConfigError, match="go together"):
        RunConfig.from_mapping({"malicious-attack": "scale"})
    with pytest.raises(ConfigError, match="protocol = 'strict'"):
        RunConfig.from_mapping(
            {"malicious-fraction": 0.1, "malicious-attack": "promote", "protocol": "paper"}
        )


def test_malicious_users_are_keyed_by_the_seed():
    chosen = malicious.malicious_users(0, 943, 0.01)
    assert len(chosen) == 9 and np.all(np.diff(chosen) > 0)
    np.testing.assert_array_equal(chosen, malicious.malicious_users(0, 943, 0.01))
    assert not np.array_equal(chosen, malicious.malicious_users(1, 943, 0.01))
    assert len(malicious.malicious_users(0, 30, 0.001)) == 1
    assert set(malicious.malicious_users(0, 943, 0.01)) <= set(
        malicious.malicious_users(0, 943, 0.05)
    )


def attacked(attack: str, scale: float) -> tuple[RunConfig, NodeRuntime]:
    config = RunConfig.from_mapping(
        {
            **SMALL,
            "malicious-fraction": 0.2,
            "malicious-attack": attack,
            "malicious-scale": scale,
            "malicious-target-items": 2,
        }
    )
    return config, NodeRuntime(config, prepare(config), 0, 1)


@pytest.mark.usefixtures("private_cache")
def test_a_promoting_user_uploads_targets_pushed_towards_the_popular_rows():
    config, runtime = attacked("promote", 3.0)
    data = runtime.prepared
    bad = malicious.malicious_users(0, data.num_users, 0.2)
    targets = malicious.target_items(data, 0, 2)
    popularity = malicious.popularity(data)
    assert popularity[targets].max() <= np.median(popularity)
    requested = runtime.train_request(1)
    assert set(malicious.attack_items(data, malicious.Attack.of(config))) <= set(requested)
    table = np.random.default_rng(0).normal(size=(data.num_items, 32)).astype(np.float32)
    user = int(bad[0])
    result, _ = runtime.train(runtime.initial_state(), 1, np.array([user]), None, table, {})
    popular = table[malicious.popular_items(data)].astype(np.float64).mean(axis=0)
    expected = table[targets] + 3.0 * (popular - table[targets])
    where = np.searchsorted(result.item_ids, targets)
    np.testing.assert_array_equal(result.item_ids[where], targets)
    np.testing.assert_allclose(result.row_sums[where], expected, rtol=1e-5, atol=1e-5)
    honest = np.array([int(np.setdiff1d(runtime.users, bad)[0])])
    result, _ = runtime.train(runtime.initial_state(), 1, honest, None, table, {})
    clean = NodeRuntime(RunConfig.from_mapping(SMALL), data, 0, 1)
    expected_honest, _ = clean.train(clean.initial_state(), 1, honest, None, table, {})
    np.testing.assert_array_equal(result.item_ids, expected_honest.item_ids)
    np.testing.assert_array_equal(result.row_sums, expected_honest.row_sums)


@pytest.mark.usefixtures("private_cache")
def test_a_scaling_user_uploads_its_honest_change_times_the_factor():
    _, honest_runtime = attacked("scale", 1.0)
    _, runtime = attacked("scale", 5.0)
    user = int(malicious.malicious_users(0, runtime.prepared.num_users, 0.2)[0])
    table = np.random.default_rng(0).normal(size=(runtime.prepared.num_items, 32))
    table = table.astype(np.float32)
    honest, _ = honest_runtime.train(
        honest_runtime.initial_state(), 1, np.array([user]), None, table, {}
    )
    scaled, _ = runtime.train(runtime.initial_state(), 1, np.array([user]), None, table, {})
    np.testing.assert_array_equal(scaled.item_ids, honest.item_ids)
    base = table[honest.item_ids]
    np.testing.assert_allclose(
        scaled.row_sums - base, 5.0 * (honest.row_sums - base), rtol=1e-4, atol=1e-5
    )


def test_exposure_counts_users_with_a_valid_target_in_their_top_10():
    scores = torch.arange(30, dtype=torch.float32).repeat(3, 1)  # item i scores i
    valid = torch.ones(3, 30, dtype=torch.bool)
    valid[1, 25:] = False  # user 1: the top items are train positives, so item 20 climbs
    valid[2, 20] = False  # user 2: the target is a train positive
    exposed = malicious.target_exposure(scores, valid, np.array([20]))
    np.testing.assert_array_equal(exposed, [1.0, 1.0, 0.0])  # user 0: 9 items beat it
    assert malicious.target_exposure(scores, valid, np.array([19]))[0] == 0.0  # 10 beat it


@pytest.mark.usefixtures("private_cache")
def test_an_attacked_run_reports_the_targets_exposure_each_round(tmp_path):
    run_config = {
        **SMALL,
        "results-dir": str(tmp_path),
        "malicious-fraction": 0.1,
        "malicious-attack": "promote",
        "row-update-bound": 1.0,
    }
    run_federation(
        LocalGrid(client_app, run_config, num_nodes=3), RunConfig.from_mapping(run_config)
    )
    with open(tmp_path / "run" / "rounds.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    assert all(0.0 <= float(row["target-er@10"]) <= 1.0 for row in rows)
