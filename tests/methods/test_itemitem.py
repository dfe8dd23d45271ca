"""The item-item methods (EASE, ItemKNN, GF-CF over summed co-occurrences): their models
against the centralized reference code, the uploads, the server's sums and noise, and the
conformance suite, whose tests about gradient steps are replaced by what holds for a method
that takes none (each replacement says which test it stands for and why)."""

from __future__ import annotations

import itertools
from typing import ClassVar

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord

from fedrec_flwr.aggregation import RowUpload
from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.messages import allowed_upload_keys, record_arrays
from fedrec_flwr.methods import build_method
from fedrec_flwr.methods.cooccurrence import (
    ease_weights,
    gfcf_weights,
    itemknn_weights,
    low_rank_gram,
    model_weights,
    symmetric_from_upper,
)
from fedrec_flwr.methods.itemitem import ItemItemKeys, scaled_weight
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node import runtime as node_runtime
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.node.statistics import first_selected, statistics_upload
from fedrec_flwr.partition import participants
from fedrec_flwr.privacy import secagg
from fedrec_flwr.privacy.secure_statistics import StatisticsLayout
from fedrec_flwr.privacy.sum_noise import (
    SumNoise,
    counts_sensitivity,
    epsilon_of,
    gram_sensitivity,
    noise_multiplier,
)
from fedrec_flwr.results import TIMING_COLUMNS
from fedrec_flwr.server.payloads import TrainOrder
from fedrec_flwr.server.statistics import (
    StatisticsModel,
    StatisticsUpload,
    check_statistics_reply,
    secure_statistics,
)
from fedrec_flwr.server.validation import ReplyError, ReplySchema
from fedrec_flwr.server_app import server_model
from fedrec_lab.testing import TINY, FederationConformance, StateConformance, StepConformance

sp = pytest.importorskip("scipy.sparse")


def binary(rng, users=30, items=25, density=0.3):
    return (rng.random((users, items)) < density).astype(np.float64)


# ------------------------------------------------------------------ the models
def test_ease_from_the_gram_equals_the_centralized_ease():
    from fedrec_lab.baselines.models import ease_scores

    x = binary(np.random.default_rng(0))
    weights = ease_weights(x.T @ x, lam=3.0)
    np.testing.assert_allclose(x @ weights, ease_scores(sp.csr_matrix(x), 3.0), atol=1e-10)
    assert np.all(np.diagonal(weights) == 0)


@pytest.mark.parametrize("k", [1, 5, 24])
def test_itemknn_from_the_gram_equals_the_centralized_itemknn(k):
    from fedrec_lab.baselines.models import itemknn_scorer, knn_neighbours

    x = binary(np.random.default_rng(1))
    x[:, 3] = 0.0  # an item no user holds
    train = sp.csr_matrix(x.astype(np.float32))
    ids, sims = knn_neighbours(train, 24)
    expected = itemknn_scorer(train, ids, sims, k)(np.arange(len(x)))
    weights = itemknn_weights(x.T @ x, k)
    np.testing.assert_allclose(x @ weights, expected, rtol=1e-6, atol=1e-6)
    assert np.all((weights != 0).sum(axis=0) <= k)


def test_itemknn_shrink_lowers_every_similarity():
    x = binary(np.random.default_rng(2))
    plain, shrunk = itemknn_weights(x.T @ x, 5), itemknn_weights(x.T @ x, 5, shrink=10.0)
    assert np.all(shrunk[plain > 0] < plain[plain > 0])


def test_gfcf_equals_the_papers_formula_from_the_normalised_rating_matrix():
    x = binary(np.random.default_rng(3))
    d_user, d_item = x.sum(1), x.sum(0)
    normalised = x / np.sqrt(d_user)[:, None] / np.sqrt(d_item)[None, :]  # R~ of GF-CF
    _, _, vt = np.linalg.svd(normalised)
    rank, alpha = 6, 0.3
    top = vt[:rank]
    expected = normalised.T @ normalised + alpha * np.diag(d_item**-0.5) @ top.T @ top @ np.diag(
        d_item**0.5
    )
    gram = (x / d_user[:, None]).T @ x
    np.testing.assert_allclose(gfcf_weights(gram, d_item, alpha, rank, 0), expected, atol=1e-10)


def test_gfcf_randomised_eigenvectors_span_the_top_eigenspace(monkeypatch):
    from fedrec_flwr.methods import cooccurrence

    x = binary(np.random.default_rng(4), users=200, items=120, density=0.1)
    gram, counts = (x / np.maximum(x.sum(1), 1)[:, None]).T @ x, x.sum(0)
    exact = gfcf_weights(gram, counts, 0.3, 8, 0)
    monkeypatch.setattr(cooccurrence, "FULL_EIGEN_LIMIT", 10)
    monkeypatch.setattr(cooccurrence, "OVERSAMPLING", 20)
    approximate = gfcf_weights(gram, counts, 0.3, 8, 0)
    np.testing.assert_allclose(approximate, exact, atol=1e-3 * np.abs(exact).max())


