"""The data of the method conformance suite (:mod:`fedrec_lab.testing`): the tiny
federation's settings, synthetic round samples and parameters, and what a federation run
leaves."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedrec_flwr.methods import ROWS, Method, Role
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node.training import RoundSamples
from fedrec_lab.local_grid import LocalGrid

TINY: dict[str, Any] = {
    "dataset": "synthetic",
    "protocol": "strict",
    "synthetic-users": 20,
    "synthetic-items": 200,
    "synthetic-mean-degree": 10,
    "num-server-rounds": 3,
    "batch-size": 16,
    "embedding-dim": 8,
    "ncf-mlp-dim": 8,
    "ncf-layers": "8,4",
    "item-lr": 0.5,
}

#: Settings of the step-level tests (1-3): plain learning rates, two epochs.
STEPS: dict[str, Any] = {
    "batch-size": 16,
    "local-epochs": 2,
    "fedrecon-epochs": 2,
    "lr": 0.3,
    "item-lr": 2.0,
    "item-lr-scaling": "none",
    "dense-lr": 0.3,
    "seed": 5,
}

METRIC_PREFIXES = ("train-loss", "val-", "test-")


# ------------------------------------------------------------------- samples
def random_samples(rng: np.random.Generator, num_users: int, batch: int) -> RoundSamples:
    """Users with different numbers of samples (1 to 3 batches), each with its own rows
    (rows repeat within a user's samples)."""
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


def only_user(samples: RoundSamples, j: int) -> RoundSamples:
    """User ``j`` of ``samples`` alone, with its rows renumbered from 0."""
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


def user_params(
    method: Method, users: np.ndarray, rng: np.random.Generator, spread: bool = True
) -> dict[str, torch.Tensor]:
    """Every non-row parameter of ``users``, stacked per user: private ones from
    ``init_private``, dense ones (shared-dense copies, or private under dual
    personalisation) from ``init_dense``.

    ``spread``: add a different offset per user to every parameter (so that a mix-up
    between users shows); shared-dense copies stay identical per user when it is off.
    """
    params = dict(method.init_private(users))
    for name, initial in method.init_dense().items():
        tensor = torch.from_numpy(initial)
        params[name] = tensor.unsqueeze(0).repeat(len(users), *[1] * tensor.dim())
    per_user = {n for n, r in method.roles().items() if r in (Role.PRIVATE, Role.SHARED_DENSE)}
    assert set(params) == per_user
    shared = set(layout(method).shared_dense)
    out: dict[str, torch.Tensor] = {}
    for name, value in params.items():
        if spread or name not in shared:
            noise = rng.normal(scale=0.1, size=value.shape).astype(np.float32)
            value = value + torch.from_numpy(noise)
        out[name] = value
    return out


def row_tables(
    method: Method, samples: RoundSamples, rng: np.random.Generator
) -> dict[str, torch.Tensor]:
    """A random flat table (one row per round row) for every row parameter but ``ROWS``
    (FedRAP's ``D_u``, PLGC's global view); none for methods with item rows only."""
    size = (int(samples.row_offsets[-1]), method.row_dim)
    return {
        name: torch.from_numpy(rng.normal(size=size).astype(np.float32))
        for name in layout(method).rows
        if name != ROWS
    }


def cloned(params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in params.items()}


# --------------------------------------------------------------- federations
@dataclass
class Run:
    summary: dict
    grid: LocalGrid
    rounds: list[dict[str, str]]  # rounds.csv

    def metrics(self) -> dict[str, list[float]]:
        """Train loss and every validation/test metric, per round."""
        return {
            name: [float(row[name]) for row in self.rounds]
            for name in self.rounds[0]
            if name.startswith(METRIC_PREFIXES) and all(row[name] != "" for row in self.rounds)
        }  # a column the method leaves empty is no metric of it (no train loss: item-item)


class Uploads:
    """The floats a federation uploaded, to look private values up in.

    Independent float32 values coincide now and then (thousands of private values against
    tens of thousands of uploaded ones), so a private tensor counts as found when two of its
    consecutive values appear consecutively in an upload (one value for a scalar).
    """

    def __init__(self, arrays: list[np.ndarray]) -> None:
        self.values = {float(v) for a in arrays for v in a.ravel()}
        self.pairs = {pair for a in arrays for pair in itertools.pairwise(a.ravel().tolist())}

    def contains(self, values: np.ndarray) -> bool:
        flat = values.ravel().astype(np.float64).tolist()
        if len(flat) == 1:
            return flat[0] in self.values
        return any(pair in self.pairs for pair in itertools.pairwise(flat))
