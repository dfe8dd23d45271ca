"""Reference rows: popularity, ItemKNN, EASE, BPR-MF / ALS (implicit) and local-only training,
scored by the methods' evaluation code; checked against direct computations."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import EVAL_NEGATIVES_PER_SPLIT, prepare
from fedrec_flwr.evaluation import metrics_from_ranks
from fedrec_lab import baselines
from fedrec_lab.baselines import (
    central_row,
    ease_scores,
    evaluate_scores,
    itemknn_scorer,
    knn_neighbours,
    local_only_config,
    popularity,
    train_matrix,
)

scipy = pytest.importorskip("scipy")  # the [baselines] extra (and [test]) installs it

TINY = {"dataset": "synthetic", "synthetic_users": 40, "synthetic_items": 300}
TINY["synthetic_mean_degree"] = 10
CLUSTERED = {"dataset": "synthetic", "synthetic_users": 500, "synthetic_items": 1000}
CLUSTERED["synthetic_mean_degree"] = 20


pytestmark = pytest.mark.usefixtures("private_cache")


def test_strict_popularity_matches_a_direct_loop():
    config = RunConfig.from_fields(**TINY)
    prepared = prepare(config)
    counts = np.bincount(prepared.train_items, minlength=prepared.num_items)
    ranks = []
    for user in range(prepared.num_users):
        target = prepared.test_item[user]
        excluded = set(prepared.train_positives(user)) | {prepared.valid_item[user], target}
        competitors = [i for i in range(prepared.num_items) if i not in excluded]
        ranks.append(sum(counts[i] >= counts[target] for i in competitors))
    ranks = np.array(ranks)
    metrics, per_user = popularity(config)
    test = metrics["test"]
    column = per_user.names.index("test-hr@10")
    assert per_user.values[:, column].mean() == pytest.approx(test["hr@10"])
    assert sorted(per_user.users) == list(range(prepared.num_users))
    assert test["hr@10"] == pytest.approx(np.mean(ranks < 10))
    assert test["mrr"] == pytest.approx(np.mean(1 / (ranks + 1)))


def direct_metrics(prepared, scores, protocol, seed=0):
    """Both protocols by hand, one user at a time (ties count against the held-out item);
    under strict also the s100-* metrics (the paper ranking of the same scores)."""
    out = {}
    for split in ("val", "test"):
        ranks = []
        for user in range(prepared.num_users):
            target = (prepared.valid_item if split == "val" else prepared.test_item)[user]
            if protocol == "paper":
                negatives = np.asarray(prepared.eval_negatives(seed)[user])
                k = EVAL_NEGATIVES_PER_SPLIT
                competitors = negatives[:k] if split == "val" else negatives[k:]
            else:
                excluded = set(prepared.train_positives(user).tolist()) | {target}
                if split == "test":
                    excluded.add(prepared.valid_item[user])
                competitors = [i for i in range(prepared.num_items) if i not in excluded]
            ranks.append(int(np.sum(scores[user, competitors] >= scores[user, target])))
        sums = metrics_from_ranks(np.array(ranks), protocol)
        out[split] = {name: value / prepared.num_users for name, value in sums.items()}
    if protocol == "strict":  # and the paper protocol's ranking of the same scores (s100-*)
        sampled = direct_metrics(prepared, scores, "paper", seed)
        for split in out:
            out[split] |= {f"s100-{name}": value for name, value in sampled[split].items()}
    return out


@pytest.mark.parametrize("protocol", ["strict", "paper"])
def test_any_score_matrix_is_scored_as_the_protocol_says(protocol):
    config = RunConfig.from_fields(**TINY, protocol=protocol)
    prepared = prepare(config)
    rng = np.random.default_rng(0)
    # Few distinct values: many ties, which must count against the held-out item.
    scores = rng.integers(0, 5, size=(prepared.num_users, prepared.num_items)).astype(np.float32)
    got = evaluate_scores(config, prepared, lambda users: scores[users])
    expected = direct_metrics(prepared, scores, protocol)
    for split in ("val", "test"):
        assert got[split] == pytest.approx(expected[split], rel=1e-12), split


def test_the_users_scored_at_once_change_no_value(monkeypatch):
    """A node scores its users a few at a time (narrow one-hot vectors); its means and every
    user's values are bit for bit those of scoring the whole node at once."""
    from fedrec_lab.baselines import scoring

    config = RunConfig.from_fields(**TINY)
    prepared = prepare(config)
    scores = ease_scores(train_matrix(prepared), 10.0)
    scores[:, ::3] = 0.0  # ties with the held-out items' scores
    narrow = scoring.evaluate_scores_per_user(config, prepared, lambda users: scores[users])
    monkeypatch.setattr(scoring, "SCORED_AT_ONCE", scoring.USERS_PER_NODE)
    wide = scoring.evaluate_scores_per_user(config, prepared, lambda users: scores[users])
    assert narrow[0] == wide[0]
    assert np.array_equal(narrow[1].users, wide[1].users)
    assert np.array_equal(narrow[1].values, wide[1].values)


