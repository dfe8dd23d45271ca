"""The methods' local updates: hand-computed steps and batched == one-by-one training."""

import numpy as np
import pytest
import torch

from fedrec_flwr.config import RunConfig
from fedrec_flwr.methods import METHODS, build_method
from fedrec_flwr.methods.base import Step
from fedrec_flwr.training import RoundSamples, local_update


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def one_step(labels, rows):
    """A single user's single batch over rows 0..k-1."""
    k = len(labels)
    return Step(
        users=torch.tensor([0]),
        rows=torch.arange(k).unsqueeze(0),
        labels=torch.tensor([labels], dtype=torch.float32),
        weights=torch.full((1, k), 1.0 / k),
    )


def test_pfedrec_score_step_first_then_item_step_with_the_updated_score_function():
    config = RunConfig(
        method="pfedrec", embedding_dim=2, lr=0.5, item_lr=3.0, item_lr_scaling="none"
    )
    method = build_method(config, num_items=2)
    table = np.array([[1.0, -2.0], [0.5, 0.25]])
    w, b = np.array([0.3, -0.1]), 0.2
    y = np.array([1.0, 0.0])
    rows = torch.tensor(table, dtype=torch.float32)
    private = {
        "score-weight": torch.tensor(w[None], dtype=torch.float32),
        "score-bias": torch.tensor([b], dtype=torch.float32),
    }
    method.train_step(one_step(y.tolist(), rows), rows, private)

    # By hand: mean BCE over the 2 samples; dL/dz = (sigmoid(z) - y) / 2.
    g = (sigmoid(table @ w + b) - y) / 2
    w1, b1 = w - 0.5 * (g @ table), b - 0.5 * g.sum()
    g1 = (sigmoid(table @ w1 + b1) - y) / 2  # recomputed with the UPDATED score function
    table1 = table - 3.0 * np.outer(g1, w1)
    assert private["score-weight"][0].numpy() == pytest.approx(w1, abs=1e-6)
    assert private["score-bias"][0].item() == pytest.approx(b1, abs=1e-6)
    assert rows.numpy() == pytest.approx(table1, abs=1e-6)
    # The other order (item step with the old score function) would give other rows.
    table_wrong = table - 3.0 * np.outer(g, w)
    assert np.abs(table1 - table_wrong).max() > 1e-2


def test_fedmf_steps_user_and_items_from_the_same_point():
    config = RunConfig(method="fedmf", embedding_dim=2, lr=0.5, item_lr=3.0, item_lr_scaling="none")
    method = build_method(config, num_items=2)
    table = np.array([[1.0, -2.0], [0.5, 0.25]])
    p = np.array([0.3, -0.1])
    y = np.array([1.0, 0.0])
    rows = torch.tensor(table, dtype=torch.float32)
    private = {"user-embedding": torch.tensor(p[None], dtype=torch.float32)}
    method.train_step(one_step(y.tolist(), rows), rows, private)
    g = (sigmoid(table @ p) - y) / 2
    assert private["user-embedding"][0].numpy() == pytest.approx(p - 0.5 * (g @ table), abs=1e-6)
    assert rows.numpy() == pytest.approx(table - 3.0 * np.outer(g, p), abs=1e-6)


def random_samples(rng, num_users, dim, batch):
    """Users with different numbers of samples (1 to 3 batches), each with its own rows."""
    row_counts = rng.integers(2, 12, num_users)
    sample_counts = rng.integers(1, 3 * batch, num_users)
    row_offsets = np.r_[0, np.cumsum(row_counts)]
    sample_rows = np.concatenate(
        [
            row_offsets[j] + rng.integers(0, row_counts[j], sample_counts[j])
            for j in range(num_users)
        ]
    )
    return RoundSamples(
        users=np.arange(num_users) * 7 + 3,
        positions=np.arange(num_users),
        row_offsets=row_offsets,
        row_items=np.concatenate([np.arange(c) for c in row_counts]),
        sample_offsets=np.r_[0, np.cumsum(sample_counts)],
        sample_rows=sample_rows,
        sample_labels=rng.integers(0, 2, len(sample_rows)).astype(np.float32),
    )


def only_user(samples, j):
    lo, hi = samples.row_offsets[j], samples.row_offsets[j + 1]
    slo, shi = samples.sample_offsets[j], samples.sample_offsets[j + 1]
    return RoundSamples(
        users=samples.users[j : j + 1],
        positions=np.array([0]),
        row_offsets=np.array([0, hi - lo]),
        row_items=samples.row_items[lo:hi],
        sample_offsets=np.array([0, shi - slo]),
        sample_rows=samples.sample_rows[slo:shi] - lo,
        sample_labels=samples.sample_labels[slo:shi],
    )


@pytest.mark.parametrize("name", sorted(METHODS))
def test_batched_training_equals_training_each_user_alone(name):
    rng = np.random.default_rng(0)
    config = RunConfig(
        method=name,
        embedding_dim=8,
        batch_size=16,
        local_epochs=2,
        lr=0.3,
        item_lr=2.0,
        item_lr_scaling="none",
        seed=5,
    )
    method = build_method(config, num_items=20)
    samples = random_samples(rng, num_users=6, dim=8, batch=16)
    rows0 = torch.from_numpy(rng.normal(size=(samples.row_offsets[-1], 8)).astype(np.float32))
    private0 = method.init_private(samples.users)
    # Different starting points per user, so a mix-up between users would show.
    private0 = {
        k: v + torch.from_numpy(rng.normal(size=v.shape).astype(np.float32))
        for k, v in private0.items()
    }

    rows, private = rows0.clone(), {k: v.clone() for k, v in private0.items()}
    loss_all, n_all = local_update(method, samples, rows, private, config, server_round=4)

    loss_alone, n_alone = 0.0, 0
    for j in range(len(samples.users)):
        lo, hi = samples.row_offsets[j], samples.row_offsets[j + 1]
        user_rows = rows0[lo:hi].clone()
        user_private = {k: v[j : j + 1].clone() for k, v in private0.items()}
        loss, n = local_update(method, only_user(samples, j), user_rows, user_private, config, 4)
        loss_alone, n_alone = loss_alone + loss, n_alone + n
        assert torch.equal(rows[lo:hi], user_rows)  # bit-identical, not just close
        for k in private:
            assert torch.equal(private[k][j : j + 1], user_private[k])
    assert n_all == n_alone == samples.sample_offsets[-1] * 2
    assert loss_all == pytest.approx(loss_alone, rel=1e-5)
