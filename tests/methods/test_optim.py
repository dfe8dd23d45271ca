"""Local optimisers (SGD, SAM), the server optimiser and the config checks of both."""

import numpy as np
import pytest
import torch

from fedrec_flwr.aggregation import RowUpload, aggregate_rows, row_changes
from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.methods import ROWS, Step, build_method
from fedrec_flwr.node.optim import NORM_EPS, SAM, SGD, local_optimizer
from fedrec_flwr.node.training import _gradient_fn, epoch_steps
from fedrec_flwr.server.optimizer import BETA2, EPS, ServerOptimizer
from fedrec_lab.testing import random_samples, user_params


# ------------------------------------------------------------------- local SAM
def a_step(method, seed=0):
    """Parameters of 4 users and the first step of their epoch."""
    rng = np.random.default_rng(seed)
    config = method.config
    samples = random_samples(rng, num_users=4, batch=config.training.batch_size)
    params = user_params(method, samples.users, rng)
    params[ROWS] = torch.from_numpy(
        rng.normal(size=(samples.row_offsets[-1], method.row_dim)).astype(np.float32)
    )
    step = epoch_steps(samples, config, 1, 0, torch.device("cpu"))[0]
    return params, step


def one_phase(method, optimizer, params, step):
    """Every phase of the method's first stage, in order, with ``optimizer``."""
    params = {n: p.clone() for n, p in params.items()}
    for phase in method.stages()[0].phases:
        optimizer.step(params, step, _gradient_fn(method, params, step, phase))
    return params


def small_config(method, **changes):
    return RunConfig.from_fields(
        method=method,
        embedding_dim=4,
        ncf_mlp_dim=8,
        ncf_layers="8,4",
        batch_size=16,
        item_lr=2.0,
        item_lr_scaling="none",
        **changes,
    )


@pytest.mark.parametrize("name", ["pfedrec", "fedmf", "fedncf"])
def test_sam_with_both_radii_zero_is_sgd_exactly_and_a_radius_changes_the_step(name):
    method = build_method(small_config(name), num_items=50)
    params, step = a_step(method)
    roles = method.roles()

    def sgd():
        return SGD({n: method.learning_rate(n) for n in roles})

    plain = one_phase(method, sgd(), params, step)
    zero = one_phase(method, SAM(sgd(), roles, 0.0, 0.0), params, step)
    assert isinstance(local_optimizer(method, method.config), SGD)
    for n in plain:
        assert torch.equal(plain[n], zero[n]), n
        assert not torch.equal(plain[n], params[n]), n  # the step moved every parameter
    for rho_private, rho_shared in ((0.05, 0.0), (0.0, 0.05)):
        sam = one_phase(method, SAM(sgd(), roles, rho_private, rho_shared), params, step)
        assert any(not torch.equal(plain[n], sam[n]) for n in plain), (rho_private, rho_shared)
    assert isinstance(local_optimizer(method, method.config.replace(sam_rho_shared=0.05)), SAM)


def test_sam_applies_the_gradient_at_the_perturbed_point_to_the_unperturbed_parameters():
    roles = build_method(small_config("fedmf"), num_items=4).roles()
    step = Step(
        users=torch.tensor([0]),
        rows=torch.tensor([[0, 1]]),
        labels=torch.tensor([[1.0, 0.0]]),
        weights=torch.tensor([[0.5, 0.5]]),
    )
    params = {ROWS: torch.zeros(2, 2), "user-embedding": torch.tensor([[3.0, 4.0]])}
    seen = []

    def gradients(offsets):
        seen.append(offsets)
        if offsets is None:  # base gradient
            return {"user-embedding": torch.tensor([[3.0, 4.0]])}, torch.zeros(1, 2)
        return {"user-embedding": torch.tensor([[1.0, -1.0]])}, torch.zeros(1, 2)

    sam = SAM(SGD({"user-embedding": 0.5, ROWS: 1.0}), roles, 0.5, 0.0)
    sam.step(params, step, gradients)
    assert seen[0] is None
    # rho * g / ||g|| = 0.5 * (3, 4) / 5
    assert seen[1]["user-embedding"] == pytest.approx(torch.tensor([[0.3, 0.4]]))
    assert params["user-embedding"].tolist() == [[3.0 - 0.5, 4.0 + 0.5]]