def test_strict_never_ranks_a_train_item():
    """Under strict a user's train items are not candidates: scoring them sky-high or
    rock-bottom changes nothing."""
    config = RunConfig.from_fields(**TINY)
    prepared = prepare(config)
    train = train_matrix(prepared)
    scores = ease_scores(train, 10.0)
    is_train = train.toarray() > 0
    base = evaluate_scores(config, prepared, lambda users: scores[users])
    for value in (1e9, -1e9):
        moved = np.where(is_train, value, scores)
        assert evaluate_scores(config, prepared, lambda users, m=moved: m[users]) == base


def test_train_matrix_is_the_binarised_train_rows():
    config = RunConfig.from_fields(**TINY, protocol="paper")
    prepared = prepare(config)
    train = train_matrix(prepared).toarray()
    assert set(np.unique(train)) <= {0.0, 1.0}
    for user in range(prepared.num_users):
        assert set(np.flatnonzero(train[user])) == set(prepared.train_positives(user).tolist())


def test_ease_equals_the_item_side_closed_form():
    prepared = prepare(RunConfig.from_fields(**TINY))
    train = train_matrix(prepared)
    x = train.toarray().astype(np.float64)
    lam = 7.0
    p = np.linalg.inv(x.T @ x + lam * np.eye(x.shape[1]))
    b = np.eye(x.shape[1]) - p / np.diag(p)
    assert np.allclose(np.diag(b), 0.0)
    np.testing.assert_allclose(ease_scores(train, lam), x @ b, rtol=1e-7, atol=1e-9)


def test_ease_takes_the_item_side_when_items_are_fewer():
    """More users than items: the items x items inverse, the same scores as the closed form."""
    rng = np.random.default_rng(0)
    x = (rng.random((40, 12)) < 0.3).astype(np.float64)
    lam = 3.0
    p = np.linalg.inv(x.T @ x + lam * np.eye(12))
    b = np.eye(12) - p / np.diag(p)
    np.testing.assert_allclose(ease_scores(sp.csr_matrix(x), lam), x @ b, rtol=1e-7, atol=1e-9)


