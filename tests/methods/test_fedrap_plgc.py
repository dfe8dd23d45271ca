"""FedRAP and PLGC: the conformance suite (tests/conformance.py, whose tests give row
parameters besides the item rows their own flat tables) for each variant, and focused checks
(proximal step, zero rows on the wire and in the aggregate, the curriculum, PLGC's alpha,
effective rank)."""

from typing import ClassVar

import numpy as np
import pytest
import torch

from fedrec_flwr.aggregation import RowUpload, row_changes
from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.messages import array_record, read_rows, record_arrays, sparse_rows
from fedrec_flwr.methods import ROWS, Role, build_method
from fedrec_flwr.methods.base import Phase
from fedrec_flwr.methods.fedrap import LOCAL, FedRapKeys, fedrap_weights
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.methods.plgc import ALPHA, GLOBAL, decorrelation_loss, ntk_alpha
from fedrec_flwr.node.training import epoch_steps, round_context
from fedrec_flwr.spectrum import effective_rank
from fedrec_lab.testing import (
    TINY,
    MethodConformance,
    random_samples,
    user_params,
)

FEDRAP = {"method": "fedrap", "fedrap-distance": "bounded", "fedrap-v1": 0.5, "fedrap-v2": 0.1}


class TestFedRAP(MethodConformance):
    config: ClassVar = FEDRAP


class TestFedRAPBatchRegularisers(MethodConformance):
    config: ClassVar = {**FEDRAP, "fedrap-reg-rows": "batch", "fedrap-schedule": "constant"}


class TestFedRAPSAM(MethodConformance):
    config: ClassVar = {**FEDRAP, "sam-rho-private": 0.05, "sam-rho-shared": 0.05}


class TestPFedRecPLGC(MethodConformance):
    config: ClassVar = {"method": "pfedrec", "plgc": True, "plgc-decorrelation": 0.1}


class TestPFedRecSAMPLGC(MethodConformance):
    config: ClassVar = {
        "method": "pfedrec",
        "plgc": True,
        "plgc-decorrelation": 0.1,
        "sam-rho-private": 0.05,
        "sam-rho-shared": 0.05,
    }


class TestPFedRecPLGCPersistent(MethodConformance):
    config: ClassVar = {"method": "pfedrec", "plgc": True, "plgc-persist": True}


class TestFedRAPPLGC(MethodConformance):
    config: ClassVar = {**FEDRAP, "plgc": True, "plgc-decorrelation": 0.1}


class TestFedMFDualPLGCFixedAlpha(MethodConformance):
    config: ClassVar = {
        "method": "fedmf",
        "personalization": "dual",
        "plgc": True,
        "plgc-alpha": "0.3",
    }


# --------------------------------------------------------------------- FedRAP
def fedrap(**changes) -> tuple:
    config: ClassVar = RunConfig.from_fields(
        method="fedrap", embedding_dim=4, item_lr=1.0, item_lr_scaling="none", **changes
    )
    return config, build_method(config, num_items=10)


def one_user_samples(items: int, batch_rows: list[int], labels: list[float]):
    """One user holding rows 0..items-1 whose samples are ``batch_rows``."""
    from fedrec_flwr.node.training import RoundSamples

    return RoundSamples(
        users=np.array([0]),
        positions=np.array([0]),
        row_offsets=np.array([0, items]),
        row_items=np.arange(items),
        sample_offsets=np.array([0, len(batch_rows)]),
        sample_rows=np.asarray(batch_rows),
        sample_labels=np.asarray(labels, dtype=np.float32),
    )


def test_the_proximal_step_makes_exact_zeros_and_shrinks_the_rest_by_the_threshold():
    config, method = fedrap(fedrap_v1=0.0, fedrap_v2=0.4, fedrap_schedule="constant")
    samples = one_user_samples(3, [0, 1], [1.0, 0.0])  # 2 samples: weight 1/2 per held row
    context = round_context(samples, config, 5, torch.device("cpu"))
    params = {
        ROWS: torch.tensor([[0.1, -0.15, 0.2, 0.0], [1.0, -1.0, 0.3, -0.2], [0.05] * 4]),
        LOCAL: torch.zeros(3, 4),
    }
    method.begin_local_update(params, context)
    step = epoch_steps(samples, config, 5, 0, torch.device("cpu"))[0]
    method.after_step(params, step, Phase("joint", (ROWS,)), context)
    threshold = 1.0 * 0.4 * 0.5  # item-lr x mu x weight (held: 1 / samples)
    assert torch.equal(params[ROWS][0], torch.zeros(4))  # every |value| <= 0.2: exact zeros
    assert torch.equal(params[ROWS][2], torch.zeros(4))  # a held row outside the batch too
    expected = torch.tensor([1.0 - threshold, -1.0 + threshold, 0.3 - threshold, 0.0])
    torch.testing.assert_close(params[ROWS][1], expected)


def test_plain_sgd_on_the_l1_term_would_not_reach_zero():
    """Why a proximal step: a subgradient step overshoots zero and oscillates around it."""
    x, step = 0.15, 0.2
    for _ in range(10):
        x -= step * np.sign(x)
    assert x != 0.0