def test_sam_perturbation_has_norm_rho_per_user_and_group():
    """Distinct rows count once (a repeated row's entries are summed), padding not at all."""
    roles = build_method(small_config("fedmf"), num_items=4).roles()
    # User 0 trains rows 0, 1, 0 (row 0 twice) + padding; user 1 rows 2, 3, 3 + padding.
    # Padding points at row 0, as epoch_steps pads: for user 1 it is another user's row.
    step = Step(
        users=torch.tensor([0, 1]),
        rows=torch.tensor([[0, 1, 0, 0], [2, 3, 3, 0]]),
        labels=torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]]),
        weights=torch.tensor([[1 / 3, 1 / 3, 1 / 3, 0.0], [1 / 3, 1 / 3, 1 / 3, 0.0]]),
    )
    rng = np.random.default_rng(4)
    g_rows = rng.normal(size=(2, 4, 3))  # padding entries get a gradient: it must be ignored
    g_user = rng.normal(size=(2, 3))
    grads = {
        ROWS: torch.tensor(g_rows, dtype=torch.float32),
        "user-embedding": torch.tensor(g_user, dtype=torch.float32),
    }
    rho_private, rho_shared = 0.3, 0.7
    offsets = SAM(SGD({}), roles, rho_private, rho_shared).perturbation(step, grads)

    # By hand: each user's distinct rows and their summed gradients.
    distinct = {
        0: [g_rows[0, 0] + g_rows[0, 2], g_rows[0, 1]],
        1: [g_rows[1, 0], g_rows[1, 1] + g_rows[1, 2]],
    }
    expected = np.zeros_like(g_rows)
    for user, (first, second) in distinct.items():
        scale = rho_shared / (np.sqrt(sum((g**2).sum() for g in (first, second))) + NORM_EPS)
        slots = ([0, 2], [1]) if user == 0 else ([0], [1, 2])
        expected[user, slots[0]] = first * scale
        expected[user, slots[1]] = second * scale
    got = offsets[ROWS].numpy()
    assert got == pytest.approx(expected, rel=1e-5, abs=1e-7)
    assert (got[:, 3] == 0).all()  # padding is not perturbed
    assert np.array_equal(got[0, 0], got[0, 2]) and np.array_equal(got[1, 1], got[1, 2])
    for user, first_slots in ((0, [0, 1]), (1, [0, 1])):  # one entry per distinct row
        norm = np.sqrt((got[user, first_slots] ** 2).sum())
        assert norm == pytest.approx(rho_shared, rel=1e-5)
    private = offsets["user-embedding"].numpy()
    assert np.linalg.norm(private, axis=1) == pytest.approx([rho_private] * 2, rel=1e-5)
    assert private == pytest.approx(
        rho_private * g_user / np.linalg.norm(g_user, axis=1, keepdims=True), rel=1e-5
    )
    # A group with radius 0 is not perturbed.
    only_shared = SAM(SGD({}), roles, 0.0, rho_shared).perturbation(step, grads)
    assert set(only_shared) == {ROWS}


def test_sam_shared_group_takes_rows_and_shared_dense_together_per_user():
    method = build_method(small_config("fedncf"), num_items=4)
    roles = method.roles()
    step = Step(
        users=torch.tensor([0, 1]),
        rows=torch.tensor([[0, 1], [2, 0]]),
        labels=torch.tensor([[1.0, 0.0], [1.0, 0.0]]),
        weights=torch.tensor([[0.5, 0.5], [1.0, 0.0]]),
    )
    rng = np.random.default_rng(5)
    grads = {
        ROWS: torch.tensor(rng.normal(size=(2, 2, method.row_dim)), dtype=torch.float32),
        "out-bias": torch.tensor(rng.normal(size=(2, 1)), dtype=torch.float32),
        "mlp-1-weight": torch.tensor(rng.normal(size=(2, 8, 4)), dtype=torch.float32),
        "user-gmf": torch.tensor(rng.normal(size=(2, 4)), dtype=torch.float32),
    }
    offsets = SAM(SGD({}), roles, 0.2, 0.5).perturbation(step, grads)
    for user, entries in ((0, [0, 1]), (1, [0])):
        shared = (
            (offsets[ROWS][user, entries] ** 2).sum()
            + (offsets["out-bias"][user] ** 2).sum()
            + (offsets["mlp-1-weight"][user] ** 2).sum()
        )
        assert shared.sqrt().item() == pytest.approx(0.5, rel=1e-5)
        assert offsets["user-gmf"][user].norm().item() == pytest.approx(0.2, rel=1e-5)
    assert (offsets[ROWS][1, 1] == 0).all()  # padding


