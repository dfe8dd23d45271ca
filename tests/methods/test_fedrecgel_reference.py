"""FedRecGEL's reference-code options: the loss as a sum of chunk means, and Adam on the
user embeddings with its state kept per user."""

from typing import ClassVar

import numpy as np
import pytest
import torch
from torch.nn.functional import binary_cross_entropy_with_logits as bce

from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.methods import ROWS, Role, Step, build_method
from fedrec_flwr.methods.adam_state import ADAM_STEPS, adam_moment_names, adam_state, is_adam_state
from fedrec_flwr.methods.fedncf import USER_GMF, USER_MLP, chunk_weights
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node.optim import SGD, PrivateAdam, local_optimizer
from fedrec_flwr.node.training import _gradient_fn, epoch_steps
from fedrec_lab.testing import (
    FederationConformance,
    StateConformance,
    StepConformance,
    random_samples,
    user_params,
)


def fedrecgel(**changes):
    config = RunConfig.from_fields(
        method="fedrecgel",
        embedding_dim=4,
        ncf_mlp_dim=8,
        ncf_layers="8,4",
        batch_size=16,
        sam_rho_private=0.1,
        **changes,
    )
    return build_method(config, num_items=40)


def steps_and_params(method, seed=0):
    rng = np.random.default_rng(seed)
    samples = random_samples(rng, num_users=5, batch=method.config.training.batch_size)
    params = user_params(method, samples.users, rng)
    table = rng.normal(size=(samples.row_offsets[-1], method.row_dim)).astype(np.float32)
    steps = epoch_steps(samples, method.config, 1, 0, torch.device("cpu"))
    return steps, params, torch.from_numpy(table)


def reference_loss(logits, labels, chunk):
    """The reference code's loss of one user's batch: sum over ``chunk``-sample slices of
    ``BCEWithLogitsLoss()`` (a mean)."""
    return sum(
        bce(logits[i : i + chunk], labels[i : i + chunk]) for i in range(0, len(logits), chunk)
    )


@pytest.mark.parametrize("chunk", [1, 5, 16, 128])
def test_loss_chunk_sums_the_means_of_consecutive_chunks_of_each_batch(chunk):
    method = fedrecgel(fedrecgel_loss_chunk=chunk)
    mean_method = fedrecgel()
    steps, params, table = steps_and_params(method)
    sizes_seen = set()
    for step in steps:
        per_user = {n: p[step.users] for n, p in params.items()}
        rows = table[step.rows]
        logits = method.logits(per_user, rows)
        expected, mean = 0.0, 0.0
        for k in range(len(step.users)):
            real = step.weights[k] > 0
            size = int(real.sum())
            sizes_seen.add(size)
            assert real[:size].all()  # the real entries come first
            expected = expected + reference_loss(logits[k, :size], step.labels[k, :size], chunk)
            mean = mean + bce(logits[k, :size], step.labels[k, :size])
        got = method.loss(step, per_user, rows, logits)
        assert float(got) == pytest.approx(float(expected), rel=1e-5)
        assert float(mean_method.loss(step, per_user, rows, logits)) == pytest.approx(
            float(mean), rel=1e-5
        )
    assert max(sizes_seen) > 5  # some batch spans several chunks


def test_chunk_weights_by_hand():
    weights = torch.tensor([[1 / 7] * 7 + [0.0], [1 / 3] * 3 + [0.0] * 5])
    got = chunk_weights(weights, 3)
    third, one = 1 / 3, 1.0
    assert got[0].tolist() == pytest.approx([third] * 6 + [one, 0.0])
    assert got[1].tolist() == pytest.approx([third] * 3 + [0.0] * 5)


def test_loss_chunk_zero_is_fedncfs_loss_and_a_negative_chunk_is_refused():
    method = fedrecgel()
    steps, params, table = steps_and_params(method)
    step = steps[0]
    per_user = {n: p[step.users] for n, p in params.items()}
    rows = table[step.rows]
    logits = method.logits(per_user, rows)
    fedncf = build_method(method.config.replace(method="fedncf"), num_items=40)
    assert torch.equal(
        method.loss(step, per_user, rows, logits), fedncf.loss(step, per_user, rows, logits)
    )
    with pytest.raises(ConfigError, match="fedrecgel-loss-chunk"):
        RunConfig.from_mapping({"fedrecgel-loss-chunk": -1})