def test_gfcf_ignores_the_basis_of_the_null_space_an_eigensolver_returns(monkeypatch):
    """More eigenvectors asked for than the Gram's rank: the rest span its null space, in a
    basis that depends on the machine's BLAS kernels. Any orthonormal basis of it gives the
    same weights, bit for bit, and the weights equal the formula over the range alone."""
    from fedrec_flwr.methods import cooccurrence

    rng = np.random.default_rng(5)
    x = binary(rng, users=12, items=60, density=0.15)  # rank <= 12 < the 30 asked for
    gram, counts = (x / np.maximum(x.sum(1), 1)[:, None]).T @ x, x.sum(0)
    weights = gfcf_weights(gram, counts, 0.3, 30, 0)
    solved = cooccurrence.top_eigenpairs

    def other_null_basis(matrix, rank, seed):
        values, vectors = solved(matrix, rank, seed)
        null = values <= 1e-12 * values.max()
        assert null.sum() >= 10
        turn = np.linalg.qr(rng.normal(size=(null.sum(), null.sum())))[0]
        vectors = vectors.copy()
        vectors[:, null] = vectors[:, null] @ turn
        return values, vectors

    monkeypatch.setattr(cooccurrence, "top_eigenpairs", other_null_basis)
    np.testing.assert_array_equal(gfcf_weights(gram, counts, 0.3, 30, 0), weights)
    monkeypatch.undo()
    rank = int((np.linalg.eigvalsh(gram) > 1e-9).sum())
    np.testing.assert_array_equal(gfcf_weights(gram, counts, 0.3, rank, 0), weights)


def test_the_low_rank_gram_keeps_the_largest_eigenvalues_and_drops_negative_ones():
    rng = np.random.default_rng(6)
    factors = rng.normal(size=(40, 3)) * [6.0, 4.0, 3.0]
    clean = factors @ factors.T  # positive semidefinite, rank 3
    noise = rng.normal(scale=0.3, size=(40, 40))
    noisy = clean + (noise + noise.T) / np.sqrt(2)
    projected = low_rank_gram(noisy, 3, seed=0)
    values, vectors = np.linalg.eigh(noisy)
    top = vectors[:, -3:]
    np.testing.assert_allclose(projected, top @ np.diag(values[-3:]) @ top.T, atol=1e-9)
    assert np.linalg.matrix_rank(projected) == 3 and np.allclose(projected, projected.T)
    # it removes most of the noise: nearer the clean sums than what was released
    assert np.linalg.norm(projected - clean) < 0.5 * np.linalg.norm(noisy - clean)
    # a rank above the size: the nearest positive semidefinite matrix
    nearest = low_rank_gram(noisy, 100, seed=0)
    np.testing.assert_allclose(nearest, vectors @ np.diag(values.clip(0)) @ vectors.T, atol=1e-9)


def test_the_low_rank_gram_of_a_large_catalogue_comes_from_the_randomised_eigenvectors(
    monkeypatch,
):
    from fedrec_flwr.methods import cooccurrence

    x = binary(np.random.default_rng(7), users=200, items=120, density=0.1)
    exact = low_rank_gram(x.T @ x, 8, seed=0)
    monkeypatch.setattr(cooccurrence, "FULL_EIGEN_LIMIT", 10)
    monkeypatch.setattr(cooccurrence, "OVERSAMPLING", 20)
    approximate = low_rank_gram(x.T @ x, 8, seed=0)
    np.testing.assert_allclose(approximate, exact, atol=1e-3 * np.abs(exact).max())


def test_the_upper_triangle_round_trips():
    sym = np.random.default_rng(5).normal(size=(7, 7))
    sym = sym + sym.T
    upper = sym[np.triu_indices(7)]
    assert np.array_equal(symmetric_from_upper(upper, 7), sym)


# ------------------------------------------------------------------ the config
def config(**changes):
    return RunConfig.from_mapping({**TINY, "method": "itemitem", **changes})


@pytest.mark.parametrize(
    "key",
    [
        {"personalization": "dual"},
        {"ldp-mechanism": "gaussian"},
        {"decoy-ratio": 1.0},
        {"sam-rho-shared": 0.1},
        {"row-update-bound": 1.0},
        {"plgc": True},
    ],
)
def test_options_of_the_gradient_methods_are_refused(key):
    with pytest.raises(ConfigError):
        config(**key)


