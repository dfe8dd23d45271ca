"""``per-user.csv``: each user's metrics at the best validation round, whose column means are
``summary.json``'s metrics, the same whatever the number of nodes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import EVAL_NEGATIVES_PER_SPLIT, prepare
from fedrec_flwr.evaluation import (
    SAMPLED_METRICS,
    metric_names,
    metrics_from_ranks,
    per_user_metrics,
    reported_metrics,
)
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.server.validation import ReplyError, ReplySchema, check_eval_reply
from fedrec_flwr.server_app import run_federation
from fedrec_lab.local_grid import LocalGrid
from fedrec_lab.stats import read_per_user

SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 30,
    "synthetic-items": 400,
    "synthetic-mean-degree": 12,
    "num-server-rounds": 6,
    "batch-size": 32,
    "item-lr": 0.5,
    "run-name": "run",
}

pytestmark = pytest.mark.usefixtures("private_cache")


def run(folder: Path, nodes: int, **overrides) -> tuple[dict, Path]:
    run_config = {**SMALL, "results-dir": str(folder), **overrides}
    summary = run_federation(
        LocalGrid(client_app, run_config, num_nodes=nodes), RunConfig.from_mapping(run_config)
    )
    return summary, folder / "run"


@pytest.mark.parametrize("protocol", ["strict", "paper"])
def test_per_user_csv_holds_the_best_rounds_users_whatever_the_packing(tmp_path, protocol):
    summary, run_dir = run(tmp_path / "one", 1, protocol=protocol)
    users, columns = read_per_user(run_dir)
    names = reported_metrics(protocol)
    assert (
        set(SAMPLED_METRICS) <= set(names)
        if protocol == "strict"
        else names == ("hr@10", "ndcg@10")
    )
    header = (run_dir / "per-user.csv").read_text().splitlines()[0]
    assert header == ",".join(["user", *(f"{s}-{m}" for s in ("val", "test") for m in names)])
    assert users.tolist() == list(range(30))  # every user, sorted (the last round: all)
    for split in ("val", "test"):
        for name in names:
            values = columns[f"{split}-{name}"]
            assert np.all((values >= 0) & (values <= 1))
            assert values.mean() == pytest.approx(summary[split][name], abs=1e-9, rel=0)
    if protocol == "strict":  # 99 sampled competitors, all among the full ranking's: per user,
        for split in ("val", "test"):  # the sampled rank is never worse
            for name in ("hr@10", "ndcg@10"):
                full, sampled = columns[f"{split}-{name}"], columns[f"{split}-s100-{name}"]
                assert np.all(sampled >= full), (split, name)
            assert columns[f"{split}-s100-hr@10"].mean() > columns[f"{split}-hr@10"].mean()
        rounds = (run_dir / "rounds.csv").read_text().splitlines()[0].split(",")
        assert {f"{s}-{m}" for s in ("val", "test") for m in SAMPLED_METRICS} <= set(rounds)
    assert json.loads((run_dir / "summary.json").read_text())["best_round"] >= 1
    # packing invariance: 3 nodes write the same file, byte for byte
    _, three = run(tmp_path / "three", 3, protocol=protocol)
    assert (three / "per-user.csv").read_bytes() == (run_dir / "per-user.csv").read_bytes()


def test_per_user_csv_of_a_best_round_evaluated_on_a_sample(tmp_path):
    """eval-users: rounds before the last evaluate a sample; the file holds the best round's
    evaluated users only, and its means are still the summary's."""
    summary, run_dir = run(tmp_path / "r", 2, **{"eval-users": 10, "num-server-rounds": 4})
    users, columns = read_per_user(run_dir)
    rounds = (run_dir / "rounds.csv").read_text().splitlines()
    header = rounds[0].split(",")
    best = rounds[summary["best_round"]].split(",")
    assert len(users) == int(best[header.index("eval-users")])
    assert np.all(np.diff(users) > 0)
    for name in reported_metrics("strict"):
        assert columns[f"test-{name}"].mean() == pytest.approx(summary["test"][name], abs=1e-9)


def test_per_user_metrics_sum_to_metrics_from_ranks():
    ranks = np.array([0, 3, 9, 10, 19, 20, 57, 0])
    for protocol in ("strict", "paper"):
        values = per_user_metrics(ranks, protocol)
        assert values.shape == (len(ranks), len(metric_names(protocol)))
        sums = metrics_from_ranks(ranks, protocol)
        for j, name in enumerate(metric_names(protocol)):
            assert values[:, j].sum() == pytest.approx(sums[name], abs=1e-12)
    assert per_user_metrics(np.array([], dtype=np.int64), "strict").shape == (0, 5)


