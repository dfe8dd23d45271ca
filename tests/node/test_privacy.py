"""Privacy of the uploads: the LDP noise scale, clipping, decoys, unbiased aggregation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedrec_flwr.aggregation import RowUpload, row_changes
from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.node.samples import user_round_items, users_round_items
from fedrec_flwr.privacy import uploads
from fedrec_flwr.privacy.decoys import decoy_items, item_popularity, num_decoys, user_decoys
from fedrec_flwr.privacy.ldp import clip_rows, noise_scale, privatize
from fedrec_flwr.server_app import initial_item_table

pytestmark = pytest.mark.usefixtures("private_cache")

SYNTHETIC = {
    "dataset": "synthetic",
    "synthetic-users": 24,
    "synthetic-items": 300,
    "synthetic-mean-degree": 12,
}


def test_laplace_scale_is_twice_the_clip_times_root_d_over_epsilon():
    # Hand computation: 2 * 2.0 * sqrt(32) / 0.5 = 8 * 5.656854... = 45.254834
    assert noise_scale("laplace", 0.5, 1e-5, 2.0, 32) == pytest.approx(45.254834, abs=1e-6)


def test_gaussian_scale_is_the_classic_bound():
    # 2 * 1.0 * sqrt(2 ln(1.25 / 1e-5)) / 1.0: ln(125000) = 11.736069, x2 = 23.472138,
    # sqrt = 4.844805, x2 = 9.689610
    assert noise_scale("gaussian", 1.0, 1e-5, 1.0, 32) == pytest.approx(9.689610, abs=1e-6)
    assert noise_scale("gaussian", 2.0, 1e-5, 1.0, 8) == pytest.approx(9.689610 / 2, abs=1e-6)


def test_clipping_bounds_long_rows_and_keeps_short_ones():
    rows = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    clipped = clip_rows(rows, 1.0)
    np.testing.assert_allclose(clipped, [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]])


def test_privatize_adds_noise_of_the_stated_scale_around_the_clipped_change():
    rng = np.random.default_rng(0)
    sent = np.zeros((20000, 4), dtype=np.float32)
    tuned = np.full((20000, 4), 10.0, dtype=np.float32)  # change norm 20: clipped to 1
    out = privatize(sent, tuned, rng, "laplace", 2.0, 1e-5, 1.0, 0.0)
    b = noise_scale("laplace", 2.0, 1e-5, 1.0, 4)  # 2.0
    np.testing.assert_allclose(out.mean(0), 0.5, atol=0.05)  # clipped change: 0.5 per coordinate
    assert np.abs(out - 0.5).mean() == pytest.approx(b, rel=0.03)  # E|Laplace(b)| = b
    gauss = privatize(sent, tuned, rng, "gaussian", 2.0, 1e-5, 1.0, 0.0)
    sigma = noise_scale("gaussian", 2.0, 1e-5, 1.0, 4)
    assert (gauss - 0.5).std() == pytest.approx(sigma, rel=0.03)


def test_raw_lambda_noise_is_laplace_lambda_on_the_tuned_rows_without_clipping():
    rng = np.random.default_rng(1)
    tuned = np.full((20000, 2), 100.0, dtype=np.float32)
    out = privatize(np.zeros_like(tuned), tuned, rng, "none", 1.0, 1e-5, 1.0, 0.5)
    assert out.mean() == pytest.approx(100.0, abs=0.02)
    assert np.abs(out - 100.0).mean() == pytest.approx(0.5, rel=0.03)


def test_privacy_off_leaves_the_rows_untouched():
    tuned = np.arange(6, dtype=np.float32).reshape(3, 2)
    out = privatize(tuned * 0, tuned, np.random.default_rng(0), "none", 1.0, 1e-5, 1.0, 0.0)
    assert out is tuned
    assert not uploads.privacy_active(RunConfig())


@pytest.mark.parametrize("ratio", [0.5, 1.0, 3.0])
def test_decoys_never_include_an_item_the_user_interacted_with(ratio):
    prepared = prepare(RunConfig.from_mapping(SYNTHETIC))
    for user in range(prepared.num_users):
        decoys = decoy_items(prepared, 0, ratio, user)
        assert not np.isin(decoys, prepared.interacted(user)).any()
        assert not np.isin(decoys, prepared.train_positives(user)).any()
        assert len(np.unique(decoys)) == len(decoys)
        positives = len(np.unique(prepared.train_positives(user)))
        free = prepared.num_items - len(prepared.interacted(user))
        assert (
            len(decoys)
            == num_decoys(ratio, positives, free)
            == min(math.ceil(ratio * positives), free)
        )
    # fixed per (seed, user), so that requests of several rounds cannot be intersected
    np.testing.assert_array_equal(
        decoy_items(prepared, 0, 1.0, 3), decoy_items(prepared, 0, 1.0, 3)
    )
    assert not np.array_equal(decoy_items(prepared, 0, 1.0, 3), decoy_items(prepared, 1, 1.0, 3))


def _one_round(overrides: dict, users=None):
    config = RunConfig.from_mapping({**SYNTHETIC, **overrides})
    prepared = prepare(config)
    runtime = NodeRuntime(config, prepared, 0, 1)
    table = initial_item_table(config, prepared.num_items, runtime.method.row_dim)
    request = runtime.train_request(1)
    users = runtime.users if users is None else users
    result, _ = runtime.train(runtime.initial_state(), 1, users, None, table)
    upload = RowUpload(
        result.item_ids,
        result.row_sums,
        result.row_counts,
        result.num_users,
        zero_ids=result.zero_ids,
        zero_counts=result.zero_counts,
    )
    return table, upload, request, prepared


SHAPES = {"decoy-selection": "popularity", "decoy-request-size": 150}


@pytest.mark.parametrize(
    "method, shape", [("pfedrec", {}), ("fedmf", {}), ("pfedrec", SHAPES), ("fedmf", SHAPES)]
)
def test_decoys_without_noise_leave_the_aggregate_unchanged(method, shape):
    table, plain, plain_request, prepared = _one_round({"method": method})
    _, decoyed, request, _ = _one_round({"method": method, "decoy-ratio": 2.0, **shape})
    touched, change = row_changes(table, [plain], "round-mean")
    touched_d, change_d = row_changes(table, [decoyed], "round-mean")
    assert len(touched_d) > len(touched)  # the decoy rows were uploaded
    assert np.isin(touched, touched_d).all()
    full, full_d = np.zeros(table.shape), np.zeros(table.shape)
    full[touched], full_d[touched_d] = change, change_d
    np.testing.assert_allclose(full_d, full, rtol=0, atol=1e-9 * np.abs(full).max())
    # the request holds the decoys: what a node asks for hides which rows it trains
    config = RunConfig.from_mapping({**SYNTHETIC, "decoy-ratio": 2.0, **shape})
    decoys = np.concatenate([user_decoys(prepared, config, u) for u in range(prepared.num_users)])
    assert np.isin(decoys, request).all() and len(request) > len(plain_request)


def test_a_packed_node_uploads_the_sum_of_its_users_private_uploads():
    keys = {"ldp-mechanism": "gaussian", "ldp-epsilon": 1.0, "ldp-clip": 2.0, "decoy-ratio": 1.0}
    _, packed, _, prepared = _one_round(keys)
    total = np.zeros((prepared.num_items, 32))
    config = RunConfig.from_mapping({**SYNTHETIC, **keys})
    for user in range(prepared.num_users):
        runtime = NodeRuntime(config, prepared, user, prepared.num_users)
        table = initial_item_table(config, prepared.num_items, 32)
        result, _ = runtime.train(runtime.initial_state(), 1, runtime.users, None, table)
        total[result.item_ids] += result.row_sums
    np.testing.assert_allclose(total[packed.item_ids], packed.row_sums, rtol=1e-6, atol=1e-4)


def test_an_observer_sees_each_user_upload_and_changes_nothing():
    _, plain, _, _ = _one_round({})
    seen = []
    uploads.OBSERVERS.append(lambda *args: seen.append(args))
    try:
        _, observed, _, _ = _one_round({})
    finally:
        uploads.OBSERVERS.clear()
    assert len(seen) == 24
    np.testing.assert_array_equal(observed.item_ids, plain.item_ids)
    np.testing.assert_array_equal(observed.row_sums, plain.row_sums)


@pytest.mark.parametrize(
    "keys, words",
    [
        ({"ldp-mechanism": "laplce"}, "did you mean 'laplace'"),
        ({"ldp-mechanism": "laplace", "ldp-epsilon": 0.0}, "ldp-epsilon"),
        ({"ldp-clip": -1.0}, "ldp-clip"),
        ({"ldp-delta": 1.0}, "ldp-delta"),
        ({"ldp-laplace-lambda": -0.1}, "ldp-laplace-lambda"),
        ({"ldp-laplace-lambda": 0.1, "ldp-mechanism": "laplace"}, "two alternatives"),
        ({"decoy-ratio": -1.0}, "decoy-ratio"),
        ({"decoy-ratio": 1.0, "aggregation": "toucher-mean"}, "round-mean"),
    ],
)
def test_bad_privacy_settings_fail_early_saying_what_to_do(keys, words):
    with pytest.raises(ConfigError, match=words):
        RunConfig.from_mapping(keys)


def test_denoise_knows_the_noise_variance_and_shrinks_noise_only_rows():
    from fedrec_flwr.privacy.denoise import denoised, noise_variance

    gauss = RunConfig.from_mapping({"ldp-mechanism": "gaussian", "ldp-clip": 1.0})
    assert noise_variance(gauss, 32) == pytest.approx(9.689610**2, rel=1e-6)
    laplace = RunConfig.from_mapping({"ldp-mechanism": "laplace", "ldp-epsilon": 0.5})
    assert noise_variance(laplace, 4) == pytest.approx(2 * (2 * 2 / 0.5) ** 2)  # b = 8
    assert noise_variance(RunConfig.from_mapping({"ldp-laplace-lambda": 0.5}), 4) == 0.5
    config = RunConfig.from_mapping({"ldp-laplace-lambda": 0.5, "ldp-denoise": True})
    # 100 users, row 0 uploaded by 100 of them: noise variance per coordinate
    # 100 * 0.5 / 100^2 = 0.005, d = 2: expected noise energy 0.01
    upload = RowUpload(np.array([0, 1]), np.zeros((2, 2)), np.array([100, 100]), 100)
    change = np.array([[0.1, 0.0], [3.0, 4.0]])  # energies 0.01 and 25
    shrunk = denoised(np.array([0, 1]), change, [upload], config, 2)
    np.testing.assert_allclose(shrunk[0], 0.0, atol=1e-12)  # all noise: no step
    np.testing.assert_allclose(shrunk[1], change[1] * (1 - 0.01 / 25))
    off = RunConfig.from_mapping({})
    assert denoised(np.array([0, 1]), change, [upload], off, 2) is change
    with pytest.raises(ConfigError, match="ldp-denoise"):
        RunConfig.from_mapping({"ldp-denoise": True})


@pytest.mark.parametrize(
    "selection, request_size", [("uniform", 150), ("popularity", 0), ("popularity", 150)]
)
def test_shaped_decoys_never_include_a_positive(selection, request_size):
    config = RunConfig.from_mapping(
        {
            **SYNTHETIC,
            "decoy-ratio": 1.0,
            "decoy-selection": selection,
            "decoy-request-size": request_size,
        }
    )
    prepared = prepare(config)
    for user in range(prepared.num_users):
        decoys = user_decoys(prepared, config, user)
        assert not np.isin(decoys, prepared.interacted(user)).any()
        assert len(np.unique(decoys)) == len(decoys)
        positives = len(np.unique(prepared.train_positives(user)))
        free = prepared.num_items - len(prepared.interacted(user))
        wanted = max(math.ceil(positives), min(request_size - 5 * positives, free))
        assert len(decoys) == wanted  # the ratio, or enough to fill the request size


def test_popularity_matched_decoys_are_as_popular_as_the_positives():
    prepared = prepare(RunConfig.from_mapping(SYNTHETIC))
    popularity = item_popularity(prepared)
    positives, matched, uniform = [], [], []
    for user in range(prepared.num_users):
        positives.append(popularity[prepared.train_positives(user)].mean())
        matched.append(popularity[decoy_items(prepared, 0, 2.0, user, selection="popularity")])
        uniform.append(popularity[decoy_items(prepared, 0, 2.0, user)])
    matched_mean, uniform_mean = np.concatenate(matched).mean(), np.concatenate(uniform).mean()
    assert matched_mean > uniform_mean
    assert abs(matched_mean - np.mean(positives)) < abs(uniform_mean - np.mean(positives))


@pytest.mark.parametrize("updates, label", [("negatives", 0.0), ("positives", 1.0)])
def test_trained_decoys_join_the_samples_with_their_label(updates, label):
    config = RunConfig.from_mapping({**SYNTHETIC, "decoy-ratio": 1.0, "decoy-updates": updates})
    plain = RunConfig.from_mapping(SYNTHETIC)
    prepared = prepare(config)
    users = np.arange(prepared.num_users)
    batched = users_round_items(prepared, config, users, 2)
    for user, (items, labels) in zip(users, batched, strict=True):
        base_items, base_labels = user_round_items(prepared, plain, int(user), 2)
        decoys = user_decoys(prepared, config, int(user))
        np.testing.assert_array_equal(items, np.r_[base_items, decoys])
        np.testing.assert_array_equal(labels[: len(base_labels)], base_labels)
        assert (labels[len(base_labels) :] == label).all()
        assert not np.isin(decoys, prepared.train_positives(int(user))).any()
        single = user_round_items(prepared, config, int(user), 2)
        np.testing.assert_array_equal(single[0], items)


def test_trained_decoys_move_like_real_rows_and_unchanged_ones_do_not():
    def decoy_rows_moved(updates: str) -> np.ndarray:
        seen = []
        uploads.OBSERVERS.append(lambda *args: seen.append(args))
        try:
            keys = {"decoy-ratio": 2.0, "decoy-updates": updates, "method": "fedmf"}
            _, _, _, prepared = _one_round(keys)
        finally:
            uploads.OBSERVERS.clear()
        config = RunConfig.from_mapping({**SYNTHETIC, **keys})
        moved = []
        plain = RunConfig.from_mapping({**SYNTHETIC, "method": "fedmf"})
        for user, _, items, rows, sent in seen:
            trained = user_round_items(prepared, plain, user, 1)[0]  # a decoy may be a negative
            decoy = np.isin(items, user_decoys(prepared, config, user)) & ~np.isin(items, trained)
            moved.append(np.any(rows[decoy] != sent[decoy], axis=1))
        return np.concatenate(moved)

    assert not decoy_rows_moved("unchanged").any()  # identifiable: exactly the rows sent
    assert decoy_rows_moved("negatives").all()


def test_decoy_shape_keys_need_decoys():
    with pytest.raises(ConfigError, match="decoy-ratio > 0"):
        RunConfig.from_mapping({"decoy-updates": "negatives"})
    with pytest.raises(ConfigError, match="did you mean 'popularity'"):
        RunConfig.from_mapping({"decoy-ratio": 1.0, "decoy-selection": "popular"})