# ------------------------------------------------------------ server optimiser
def random_uploads(rng, num_items, dim, nodes=3):
    uploads = []
    for _ in range(nodes):
        ids = np.sort(rng.choice(num_items, size=rng.integers(1, num_items), replace=False))
        users = int(rng.integers(1, 4))
        counts = rng.integers(1, users + 1, len(ids))
        sums = rng.normal(size=(len(ids), dim)) * counts[:, None]
        uploads.append(RowUpload(ids, sums, counts, users))
    return uploads


@pytest.mark.parametrize("rule", ["round-mean", "toucher-mean"])
def test_server_optimizer_none_reproduces_aggregate_rows_exactly(rule):
    rng = np.random.default_rng(6)
    table = rng.normal(size=(12, 3)).astype(np.float32)
    optimizer = ServerOptimizer("none", 1.0, 0.9)
    for _ in range(2):
        uploads = random_uploads(rng, 12, 3)
        expected = aggregate_rows(table, uploads, rule)
        got = optimizer.update_rows(table, *row_changes(table, uploads, rule))
        assert got.dtype == table.dtype and np.array_equal(got, expected)
        table = got
    value = rng.normal(size=(2, 3)).astype(np.float32)
    delta = rng.normal(size=(2, 3))
    dense = optimizer.update_dense("w", value, delta)
    assert np.array_equal(dense, (value.astype(np.float64) + delta).astype(np.float32))


def test_unknown_server_optimizer_is_rejected():
    with pytest.raises(ValueError, match="unknown server optimizer 'adamw'"):
        ServerOptimizer("adamw", 1.0, 0.9)


TABLE = np.array([[1.0, 2.0], [-1.0, 0.5], [0.0, 3.0], [4.0, 4.0]], dtype=np.float32)
# (touched rows, their change) per round: row 1 in both rounds, rows 0 and 2 in one each,
# row 3 never; round 3 touches row 0 again, after it sat out round 2.
ROUNDS = [
    (np.array([0, 1]), np.array([[0.2, -0.4], [1.0, 0.1]])),
    (np.array([1, 2]), np.array([[-0.3, 0.6], [0.5, -0.5]])),
    (np.array([0]), np.array([[0.1, 0.1]])),
]


def sgd_momentum_by_hand(lr, mu):
    x = TABLE.astype(np.float64)
    m = np.zeros_like(x)
    history = []
    for touched, delta in ROUNDS:
        for row, d in zip(touched, delta, strict=True):
            m[row] = mu * m[row] + (-d)
            x[row] = np.float32(x[row] - lr * m[row])
        history.append(x.astype(np.float32))
    return history


def adam_by_hand(lr, beta1):
    x = TABLE.astype(np.float64)
    m, v = np.zeros_like(x), np.zeros_like(x)
    t = np.zeros(len(x), dtype=int)
    history = []
    for touched, delta in ROUNDS:
        for row, d in zip(touched, delta, strict=True):
            g = -d
            t[row] += 1  # per-row step count: a row's bias correction counts its own updates
            m[row] = beta1 * m[row] + (1 - beta1) * g
            v[row] = BETA2 * v[row] + (1 - BETA2) * g**2
            m_hat = m[row] / (1 - beta1 ** t[row])
            v_hat = v[row] / (1 - BETA2 ** t[row])
            x[row] = np.float32(x[row] - lr * m_hat / (np.sqrt(v_hat) + EPS))
        history.append(x.astype(np.float32))
    return history


@pytest.mark.parametrize(
    ("rule", "by_hand"),
    [("sgd-momentum", sgd_momentum_by_hand), ("adam", adam_by_hand)],
)
def test_server_optimizer_rows_match_a_hand_computation_lazily(rule, by_hand):
    lr, momentum = 0.5, 0.8
    optimizer = ServerOptimizer(rule, lr, momentum)
    expected = by_hand(lr, momentum)
    table = TABLE
    states = []
    for r, (touched, delta) in enumerate(ROUNDS):
        new = optimizer.update_rows(table, touched, delta)
        untouched = np.setdiff1d(np.arange(len(TABLE)), touched)
        assert np.array_equal(new[untouched], table[untouched])  # value kept
        assert new == pytest.approx(expected[r], rel=1e-6, abs=1e-7), f"round {r + 1}"
        states.append({k: v.copy() for k, v in optimizer.state_arrays().items()})
        table = new
    assert np.array_equal(table[3], TABLE[3])
    # Row 0 sat out round 2: its state was neither decayed nor counted as a step.
    for key in states[0]:
        assert np.array_equal(states[1][key][0], states[0][key][0]), key
    if rule == "adam":
        assert states[2]["rows/t"].tolist() == [2, 2, 1, 0]


