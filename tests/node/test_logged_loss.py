"""The logged train loss of a step: the float64 sum of its real entries' BCE, in order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedrec_flwr.methods.base import Step, bce_losses
from fedrec_flwr.node.training import logged_loss


@pytest.mark.parametrize("seed", range(6))
def test_logged_loss_sums_the_real_entries_as_torch_compaction_does(seed):
    """Padding (zero weight) is left out; the values and their order are those of
    ``losses[weights > 0]``, so the float64 sum is the same to the last bit, also for a
    step whose tensors are views into a larger buffer."""
    rng = np.random.default_rng(seed)
    users, width = int(rng.integers(1, 40)), 64 * int(rng.integers(1, 4))
    sizes = rng.integers(1, width + 1, users)
    weights = np.zeros((users + 1, width), dtype=np.float32)  # one row more: views
    for j, size in enumerate(sizes):
        weights[j, :size] = 1.0 / size
    scale = 10.0 ** rng.integers(-6, 3, size=(users, width))
    logits = torch.from_numpy((rng.standard_normal((users, width)) * scale).astype(np.float32))
    labels = torch.from_numpy((rng.random((users + 1, width)) < 0.2).astype(np.float32))
    step = Step(
        users=torch.arange(users),
        rows=torch.zeros((users, width), dtype=torch.int64),
        labels=labels[:users],
        weights=torch.from_numpy(weights)[:users],
    )
    losses = bce_losses(logits, step)
    expected = losses[step.weights > 0].double().sum()
    got = logged_loss(logits, step)
    assert got.dtype == torch.float64
    assert got.item() == expected.item()
    assert int(sum(sizes)) == int((step.weights > 0).sum())
