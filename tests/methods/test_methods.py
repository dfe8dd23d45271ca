"""The methods: hand-computed local steps, and every method through the conformance suite
(:mod:`conformance`)."""

from typing import ClassVar

import numpy as np
import pytest
import torch

from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.methods import ROWS, build_method
from fedrec_flwr.node.training import RoundSamples, local_update
from fedrec_lab.testing import MethodConformance


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


TABLE = np.array([[1.0, -2.0], [0.5, 0.25]])
Y = np.array([1.0, 0.0])


def one_batch(labels) -> RoundSamples:
    """One user whose samples are rows 0..k-1 (one batch: batch-size >= k)."""
    k = len(labels)
    return RoundSamples(
        users=np.array([0]),
        positions=np.array([0]),
        row_offsets=np.array([0, k]),
        row_items=np.arange(k),
        sample_offsets=np.array([0, k]),
        sample_rows=np.arange(k),
        sample_labels=np.asarray(labels, dtype=np.float32),
    )


def hand_config(method, **changes):
    return RunConfig.from_fields(
        method=method,
        embedding_dim=2,
        lr=0.5,
        item_lr=3.0,
        item_lr_scaling="none",
        batch_size=256,
        local_epochs=1,
        **changes,
    )


def test_pfedrec_score_step_first_then_item_step_with_the_updated_score_function():
    method = build_method(hand_config("pfedrec"), num_items=2)
    w, b = np.array([0.3, -0.1]), 0.2
    params = {
        ROWS: torch.tensor(TABLE, dtype=torch.float32),
        "score-weight": torch.tensor(w[None], dtype=torch.float32),
        "score-bias": torch.tensor([b], dtype=torch.float32),
    }
    loss, n = local_update(method, one_batch(Y), params, method.config, server_round=1)

    # By hand: mean BCE over the 2 samples; dL/dz = (sigmoid(z) - y) / 2.
    z = TABLE @ w + b
    g = (sigmoid(z) - Y) / 2
    w1, b1 = w - 0.5 * (g @ TABLE), b - 0.5 * g.sum()
    g1 = (sigmoid(TABLE @ w1 + b1) - Y) / 2  # recomputed with the UPDATED score function
    table1 = TABLE - 3.0 * np.outer(g1, w1)
    assert params["score-weight"][0].numpy() == pytest.approx(w1, abs=1e-6)
    assert params["score-bias"][0].item() == pytest.approx(b1, abs=1e-6)
    assert params[ROWS].numpy() == pytest.approx(table1, abs=1e-6)
    # The other order (item step with the old score function) would give other rows.
    table_wrong = TABLE - 3.0 * np.outer(g, w)
    assert np.abs(table1 - table_wrong).max() > 1e-2
    # The reported loss is the BCE at the starting point.
    bce = -(Y * np.log(sigmoid(z)) + (1 - Y) * np.log(1 - sigmoid(z)))
    assert n == 2 and loss == pytest.approx(bce.sum(), rel=1e-6)


def test_fedmf_steps_user_and_items_from_the_same_point():
    method = build_method(hand_config("fedmf"), num_items=2)
    p = np.array([0.3, -0.1])
    params = {
        ROWS: torch.tensor(TABLE, dtype=torch.float32),
        "user-embedding": torch.tensor(p[None], dtype=torch.float32),
    }
    local_update(method, one_batch(Y), params, method.config, server_round=1)
    g = (sigmoid(TABLE @ p) - Y) / 2
    assert params["user-embedding"][0].numpy() == pytest.approx(p - 0.5 * (g @ TABLE), abs=1e-6)
    assert params[ROWS].numpy() == pytest.approx(TABLE - 3.0 * np.outer(g, p), abs=1e-6)