@pytest.mark.parametrize("rule", ["sgd-momentum", "adam"])
def test_server_optimizer_dense_matches_a_hand_computation(rule):
    lr, mu = 0.1, 0.9
    value = np.array([[0.5, -0.2, 0.1], [1.0, 0.0, -1.0]], dtype=np.float32)
    deltas = [
        np.array([[0.1, 0.2, -0.3], [0.0, 0.4, 0.05]]),
        np.array([[-0.2, 0.1, 0.3], [0.2, -0.1, 0.0]]),
    ]
    optimizer = ServerOptimizer(rule, lr, mu)
    x, m, v = value.astype(np.float64), np.zeros((2, 3)), np.zeros((2, 3))
    current = value
    for t, delta in enumerate(deltas, start=1):
        g = -delta
        if rule == "sgd-momentum":
            m = mu * m + g
            x = (x - lr * m).astype(np.float32).astype(np.float64)
        else:
            m = mu * m + (1 - mu) * g
            v = BETA2 * v + (1 - BETA2) * g**2
            step = lr * (m / (1 - mu**t)) / (np.sqrt(v / (1 - BETA2**t)) + EPS)
            x = (x - step).astype(np.float32).astype(np.float64)
        current = optimizer.update_dense("mlp-0-weight", current, delta)
        assert current.dtype == np.float32
        assert current == pytest.approx(x, rel=1e-6, abs=1e-7), f"round {t}"
    # Adam's first step moves every coordinate by lr in the direction of the change.
    if rule == "adam":
        first = ServerOptimizer("adam", lr, mu).update_dense("w", value, deltas[0])
        assert first - value == pytest.approx(lr * np.sign(deltas[0]), rel=1e-4)


# ---------------------------------------------------------------------- config
@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"sam-rho-private": -0.1}, r"must be >= 0 \(0 = no SAM\)"),
        ({"sam-rho-shared": -1.0}, r"must be >= 0 \(0 = no SAM\)"),
        ({"server-optimizer": "adamw"}, "did you mean 'adam'.*Choose one of: none, sgd-momentum"),
        ({"server-optimizer": "lbfgs"}, "Choose one of: none, sgd-momentum, adam"),
        ({"server-lr": 0.5}, "set server-optimizer to 'adam' or 'sgd-momentum', or leave"),
        (
            {"method": "pfedrec", "personalization": "dual"},
            r"does not apply to method 'pfedrec'.*use personalization='none'",
        ),
        ({"personalization": "both"}, "Choose one of: none, dual"),
        ({"ncf-layers": ""}, "comma-separated positive layer sizes, e.g. '32,16'"),
        ({"ncf-layers": "32,0"}, "comma-separated positive layer sizes"),
        ({"ncf-layers": "32;16"}, "comma-separated positive layer sizes"),
        ({"method": "fedncf", "ncf-layers": "-8"}, "comma-separated positive layer sizes"),
        ({"server-momentum": 1.0}, r"must be in \[0, 1\)"),
    ],
)
def test_config_rejects_impossible_method_settings_with_what_to_do(mapping, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_mapping(mapping)


@pytest.mark.parametrize(
    "mapping",
    [
        {"method": "fedrecgel", "sam-rho-shared": 0.01},
        {"method": "fedrecgel", "sam-rho-private": 0.2, "server-optimizer": "adam"},
        {"server-optimizer": "adam", "server-lr": 0.01},
        {"server-optimizer": "sgd-momentum", "server-lr": 2.0, "server-momentum": 0.0},
        {"method": "fedmf", "personalization": "dual"},
        {"method": "fedncf", "personalization": "dual", "ncf-layers": "16"},
        {"method": "fedrecon", "personalization": "dual"},
        {"method": "pfedrec", "sam-rho-private": 0.05},
    ],
)
def test_config_accepts_the_valid_combinations(mapping):
    RunConfig.from_mapping(mapping)