# ------------------------------------------------------- Adam on the private parameters
def test_private_adam_matches_pytorchs_adam_per_user_across_gaps():
    """Two users; user 1 sits out the second step: its moments and step count wait."""
    roles = {"p": Role.PRIVATE, ROWS: Role.SHARED_ROWS}
    params = {"p": torch.tensor([[0.5, -1.0], [2.0, 0.25]]), ROWS: torch.zeros(2, 2)}
    params.update(adam_state({"p": params["p"]}))
    roles.update({name: Role.PRIVATE for name in params if name not in roles})
    lr = 0.1
    optimizer = PrivateAdam({n: lr for n in roles}, (ROWS,), ("p",))
    oracle = [torch.nn.Parameter(params["p"][k].clone().double()) for k in range(2)]
    oracles = [torch.optim.Adam([p], lr=lr) for p in oracle]
    schedule = [[0, 1], [0], [1, 0]]
    rng = np.random.default_rng(3)
    for users in schedule:
        grads = torch.from_numpy(rng.normal(size=(len(users), 2)).astype(np.float32))
        step = Step(
            users=torch.tensor(users),
            rows=torch.zeros(len(users), 1, dtype=torch.long),
            labels=torch.zeros(len(users), 1),
            weights=torch.ones(len(users), 1),
        )
        optimizer.apply(params, step, {"p": grads})
        for k, user in enumerate(users):
            oracle[user].grad = grads[k].double()
            oracles[user].step()
    for user in range(2):
        assert params["p"][user].tolist() == pytest.approx(oracle[user].tolist(), rel=1e-5)
    assert params[ADAM_STEPS].tolist() == [3.0, 2.0]


def test_fedrecgel_with_private_adam_keeps_state_and_steps_the_embeddings_with_it():
    method = fedrecgel(fedrecgel_private_optimizer="adam", lr=0.1)
    private = method.init_private(np.arange(3))
    first, second = adam_moment_names(USER_GMF)
    assert {first, second, ADAM_STEPS} <= set(private) and not private[first].any()
    assert all(not is_adam_state(n) for phase in method.phases() for n in phase.params)
    optimizer = local_optimizer(method, method.config)  # SAM, rho-private 0.1
    assert isinstance(optimizer.inner, PrivateAdam)
    assert set(optimizer.inner.adam_names) == {USER_GMF, USER_MLP}
    steps, params, table = steps_and_params(method)
    params[ROWS] = table
    params.update(adam_state({n: params[n] for n in (USER_GMF, USER_MLP)}))  # zero state
    before = {n: p.clone() for n, p in params.items()}
    (phase,) = method.phases()
    step = steps[0]
    optimizer.step(params, step, _gradient_fn(method, params, step, phase, layout(method).rows))
    users = step.users
    assert params[ADAM_STEPS][users].tolist() == [1.0] * len(users)
    # Adam's first step moves each coordinate by lr (sign of the gradient) at most.
    moved = (params[USER_GMF][users] - before[USER_GMF][users]).abs()
    assert moved.max() <= 0.1 + 1e-6 and moved.max() > 0.09
    assert params[first][users].any() and params[second][users].any()
    # The default keeps plain SGD and no state.
    assert set(fedrecgel().init_private(np.arange(2))) == {USER_GMF, USER_MLP}
    default = fedrecgel()
    assert type(local_optimizer(default, default.config).inner) is SGD


REFERENCE_OPTIONS = {
    "method": "fedrecgel",
    "sam-rho-private": 0.01,
    "sam-rho-shared": 0.01,
    "sam-mode": "hierarchical",
    "server-optimizer": "adam",
    "server-lr": 0.01,
    "server-optimizer-rows": "all",
    "fedrecgel-loss-chunk": 5,
}


class TestFedRecGELReferenceSteps(StepConformance):
    """The step checks with the reference code's options on, but SGD on the user embeddings:
    they start from random private parameters, which Adam's state cannot be (a negative
    second moment); batches of 16, so that they span several chunks."""

    config: ClassVar = REFERENCE_OPTIONS


class TestFedRecGELReferenceFederation(StateConformance, FederationConformance):
    """The node-state and federation checks with every reference option, Adam on the user
    embeddings included, and the reference's one full-batch step a round: the state
    round-trips with the private state and a user's run does not depend on its node."""

    config: ClassVar = {
        **REFERENCE_OPTIONS,
        "batch-size": 100_000,
        "fedrecgel-private-optimizer": "adam",
        "lr": 0.1,
    }
    loss_rounds = 5  # as TestFedRecGEL: Adam's small server step