def test_fedmf_dual_steps_the_user_first_then_items_with_the_updated_user():
    method = build_method(hand_config("fedmf", personalization="dual"), num_items=2)
    p = np.array([0.3, -0.1])
    params = {
        ROWS: torch.tensor(TABLE, dtype=torch.float32),
        "user-embedding": torch.tensor(p[None], dtype=torch.float32),
    }
    local_update(method, one_batch(Y), params, method.config, server_round=1)
    g = (sigmoid(TABLE @ p) - Y) / 2
    p1 = p - 0.5 * (g @ TABLE)
    g1 = (sigmoid(TABLE @ p1) - Y) / 2
    assert params["user-embedding"][0].numpy() == pytest.approx(p1, abs=1e-6)
    assert params[ROWS].numpy() == pytest.approx(TABLE - 3.0 * np.outer(g1, p1), abs=1e-6)


# ---------------------------------------------------------------- conformance
class TestPFedRec(MethodConformance):
    config: ClassVar = {"method": "pfedrec"}


class TestFedMF(MethodConformance):
    config: ClassVar = {"method": "fedmf"}


class TestFedMFDual(MethodConformance):
    config: ClassVar = {"method": "fedmf", "personalization": "dual"}


class TestFedNCF(MethodConformance):
    config: ClassVar = {"method": "fedncf"}


class TestFedNCFDual(MethodConformance):
    config: ClassVar = {"method": "fedncf", "personalization": "dual"}


# FedRecon draws a fresh user vector every round; with lr 0.1 its fedrecon-epochs do not
# reconstruct it on this tiny data and the train loss rises for several rounds.
class TestFedRecon(MethodConformance):
    config: ClassVar = {"method": "fedrecon", "lr": 1.0}


class TestFedReconDual(MethodConformance):
    config: ClassVar = {"method": "fedrecon", "personalization": "dual", "lr": 1.0}


class TestFedRecGEL(MethodConformance):
    config: ClassVar = {
        "method": "fedrecgel",
        "sam-rho-private": 0.01,
        "sam-rho-shared": 0.01,
        "server-optimizer": "adam",
        "server-lr": 0.01,
    }
    # Adam with server-lr 0.01 moves the shared rows 0.01 a round: the loss needs more
    # rounds to fall than the other methods (it rises at round 2, then falls).
    loss_rounds = 5


class TestPFedRecSAM(MethodConformance):
    config: ClassVar = {"method": "pfedrec", "sam-rho-private": 0.05, "sam-rho-shared": 0.05}


class TestFedMFSAM(MethodConformance):
    config: ClassVar = {"method": "fedmf", "sam-rho-private": 0.05, "sam-rho-shared": 0.05}


class TestPFedRecPerUserHead(MethodConformance):
    config: ClassVar = {"method": "pfedrec", "score-init": "per-user", "init-std": 0.1}


def test_score_init_per_user_draws_each_users_head_by_seed_and_user():
    from fedrec_flwr.methods.heads import linear_head_init

    shared = RunConfig.from_mapping({"method": "pfedrec", "embedding-dim": 8})
    heads = linear_head_init(shared, np.array([3, 7]), 8)
    assert torch.equal(heads["score-weight"][0], heads["score-weight"][1])  # one draw
    config = RunConfig.from_mapping(
        {"method": "pfedrec", "score-init": "per-user", "init-std": 0.5, "embedding-dim": 8}
    )
    both = linear_head_init(config, np.array([3, 7]), 8)
    alone = linear_head_init(config, np.array([7]), 8)
    assert not torch.equal(both["score-weight"][0], both["score-weight"][1])
    assert torch.equal(both["score-weight"][1], alone["score-weight"][0])  # whatever the pack
    assert torch.equal(both["score-bias"], torch.zeros(2))
    spread = float(linear_head_init(config, np.arange(500), 8)["score-weight"].std())
    assert abs(spread - 0.5) < 0.03  # N(0, init-std^2)
    other_seed = RunConfig.from_mapping({**config.to_mapping(), "seed": 1})
    assert not torch.equal(
        linear_head_init(other_seed, np.array([7]), 8)["score-weight"], alone["score-weight"]
    )
    with pytest.raises(ConfigError, match="score-init applies to"):
        RunConfig.from_mapping({"method": "fedmf", "score-init": "per-user"})