def test_noise_needs_a_bound_on_a_users_items():
    with pytest.raises(ConfigError, match="itemitem-max-degree"):
        config(**{"itemitem-dp-epsilon": 4.0})
    config(**{"itemitem-dp-epsilon": 4.0, "itemitem-max-degree": 10})


# ------------------------------------------------------------------ the uploads
def runtime(partition=0, partitions=1, **changes) -> NodeRuntime:
    run = config(**changes)
    return NodeRuntime(run, prepare(run), partition, partitions)


def test_a_user_uploads_its_train_positives_once_at_most_max_degree_of_them():
    node = runtime(**{"itemitem-max-degree": 6})
    data = node.prepared
    for user in range(data.num_users):
        items = node.method.uploaded_items(data, user)
        positives = np.unique(data.train_positives(user))
        assert len(items) == min(6, len(positives))
        assert np.all(np.isin(items, positives)) and np.all(np.diff(items) > 0)
    fewer = runtime(**{"fraction-train": 0.3})
    seen: set[int] = set()
    for server_round in range(1, 8):
        chosen = participants(0, server_round, data.num_users, 0.3)
        first = chosen[first_selected(fewer.config, data.num_users, chosen, server_round)]
        assert not seen & set(first.tolist())
        assert set(chosen.tolist()) - seen == set(first.tolist())
        seen |= set(first.tolist())


def test_the_history_is_the_users_train_positives_and_scores_are_its_sum_of_columns():
    node = runtime(partition=1, partitions=3)
    history = node.initial_state().private["history"]
    for j, user in enumerate(node.users):
        assert set(torch.nonzero(history[j]).ravel().tolist()) == set(
            node.prepared.train_positives(int(user)).tolist()
        )
    table = torch.randn(node.prepared.num_items, node.prepared.num_items)
    scores = node.method.logits_all({"history": history}, table)
    torch.testing.assert_close(scores, history @ table.T, rtol=1e-5, atol=1e-5)


def test_a_secure_upload_decodes_to_the_plain_sums():
    node = runtime(**{"itemitem-model": "gfcf"})
    secure = runtime(**{"itemitem-model": "gfcf", "secure-aggregation": True})
    users = node.users
    plain = statistics_upload(node, users, 1).statistics
    vector = statistics_upload(secure, users, 1).secure
    num = node.prepared.num_items
    decoded = StatisticsLayout(num).decode(vector)
    items, offsets = plain["basket_items"], plain["basket_offsets"]
    gram, counts = np.zeros((num, num)), np.zeros(num)
    for lo, hi in itertools.pairwise(offsets):
        basket = items[lo:hi]
        gram[np.ix_(basket, basket)] += 1.0 / len(basket)
        counts[basket] += 1
    np.testing.assert_allclose(symmetric_from_upper(decoded.upper, num), gram, atol=1e-8)
    assert np.array_equal(decoded.counts, counts) and decoded.num_users == len(users)


def test_masked_node_vectors_sum_to_the_vector_of_all_users():
    layout = StatisticsLayout(6)
    baskets = [np.array([0, 2]), np.array([1, 2, 5]), np.array([4])]
    keys = [secagg.private_key(0, p, "seeded") for p in range(3)]
    public = np.stack([secagg.public_bytes(k) for k in keys])
    peers = np.arange(3)
    masked = [
        secagg.masked(layout.encode([b], [1.0], 3), keys[p], p, peers, public, 1)
        for p, b in enumerate(baskets)
    ]
    assert not np.array_equal(masked[0], layout.encode([baskets[0]], [1.0], 3))
    total = secagg.ring_sum(masked)
    assert np.array_equal(total, layout.encode(baskets, [1.0] * 3, 3))
    upload = secure_statistics(total, layout)
    assert upload.num_users == 3 and upload.sums.counts.tolist() == [1, 1, 2, 0, 1, 1]


def schema(max_degree=0):
    return ReplySchema(10, 10, {}, statistics=True, max_degree=max_degree)


METRICS = {"num-users": 2, "num-samples": 3, "loss-sum": 0.0}
GOOD = {
    "basket-items": np.array([1, 4, 2], np.int64),
    "basket-offsets": np.array([0, 2, 3], np.int64),
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"basket-items": np.array([1, 1, 2], np.int64)}, "twice"),
        ({"basket-items": np.array([1, 4, 10], np.int64)}, "outside"),
        ({"basket-offsets": np.array([0, 3, 2], np.int64)}, "rise"),
        ({"basket-items": np.array([1.0, 4.0, 2.0])}, "int64"),
        ({"row-sums": np.zeros((1, 10))}, "not allowed"),
    ],
)
def test_malformed_statistics_replies_are_rejected(change, message):
    order = TrainOrder(np.array([0, 3]), np.empty(0, np.int64))
    upload = check_statistics_reply(GOOD, METRICS, schema(), order)
    assert upload.num_users == 2
    with pytest.raises(ReplyError, match=message):
        check_statistics_reply({**GOOD, **change}, METRICS, schema(), order)
    with pytest.raises(ReplyError, match="itemitem-max-degree"):
        check_statistics_reply(GOOD, METRICS, schema(max_degree=1), order)
    with pytest.raises(ReplyError, match="selected"):
        check_statistics_reply(GOOD, METRICS, schema(), TrainOrder(np.array([0]), None))