def test_itemknn_equals_a_direct_computation():
    prepared = prepare(RunConfig.from_fields(**TINY))
    train = train_matrix(prepared)
    x = train.toarray().astype(np.float64)
    norms = np.linalg.norm(x, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.nan_to_num((x.T @ x) / np.outer(norms, norms))
    np.fill_diagonal(cos, -1.0)
    k = 7
    expected = np.zeros_like(x)
    for j in range(x.shape[1]):
        neighbours = np.argsort(-cos[j], kind="stable")[:k]
        expected[:, j] = x[:, neighbours] @ cos[j, neighbours]
    ids, sims = knn_neighbours(train, 20, block=64)
    users = np.arange(prepared.num_users)
    np.testing.assert_allclose(itemknn_scorer(train, ids, sims, k)(users), expected, rtol=1e-5)


@pytest.fixture
def small_grids(monkeypatch):
    small = {
        "itemknn": {"k": [10, 50, 200]},
        "ease": {"lambda": [10.0, 100.0, 500.0]},
        "bpr": {"learning_rate": [0.01, 0.05], "regularization": [0.01], "iterations": [100]},
        "als": {"regularization": [1.0], "alpha": [1.0, 5.0]},
    }
    for name, grid in small.items():  # the one GRIDS every part of the package reads
        monkeypatch.setitem(baselines.GRIDS, name, grid)


def test_ease_and_itemknn_beat_popularity_on_clustered_data(small_grids):
    config = RunConfig.from_fields(**CLUSTERED)
    prepared = prepare(config)
    floor = central_row("popularity", config, prepared)
    for name in ("itemknn", "ease"):
        row = central_row(name, config, prepared)
        assert row.val["hr@10"] > floor.val["hr@10"] + 0.03, name
        assert row.test["hr@10"] > floor.test["hr@10"] + 0.03, name
        # The chosen cell is the first with the best validation HR@10.
        best = max(cell["val-hr@10"] for cell in row.grid)
        first = next(cell for cell in row.grid if cell["val-hr@10"] == best)
        assert row.chosen == {k: v for k, v in first.items() if k != "val-hr@10"}
        assert row.val["hr@10"] == best


def test_bpr_and_als_from_implicit(small_grids):
    pytest.importorskip("implicit")
    config = RunConfig.from_fields(**CLUSTERED)
    prepared = prepare(config)
    floor = central_row("popularity", config, prepared)
    bpr = central_row("bpr", config, prepared)
    assert bpr.test["hr@10"] > floor.test["hr@10"] + 0.03
    assert central_row("bpr", config, prepared).test == bpr.test  # one thread, seeded
    als = central_row("als", config, prepared)
    assert len(als.grid) == 2 and 0.0 < als.test["hr@10"] <= 1.0


def test_local_only_never_moves_the_global_table(tmp_path):
    """server-lr = 0 with sgd-momentum: every row any node receives is the initial one."""
    from fedrec_flwr.client_app import app as client_app
    from fedrec_flwr.messages import read_rows, record_arrays
    from fedrec_flwr.methods import build_method
    from fedrec_flwr.server_app import initial_item_table, run_federation
    from fedrec_lab.local_grid import LocalGrid

    base = RunConfig.from_fields(**TINY, num_server_rounds=3)
    for method in ("pfedrec", "fedmf"):
        config = local_only_config(base, method, rounds=3).replace(
            results_dir=str(tmp_path / method), batch_size=32
        )
        assert config.server.server_lr == 0.0 and config.server.server_optimizer == "sgd-momentum"
        grid = LocalGrid(client_app, config.to_mapping(), num_nodes=2, keep_messages=True)
        summary = run_federation(grid, config)
        row_dim = build_method(config, 300).row_dim
        initial = initial_item_table(config, 300, row_dim)
        checked = 0
        for message in grid.sent:
            arrays = record_arrays(message.content["arrays"]) if "arrays" in message.content else {}
            if "item-rows" not in arrays:
                continue  # the handshake
            ids, rows = read_rows(arrays)
            np.testing.assert_array_equal(rows, initial if ids is None else initial[ids])
            checked += 1
        assert checked >= 6 and summary["rounds"] == 3


def test_reference_rows_are_written(tmp_path, small_grids):
    config = RunConfig.from_fields(**TINY, protocol="paper")
    prepared = prepare(config)
    rows = baselines.reference_rows(config, ("popularity", "ease"))
    stem = baselines.write(tmp_path, config, prepared, rows, "python -m fedrec_lab.baselines")
    record = json.loads(stem.with_suffix(".json").read_text())
    assert [r["name"] for r in record["rows"]] == ["popularity", "ease"]
    assert record["grids"] == {"ease": {"lambda": [10.0, 100.0, 500.0]}}
    text = stem.with_suffix(".md").read_text()
    assert "EASE (centralized)" in text and "train item of" in text


def test_a_choice_on_the_edge_of_its_grid_is_flagged(small_grids):
    row = baselines.Row("ease", "EASE", {"lambda": 500.0}, {"hr@10": 0.1}, {"hr@10": 0.1}, 0.0)
    assert baselines.on_grid_edge(row) == ["lambda"]
    assert baselines.on_grid_edge(baselines.Row("ease", "EASE", {"lambda": 100.0}, {}, {}, 0)) == []