def test_the_distance_term_pushes_d_and_c_apart_and_its_bounded_form_saturates():
    for distance, far_moves in (("squared", True), ("bounded", False)):
        config, method = fedrap(
            fedrap_v1=0.5, fedrap_v2=0.0, fedrap_schedule="constant", fedrap_distance=distance
        )
        samples = one_user_samples(2, [0, 1], [1.0, 0.0])
        context = round_context(samples, config, 1, torch.device("cpu"))
        near, far = [0.1, 0.0, 0.0, 0.0], [10.0, 0.0, 0.0, 0.0]
        params = {ROWS: torch.zeros(2, 4), LOCAL: torch.tensor([near, far])}
        method.begin_local_update(params, context)
        step = epoch_steps(samples, config, 1, 0, torch.device("cpu"))[0]
        method.after_step(params, step, Phase("joint", (ROWS, LOCAL)), context)
        assert params[LOCAL][0, 0] > 0.1 and params[ROWS][0, 0] < 0  # apart
        assert (params[LOCAL][1, 0] > 10.0) == far_moves  # the bounded push has vanished


def test_the_curriculum_ramps_with_tanh_of_the_round_and_constant_is_constant():
    config: ClassVar = RunConfig.from_fields(method="fedrap", fedrap_v1=0.2, fedrap_v2=0.05)
    assert fedrap_weights(config.group(FedRapKeys), 1) == (0.0, 0.0)  # a = 0: fully personalised
    lam, mu = fedrap_weights(config.group(FedRapKeys), 11)
    assert lam == pytest.approx(np.tanh(1.0) * 0.2) and mu == pytest.approx(np.tanh(1.0) * 0.05)
    assert fedrap_weights(config.group(FedRapKeys), 101)[0] == pytest.approx(0.2, rel=1e-8)
    constant = config.replace(fedrap_schedule="constant")
    keys = constant.group(FedRapKeys)
    assert fedrap_weights(keys, 1) == fedrap_weights(keys, 50) == (0.2, 0.05)


def test_d_is_private_rows_and_never_leaves_the_device():
    _, method = fedrap()
    assert method.roles()[LOCAL] is Role.PRIVATE_ROWS
    assert LOCAL not in layout(method).kept_private and layout(method).private_rows == (LOCAL,)


# ------------------------------------------------------------ zero rows, wire
def test_zero_rows_travel_as_ids_only_and_come_back_as_zeros():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(50, 32)).astype(np.float32)
    zero = [3, 10, 11, 12, 20, 21, 30, 40, 41, 49]
    table[zero] = 0.0
    dense = array_record(**sparse_rows(None, table, None))
    sparse = array_record(**sparse_rows(None, table, 0.0))
    wire = record_arrays(sparse)
    assert len(wire["item-rows"]) == 40 and wire["zero-ids"].tolist() == zero
    assert sparse.count_bytes() < dense.count_bytes() - 10 * 32 * 4 + 8 * 10 + 300  # headers
    ids, rows = read_rows(wire)
    assert ids is None and np.array_equal(rows, table)  # the full table, zeros included
    requested = np.array([1, 3, 11, 20, 22])
    request = record_arrays(array_record(**sparse_rows(requested, table[requested], 0.0)))
    assert request["item-ids"].tolist() == [1, 22]
    ids, rows = read_rows(request)
    assert np.array_equal(ids, requested) and np.array_equal(rows, table[requested])
    # No zero row: the dense encoding, unchanged.
    assert set(record_arrays(array_record(**sparse_rows(None, table + 1, 0.0)))) == {"item-rows"}


@pytest.mark.parametrize("rule", ["round-mean", "toucher-mean"])
def test_a_row_a_user_zeroed_still_moves_the_global_row(rule):
    table = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=np.float32)
    zeroed = RowUpload(  # user A trained rows 0 and 2; its row 2 came out exactly zero
        item_ids=np.array([0]),
        row_sums=np.array([[2.0, 2.0]]),
        row_counts=np.array([1]),
        num_users=1,
        zero_ids=np.array([2]),
        zero_counts=np.array([1]),
    )
    dense = RowUpload(  # the same upload with the zero row sent as values
        item_ids=np.array([0, 2]),
        row_sums=np.array([[2.0, 2.0], [0.0, 0.0]]),
        row_counts=np.array([1, 1]),
        num_users=1,
    )
    other = RowUpload(  # user B trained row 2 to (7, 8)
        item_ids=np.array([2]),
        row_sums=np.array([[7.0, 8.0]]),
        row_counts=np.array([1]),
        num_users=1,
    )
    touched, delta = row_changes(table, [zeroed, other], rule)
    expected_touched, expected = row_changes(table, [dense, other], rule)
    assert np.array_equal(touched, expected_touched) and np.array_equal(delta, expected)
    users = 2 if rule == "round-mean" else np.array([[1], [2]])
    assert np.allclose(
        delta,
        (
            np.array([[2.0, 2.0], [7.0 + 0.0, 8.0 + 0.0]])
            - np.array([[1.0, 2.0], [2 * 5.0, 2 * 6.0]])
        )
        / users,
    )