# ------------------------------------------------------------------ the noise
def test_the_noise_multiplier_gives_the_stated_epsilon():
    for epsilon in (1.0, 8.0, 100.0):
        z = noise_multiplier(epsilon, 1e-5)
        assert epsilon_of(z, 1e-5) == pytest.approx(epsilon, rel=1e-4)
    assert gram_sensitivity("ease", 10) == pytest.approx(np.sqrt(110))
    assert gram_sensitivity("gfcf", 10) == 2.0 and counts_sensitivity(10) == np.sqrt(20)
    one = SumNoise("gfcf", 10, 4.0, 1e-5, 1, seed=0)
    two = SumNoise("gfcf", 10, 4.0, 1e-5, 2, seed=0)
    assert one.gram_std == one.counts_std == pytest.approx(one.multiplier * np.sqrt(24))
    assert two.multiplier == pytest.approx(one.multiplier * np.sqrt(2))
    for noise in (one, two):  # the releases compose to the stated epsilon
        assert noise.record()["epsilon"] == pytest.approx(4.0, rel=1e-4)


def test_the_noise_is_symmetric_keyed_and_of_the_stated_spread():
    noise = SumNoise("ease", 5, 8.0, 1e-5, 1, seed=3)
    first, second = np.zeros((600, 600)), np.zeros((600, 600))
    noise.add_to_gram(first, 2)
    noise.add_to_gram(second, 2)
    assert np.array_equal(first, second) and np.array_equal(first, first.T)
    upper = first[np.triu_indices(600)]
    assert upper.std() == pytest.approx(noise.gram_std, rel=0.01)
    third = np.zeros((600, 600))
    noise.add_to_gram(third, 3)
    assert not np.array_equal(first, third)
    coords = np.array([1, 4, 7])  # over a support only: symmetric there, zero elsewhere
    block = np.zeros((9, 9))
    noise.add_to_gram(block, 2, coords)
    inside = np.ix_(coords, coords)
    assert np.array_equal(block[inside], block[inside].T) and np.all(block[inside] != 0)
    block[inside] = 0.0
    assert not block.any()


def test_the_server_sums_each_round_and_recomputes_the_model():
    run = config(**{"itemitem-lambda": 2.0})
    method = build_method(run, 5)
    model = StatisticsModel(run, method, 5)
    model.start_round()
    upload = check_statistics_reply(
        {
            "basket-items": np.array([0, 1, 1, 2, 4], np.int64),
            "basket-offsets": np.array([0, 2, 5]),
        },
        {"num-users": 2, "num-samples": 5, "loss-sum": 0.0},
        ReplySchema(5, 5, {}, True),
        TrainOrder(np.array([0, 1]), None),
    )
    touched = model.apply([upload])
    assert touched.tolist() == [0, 1, 2, 4]
    x = np.array([[1, 1, 0, 0, 0], [0, 1, 1, 0, 1]], dtype=np.float64)
    np.testing.assert_allclose(model.gram, x.T @ x)
    np.testing.assert_allclose(model.table, ease_weights(x.T @ x, 2.0).T, rtol=1e-6)
    state = model.state_dict()
    again = StatisticsModel(run, method, 5)
    again.load_state_dict(state)
    assert np.array_equal(again.table, model.table) and again.contributors == 2


@pytest.mark.parametrize("kind", ["ease", "itemknn", "gfcf"])
def test_every_model_reads_the_low_rank_gram_and_the_sums_stay_as_released(kind):
    run = config(**{"itemitem-model": kind, "itemitem-gram-rank": 2, "itemitem-rank": 2})
    method = build_method(run, 6)
    model = StatisticsModel(run, method, 6)
    model.start_round()
    items = np.array([0, 1, 2, 1, 2, 3, 3, 4, 5, 0, 5], np.int64)
    model.apply([StatisticsUpload(4, items, np.array([0, 3, 6, 9, 11]))])
    plain = config(**{"itemitem-model": kind, "itemitem-rank": 2})
    reference = StatisticsModel(plain, build_method(plain, 6), 6)
    reference.start_round()
    reference.apply([StatisticsUpload(4, items, np.array([0, 3, 6, 9, 11]))])
    assert np.array_equal(model.gram, reference.gram)  # the projection is not accumulated
    expected = model_weights(
        kind, low_rank_gram(model.gram, 2, 0), model.counts, plain.group(ItemItemKeys), 0
    )
    np.testing.assert_allclose(model.table, expected.T.astype(np.float32), rtol=1e-5, atol=1e-6)
    assert not np.allclose(model.table, reference.table)