def test_sampled_100_metrics_rank_the_same_scores_among_the_paper_negatives():
    """The strict evaluation's ``s100-*`` columns are the paper protocol's ranking of the
    method's own score row among the split's 99 negatives, built here by hand (ties count
    against the held-out item, a NaN competitor beats it)."""
    config = RunConfig.from_mapping({**SMALL, "method": "fedmf", "embedding-dim": 4})
    prepared = prepare(config)
    runtime = NodeRuntime(config, prepared, 0, 1)
    state = runtime.initial_state()
    rng = np.random.default_rng(3)
    # Few distinct rows: many exact ties between the held-out item and its competitors.
    table = rng.normal(size=(40, 4)).astype(np.float32)[np.arange(prepared.num_items) % 40]
    table[prepared.eval_negatives(0)[0, 7]] = np.nan  # user 0 has a NaN validation competitor
    sums, users, values = runtime.evaluate_users(state, None, table)
    positions = runtime.positions_of(users)
    params = runtime._eval_params(state, positions, {})
    scores = runtime.method.logits_all(params, torch.from_numpy(table)).numpy()
    names = [f"{s}-{m}" for s in ("val", "test") for m in reported_metrics("strict")]
    k = EVAL_NEGATIVES_PER_SPLIT
    ties = 0
    for j, user in enumerate(users):
        negatives = np.asarray(prepared.eval_negatives(0)[user], np.int64)
        for split, held, competitors in (
            ("val", prepared.valid_item[user], negatives[:k]),
            ("test", prepared.test_item[user], negatives[k:]),
        ):
            target, others = scores[j, held], scores[j, competitors]
            ties += int(np.sum(others == target))
            rank = int(np.sum((others >= target) | np.isnan(others)))
            hr, ndcg = float(rank < 10), (1 / np.log2(rank + 2) if rank < 10 else 0.0)
            assert values[j, names.index(f"{split}-s100-hr@10")] == hr, (user, split)
            assert values[j, names.index(f"{split}-s100-ndcg@10")] == pytest.approx(ndcg, abs=1e-15)
    assert ties > 0  # the tie rule was exercised
    hits = values[:, names.index("test-s100-hr@10")]
    assert 0 < hits.mean() < 1 and 0 < sums["val-s100-hr@10"] < len(users)
    for i, name in enumerate(names):
        assert sums[name] == pytest.approx(values[:, i].sum(), abs=1e-12)


# ------------------------------------------------------------- reply checks
NAMES = ["val-hr@10", "val-ndcg@10", "test-hr@10", "test-ndcg@10"]
NODE_USERS = np.array([1, 4, 7, 10, 13], dtype=np.int64)  # partition 1 of 3


def eval_reply(values: np.ndarray, ids: np.ndarray):
    metrics = {"num-users": len(ids), **dict(zip(NAMES, values.sum(axis=0).tolist(), strict=True))}
    return {}, metrics, {"user-ids": ids, "user-metrics": values}


def valid_reply():
    rng = np.random.default_rng(0)
    values = rng.random((3, 4))
    values[:, [0, 2]] = np.round(values[:, [0, 2]])  # HR: 0 or 1
    return eval_reply(values, np.array([13, 1, 7], dtype=np.int64))


def check(arrays, metrics, per_user, node_users=NODE_USERS):
    check_eval_reply(arrays, metrics, ReplySchema(30, 4, {}), NAMES, node_users, per_user)


def test_a_valid_per_user_record_passes():
    check(*valid_reply())
    check(*valid_reply(), node_users=5)  # the number only: ids not checked against it
    check(*eval_reply(np.empty((0, 4)), np.empty(0, dtype=np.int64)))


def _corrupt(kind: str):
    arrays, metrics, per_user = valid_reply()
    ids, values = per_user["user-ids"].copy(), per_user["user-metrics"].copy()
    if kind == "duplicate":
        ids[1] = ids[0]
    elif kind == "foreign":
        ids[0] = 2  # partition 2's user
    elif kind == "count":
        ids, values = ids[:2], values[:2]
    elif kind == "shape":
        values = values[:, :3]
    elif kind == "dtype":
        ids = ids.astype(np.int32)
    elif kind == "nan":
        values[0, 1] = np.nan
    elif kind == "range":
        metrics["val-ndcg@10"] += -0.2 - values[0, 1]  # the sums still agree
        values[0, 1] = -0.2
    elif kind == "sum":
        metrics["test-ndcg@10"] -= 0.01
    elif kind == "missing":
        return arrays, metrics, {"user-ids": ids}
    return arrays, metrics, {"user-ids": ids, "user-metrics": values}


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("duplicate", "duplicated users"),
        ("foreign", "users the node does not hold"),
        ("count", "num-users=3"),
        ("shape", "shape"),
        ("dtype", "dtype int32"),
        ("nan", "NaN or inf"),
        ("range", r"outside \[0, 1\]"),
        ("sum", "not the sum of its per-user values"),
        ("missing", "missing arrays"),
    ],
)
def test_each_per_user_corruption_is_rejected(kind, message):
    with pytest.raises(ReplyError, match=message):
        check(*_corrupt(kind))