def test_fedrap_runs_send_fewer_bytes_as_c_gets_sparse(tmp_path, monkeypatch):
    from fedrec_flwr.client_app import app as client_app
    from fedrec_flwr.results import RunRecorder
    from fedrec_flwr.server_app import run_federation
    from fedrec_lab.local_grid import LocalGrid

    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(RunRecorder, "plot", lambda self: None)
    figures = {}
    for mu in (0.0, 50.0):
        rc = {
            **TINY,
            **FEDRAP,
            "num-server-rounds": 4,
            "item-lr": 0.2,
            "fedrap-v2": mu,
            "fedrap-schedule": "constant",
            "fedrap-zero-threshold": 1e-3,
            "aggregation": "toucher-mean",
            "results-dir": str(tmp_path / f"mu{mu}"),
        }
        summary = run_federation(LocalGrid(client_app, rc, num_nodes=2), RunConfig.from_mapping(rc))
        (run_dir,) = (tmp_path / f"mu{mu}").iterdir()
        rounds = (run_dir / "rounds.csv").read_text().splitlines()
        header = rounds[0].split(",")
        density = [float(r.split(",")[header.index("c-density")]) for r in rounds[1:]]
        figures[mu] = (summary["bytes_down"], summary["bytes_up"], density)
    assert figures[0.0][2] == [1.0] * 4
    assert figures[50.0][2][-1] < 0.5  # most of C is exactly zero
    assert figures[50.0][0] < figures[0.0][0] and figures[50.0][1] < figures[0.0][1]


# ----------------------------------------------------------------------- PLGC
def test_plgc_is_refused_on_a_method_without_personal_rows():
    with pytest.raises(ConfigError, match="plgc = true needs a method with personal item rows"):
        RunConfig.from_mapping({"method": "fedmf", "plgc": True})
    RunConfig.from_mapping({"method": "fedmf", "personalization": "dual", "plgc": True})


def test_plgc_alpha_is_in_0_1_and_a_fixed_alpha_is_honoured():
    rng = np.random.default_rng(4)
    for alpha, expected in (("ntk", None), ("0.3", 0.3), ("1.0", 1.0)):
        config = RunConfig.from_fields(
            method="pfedrec", plgc=True, plgc_alpha=alpha, embedding_dim=4, batch_size=8
        )
        method = build_method(config, num_items=30)
        samples = random_samples(rng, num_users=5, batch=8)
        params = user_params(method, samples.users, rng)
        params[ROWS] = torch.from_numpy(
            rng.normal(size=(samples.row_offsets[-1], 4)).astype(np.float32)
        )
        params[GLOBAL] = params[ROWS] + torch.randn_like(params[ROWS])  # the views differ
        context = round_context(samples, config, 2, torch.device("cpu"))
        method.begin_local_update(params, context)
        if expected is None:
            params[ALPHA].fill_(-1.0)  # the NTK alpha is set after the round's training
        method.end_local_update(params, context)
        values = params[ALPHA]
        assert bool(((values >= 0) & (values <= 1)).all())
        if expected is None:
            assert len(set(values.tolist())) > 1  # per user
        else:
            assert torch.equal(values, torch.full_like(values, expected))


def test_ntk_alpha_leans_on_the_view_that_separates_the_users_labels():
    rng = np.random.default_rng(5)
    labels = torch.tensor([1.0] * 10 + [0.0] * 40)
    informative = torch.randn(50, 8, generator=torch.Generator().manual_seed(0)) * 0.1
    informative[:, 0] += 3 * labels
    noise = torch.from_numpy(rng.normal(size=(50, 8)).astype(np.float32))
    assert ntk_alpha(informative, noise, labels) > 0.8
    assert ntk_alpha(noise, informative, labels) < 0.2
    assert ntk_alpha(noise, noise, labels) == pytest.approx(0.5)


def test_the_decorrelation_loss_is_zero_for_identical_whitened_views_and_grows_with_collapse():
    rng = np.random.default_rng(6)
    white = np.linalg.qr(rng.normal(size=(64, 8)))[0] * 8.0  # orthogonal columns
    white -= white.mean(0)
    views = torch.from_numpy(white.astype(np.float32)).unsqueeze(0)
    mask = torch.ones(1, 64)
    aligned = decorrelation_loss(views, views, mask)
    collapsed = views[..., :1].expand(-1, -1, 8)  # every feature the same direction
    assert float(aligned) < 0.05
    assert float(decorrelation_loss(collapsed, views, mask)) > 1.0


def test_effective_rank_of_rank_one_is_one_and_of_the_identity_is_its_size():
    rng = np.random.default_rng(7)
    rank_one = np.outer(rng.normal(size=20), rng.normal(size=6))
    assert effective_rank(rank_one) == pytest.approx(1.0, abs=1e-6)
    assert effective_rank(np.eye(7)) == pytest.approx(7.0)
    assert effective_rank(np.zeros((3, 3))) == 0.0


class TestFedRAPPerUserHead(MethodConformance):
    config: ClassVar = {"method": "fedrap", "score-init": "per-user", "init-std": 0.1}