def test_a_gram_rank_that_keeps_every_eigenvalue_is_refused():
    run = config(**{"itemitem-gram-rank": 5})
    with pytest.raises(ConfigError, match="itemitem-gram-rank=5 keeps every eigenvalue"):
        StatisticsModel(run, build_method(run, 5), 5)


def test_the_server_applies_co_occurrence_uploads_only():
    run = config()
    model = server_model(run, build_method(run, 5), 5)
    assert isinstance(model, StatisticsModel)
    rows = RowUpload(np.array([0]), np.ones((1, 5), np.float32), np.array([1]), 1)
    with pytest.raises(TypeError, match="RowUpload where StatisticsUpload"):
        model.apply([rows])


# ------------------------------------------------------------------ the scaled degree bound
@pytest.mark.parametrize("k", [1, 5, 25])
def test_a_scaled_users_co_occurrences_have_at_most_the_norm_of_k_items(k):
    for size in range(1, 400):
        weight = scaled_weight(size, k)
        assert weight == 1.0 if size <= k else 0.0 < weight < 1.0
        assert weight * 2.0**32 == int(weight * 2.0**32)  # exact in the secure fixed point
        assert weight**2 * size * (size + 1) <= k * (k + 1)  # the upper triangle's norm
    assert scaled_weight(k + 1, k) == pytest.approx(np.sqrt(k / (k + 2)), abs=2.0**-31)


def test_scaled_users_upload_every_item_and_the_secure_sum_equals_the_plain_one():
    keys = {"itemitem-max-degree": 3, "itemitem-degree-bound": "scale"}
    node = runtime(**keys)
    secure = runtime(**keys, **{"secure-aggregation": True})
    data, method = node.prepared, node.method
    for user in range(data.num_users):
        assert np.array_equal(
            method.uploaded_items(data, user), np.unique(data.train_positives(user))
        )
    plain = statistics_upload(node, node.users, 1).statistics
    items, offsets = plain["basket_items"], plain["basket_offsets"]
    assert np.diff(offsets).max() > 3 and method.upload_limit == 0
    num = data.num_items
    model = StatisticsModel(node.config, method, num)
    model.start_round()
    model.apply([StatisticsUpload(len(node.users), items, offsets)])
    gram = np.zeros((num, num))
    for lo, hi in itertools.pairwise(offsets):
        basket = items[lo:hi]
        gram[np.ix_(basket, basket)] += min(1.0, np.sqrt(12 / ((hi - lo) * (hi - lo + 1))))
    np.testing.assert_allclose(model.gram, gram, atol=1e-8)
    layout = StatisticsLayout(num, weighted=True)
    decoded = layout.decode(statistics_upload(secure, node.users, 1).secure)
    assert np.array_equal(symmetric_from_upper(decoded.upper, num), model.gram)
    assert np.array_equal(decoded.counts, np.diagonal(model.gram))  # the counts: weighted


def test_scaled_counts_have_at_most_the_norm_of_k_items_and_fix_the_support():
    """Under the scaled bound the counts round sums ``w_u x_u`` (L2 norm at most sqrt(k),
    the sensitivity the counts' noise is calibrated to), and ``itemitem-min-count`` keeps
    the items whose weighted count reaches it; the second round's diagonal equals it."""
    for k in (1, 3, 25):
        for size in range(1, 300):
            assert scaled_weight(size, k) ** 2 * size <= k
    keys = {
        "itemitem-max-degree": 2,
        "itemitem-degree-bound": "scale",
        "itemitem-min-count": 2,
        "secure-aggregation": True,
        "num-server-rounds": 2,
    }
    node = runtime(**keys)
    data, method = node.prepared, node.method
    model = StatisticsModel(node.config, method, data.num_items)
    model.start_round()
    layout = model.secure_layout()
    assert layout.weighted and not layout.gram
    vector = statistics_upload(node, node.users, 1).secure
    model.apply([secure_statistics(vector, layout)])
    weighted = np.zeros(data.num_items)
    for user in node.users:
        items = np.unique(data.train_positives(int(user)))
        weighted[items] += scaled_weight(len(items), 2)
    np.testing.assert_allclose(model.counts, weighted, atol=1e-8)
    support = np.flatnonzero(weighted >= 2)
    unweighted = np.flatnonzero(
        np.bincount(
            np.concatenate([np.unique(data.train_positives(int(u))) for u in node.users]),
            minlength=data.num_items,
        )
        >= 2
    )
    assert 0 < len(support) < len(unweighted)
    assert np.array_equal(model.support, support)
    model.start_round()
    second = statistics_upload(node, node.users, 2, model.support).secure
    model.apply([secure_statistics(second, model.secure_layout())])
    block = np.ix_(support, support)
    np.testing.assert_allclose(np.diagonal(model.gram[block]), weighted[support], atol=1e-8)


def test_the_scaled_counts_noise_is_two_releases_at_the_counts_sensitivity():
    keys = {"itemitem-max-degree": 4, "itemitem-degree-bound": "scale", "itemitem-dp-epsilon": 8.0}
    noise = SumNoise.of(config(**keys, **{"itemitem-min-count": 3}))
    assert noise is not None and noise.releases == 2
    assert noise.counts_std == pytest.approx(noise.multiplier * counts_sensitivity(4))
    assert noise.record()["epsilon"] == pytest.approx(8.0, rel=1e-6)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"itemitem-model": "gfcf"}, "GF-CF's degrees"),
        ({"itemitem-max-degree": 0}, "set itemitem-max-degree"),
    ],
)
def test_the_scaled_degree_bound_is_refused_where_it_would_not_bound(changes, message):
    keys = {"itemitem-max-degree": 3, "itemitem-degree-bound": "scale", **changes}
    with pytest.raises(ConfigError, match=message):
        config(**keys)


def test_the_dp_ridge_raises_eases_lambda_by_the_noises_spectral_edge():
    for changes in ({}, {"itemitem-model": "itemknn", "itemitem-dp-epsilon": 8.0}):
        with pytest.raises(ConfigError, match="itemitem-dp-ridge"):
            config(**{"itemitem-dp-ridge": 1.0, "itemitem-max-degree": 3, **changes})
    keys = {"itemitem-max-degree": 3, "itemitem-dp-epsilon": 8.0, "itemitem-lambda": 2.0}
    ridged = config(**keys, **{"itemitem-dp-ridge": 1.5})
    model = StatisticsModel(ridged, build_method(ridged, 6), 6)
    model.start_round()
    items = np.array([0, 1, 2, 1, 2, 3, 3, 4, 5, 0, 5], np.int64)
    model.apply([StatisticsUpload(4, items, np.array([0, 3, 6, 9, 11]))])
    support = model.support  # the items of a released count of at least 1
    assert support is not None and 0 < len(support) < 6
    lam = 2.0 + 1.5 * 2.0 * model.noise.gram_std * np.sqrt(len(support))
    expected = np.zeros((6, 6), dtype=np.float32)
    expected[np.ix_(support, support)] = ease_weights(model.gram[np.ix_(support, support)], lam)
    np.testing.assert_allclose(model.table, expected.T, rtol=1e-5, atol=1e-6)
    plain = config(**keys)
    reference = StatisticsModel(plain, build_method(plain, 6), 6)
    reference.start_round()
    reference.apply([StatisticsUpload(4, items, np.array([0, 3, 6, 9, 11]))])
    assert np.array_equal(model.gram, reference.gram)  # the same release, another lambda
    assert not np.allclose(model.table, reference.table)


# ------------------------------------------------------------------ the conformance suite


def node_one_offline(message, context):
    """The client app, but the node of partition 1 fails every train message."""
    from fedrec_flwr.client_app import app as client_app

    if message.metadata.message_type == "train" and context.node_config["partition-id"] == 1:
        raise RuntimeError("device went offline")
    return client_app(message, context)


class TestItemItemEase(StepConformance, StateConformance, FederationConformance):
    config: ClassVar[dict] = {"method": "itemitem", "itemitem-lambda": 5.0}

    def test_packed_training_equals_training_each_user_alone(self):
        """Stands for test 1: a node's upload of its users is each user's upload taken
        alone, put together (item lists in user order; the secure vector their sum)."""
        for secure in (False, True):
            node = runtime(**{**self.config, "secure-aggregation": secure})
            together = statistics_upload(node, node.users, 1)
            alone = [statistics_upload(node, node.users[j : j + 1], 1) for j in range(5)]
            if secure:
                assert np.array_equal(
                    together.secure,
                    secagg.ring_sum(
                        [a.secure for a in alone]
                        + [statistics_upload(node, node.users[5:], 1).secure]
                    ),
                )
                continue
            items = together.statistics["basket_items"]
            prefix = np.concatenate([a.statistics["basket_items"] for a in alone])
            assert np.array_equal(items[: len(prefix)], prefix)
            assert together.num_users == len(node.users)

    def test_closed_form_gradients_equal_autograd(self, monkeypatch):
        """Stands for test 2: no gradient at all. The method has no stage, and a node's
        train never reaches the local update."""
        node = runtime(**self.config)
        assert node.method.stages() == () and node.method.phases() == ()

        def never(*args, **kwargs):
            raise AssertionError("the item-item method took a gradient step")

        monkeypatch.setattr(node_runtime, "local_update", never)
        result, _ = node.train(node.initial_state(), 1, node.users, None, np.zeros((0, 0)))
        assert result.num_users == len(node.users) and result.loss_sum == 0.0

    def test_replies_carry_no_private_or_personal_parameter(self, tmp_path_factory):
        """Test 5 for a method whose private parameter is the user's history: no reply
        carries a float (the history never travels as itself); the plain upload is the
        user's items, the co-occurrences the server sums (docs/methods/itemitem.md: plain
        aggregation hides no interaction; secure aggregation hides each upload)."""
        users = TINY["synthetic-users"]
        run = self.federation(tmp_path_factory, users, tag="privacy")
        method = self.build(self.run_config())
        allowed = allowed_upload_keys(layout(method).shared_dense)
        prepared = prepare(self.run_config())
        uploaded = {}
        for reply in run.grid.replies:
            assert not reply.has_error()
            for record in reply.content.values():
                if not isinstance(record, ArrayRecord):
                    continue
                arrays = record_arrays(record)
                assert set(arrays) <= allowed
                for name, values in arrays.items():
                    if name != "user-metrics":
                        assert values.dtype.kind in "iu", name
                if "basket-items" in arrays and len(arrays["basket-items"]):
                    user = int(reply.metadata.src_node_id)
                    uploaded[user] = arrays["basket-items"]
        assert len(uploaded) == users  # round 1: every user, once
        holdings = {tuple(np.unique(prepared.train_positives(u))) for u in range(users)}
        assert {tuple(items) for items in uploaded.values()} == holdings

    #: Nodes of the single-node runs (secure aggregation needs more: its min-peers).
    few_nodes: ClassVar[int] = 1

    def test_train_loss_falls(self, tmp_path_factory):
        """Stands for test 7: there is no loss. The model learns from the sums: after round
        1 (every user contributed once) validation HR@10 beats the table of no user (all
        zeros: every item ties), and later rounds, with nobody left to contribute, change
        nothing (no user counts twice)."""
        run = self.federation(tmp_path_factory, self.few_nodes)
        hr = run.metrics()["val-hr@10"]
        assert "train-loss" not in run.metrics()
        assert [int(r["train-users"]) for r in run.rounds] == [TINY["synthetic-users"], 0, 0]
        assert hr[0] > 0 and hr == [hr[0]] * len(hr)

    def test_a_failing_node_does_not_stop_aggregation(self, tmp_path_factory):
        """Test 8: node 1 fails every round; round 1 sums the others' contributions (a
        user contributes in the first round it is selected, so node 1's never arrive)."""
        run = self.federation(tmp_path_factory, 3, tag="flaky", client=node_one_offline)
        users = TINY["synthetic-users"]
        survivors = users - len(range(1, users, 3))
        assert [r["train-failures"] for r in run.rounds] == ["1"] * TINY["num-server-rounds"]
        assert int(run.rounds[0]["train-users"]) == survivors
        assert int(run.rounds[0]["touched-items"]) > 0
        assert float(run.rounds[-1]["val-hr@10"]) > 0


class TestItemItemSecureGfcf(FederationConformance):
    """The federation tests under secure aggregation, with GF-CF's weighted sums."""

    config: ClassVar[dict] = {
        "method": "itemitem",
        "itemitem-model": "gfcf",
        "itemitem-rank": 8,
        "secure-aggregation": True,
        "secure-aggregation-keys": "seeded",
    }
    few_nodes: ClassVar[int] = 3  # secure-aggregation-min-peers = 2 others
    test_train_loss_falls = TestItemItemEase.test_train_loss_falls

    def test_same_seed_same_metrics_whatever_the_number_of_nodes(self, tmp_path_factory):
        """Test 6 over the node counts secure aggregation admits (3 and 4: a node needs
        secure-aggregation-min-peers others): the same run again is identical, and the
        metrics do not depend on how the users are spread over the nodes."""
        three = self.federation(tmp_path_factory, 3)
        again = self.federation(tmp_path_factory, 3, tag="again")
        four = self.federation(tmp_path_factory, 4)
        ignored = set(TIMING_COLUMNS)
        assert [{k: v for k, v in r.items() if k not in ignored} for r in three.rounds] == [
            {k: v for k, v in r.items() if k not in ignored} for r in again.rounds
        ]
        assert all(r["rejected-replies"] == "0" for run in (three, four) for r in run.rounds)
        metrics = three.metrics()
        assert len(metrics) >= 3 and len(three.rounds) == TINY["num-server-rounds"]
        for name, values in metrics.items():
            assert four.metrics()[name] == pytest.approx(values, rel=1e-6, abs=1e-12), name

    def test_replies_carry_no_private_or_personal_parameter(self, tmp_path_factory):
        """Test 5 under secure aggregation: every train reply is one uint64 vector of the
        layout's length, the same for every node whatever its users hold (no index leaks),
        beside its self-mask seed's shares sealed for their holders."""
        users = TINY["synthetic-users"]
        run = self.federation(tmp_path_factory, users, tag="privacy")
        length = StatisticsLayout(TINY["synthetic-items"]).length
        vectors = 0
        for reply in run.grid.replies:
            arrays = record_arrays(reply.content["arrays"])
            if "secure" in arrays:
                assert set(arrays) == {"secure", "secagg-shares"}
                assert arrays["secure"].dtype == np.uint64 and arrays["secure"].shape == (length,)
                vectors += 1
        assert vectors == users * TINY["num-server-rounds"]

    def test_a_failing_node_does_not_stop_aggregation(self, tmp_path_factory):
        """Test 8 under secure aggregation: a node that fails is a dropout; the others
        (each with secure-aggregation-min-peers live neighbours: 4 nodes) remove its masks
        and round 1 sums the survivors' users only (the model learns from them); the run
        goes on."""
        run = self.federation(tmp_path_factory, 4, tag="flaky", client=node_one_offline)
        users = TINY["synthetic-users"]
        survivors = users - len(range(1, users, 4))  # each survivor keeps 2 live neighbours
        assert run.summary["rounds"] == TINY["num-server-rounds"]
        assert [r["train-failures"] for r in run.rounds] == ["1"] * TINY["num-server-rounds"]
        assert int(run.rounds[0]["train-users"]) == survivors
        assert float(run.rounds[-1]["val-hr@10"]) > 0

    def test_secure_metrics_equal_the_plain_ones(self, tmp_path_factory):
        secure = self.federation(tmp_path_factory, 3)
        plain = self.federation(
            tmp_path_factory,
            3,
            tag="plain",
            secure_aggregation=False,
            secure_aggregation_keys="random",
        )
        for name, values in secure.metrics().items():
            assert plain.metrics()[name] == pytest.approx(values, rel=1e-6), name
        assert all(r["bytes-up"] for r in secure.rounds)


def test_a_two_round_secure_run_equals_the_plain_run_over_the_same_support(tmp_path):
    """``itemitem-min-count`` under secure aggregation: round 1 sums the counts, round 2 the
    co-occurrences over the items at least that many users hold (the train message names
    them): the model is the plain run's, whose server restricts the same sums."""
    import csv

    from fedrec_flwr.client_app import app as client_app
    from fedrec_flwr.server_app import run_federation
    from fedrec_lab.local_grid import LocalGrid

    base = {**TINY, "method": "itemitem", "itemitem-min-count": 3, "itemitem-lambda": 5.0}
    runs = {}
    for name, extra in (("plain", {}), ("secure", {"secure-aggregation": True})):
        mapping = {**base, **extra, "results-dir": str(tmp_path / name)}
        grid = LocalGrid(client_app, mapping, num_nodes=3, keep_messages=True)
        run_federation(grid, RunConfig.from_mapping(mapping))
        (folder,) = (tmp_path / name).iterdir()
        with open(folder / "rounds.csv") as f:
            runs[name] = (list(csv.DictReader(f)), grid)
    plain, secure = runs["plain"][0], runs["secure"][0]
    assert float(secure[0]["val-hr@10"]) == 0.0  # round 1: the counts only, no model yet
    for name in ("val-hr@10", "test-hr@10", "test-ndcg@10"):
        assert float(secure[1][name]) == pytest.approx(float(plain[0][name]), rel=1e-6)
    prepared = prepare(RunConfig.from_mapping(base))
    counts = np.bincount(
        np.concatenate([np.unique(prepared.train_positives(u)) for u in range(20)]),
        minlength=prepared.num_items,
    )
    support = np.flatnonzero(counts >= 3)
    sizes = {
        len(record_arrays(reply.content["arrays"])["secure"])
        for reply in runs["secure"][1].replies
        if "secure" in record_arrays(reply.content["arrays"])
    }
    assert sizes == {
        StatisticsLayout(prepared.num_items, gram=False).length,
        StatisticsLayout(len(support)).length,
    }
    named = [
        record_arrays(message.content["arrays"]).get("itemitem-support")
        for message in runs["secure"][1].sent
        if message.metadata.message_type == "train"
    ]
    assert named[0] is None  # round 1's messages: no support yet
    assert np.array_equal(named[-1], support)


def test_two_secure_rounds_need_every_user_in_both():
    with pytest.raises(ConfigError, match="fraction-train"):
        config(**{"itemitem-min-count": 3, "secure-aggregation": True, "fraction-train": 0.5})
