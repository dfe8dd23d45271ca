"""Score heads and keyed initialisations that several methods share."""

from __future__ import annotations

import math

import numpy as np
import torch

from fedrec_flwr.schema import Settings
from fedrec_flwr.seeding import keyed_rng


def linear_logits(
    rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """<rows, weight_u> (+ bias_u) for rows [a, k, d], weight [a, d], bias [a].

    An elementwise product and a sum over d, not ``bmm``: each user's result is then
    bit-identical whatever other users share the batch (BLAS kernels pick their blocking by
    shape), which is what makes packed nodes reproduce one-user nodes exactly.
    """
    out = (rows * weight.unsqueeze(1)).sum(-1)
    return out if bias is None else out + bias.unsqueeze(-1)


def linear_logits_all(
    table: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """<table[i], weight_u> (+ bias_u) for every item: [a, I]. One matrix-vector product per
    user, so a user's scores do not depend on how many users are scored with it."""
    out = (
        torch.stack([table @ w for w in weight]) if len(weight) else table.new_zeros(0, len(table))
    )
    return out if bias is None else out + bias.unsqueeze(-1)


def user_normal(config: Settings, users: np.ndarray, dim: int, key: int) -> np.ndarray:
    """[n, dim] N(0, init-std^2) vectors, one keyed draw per (seed, user)."""
    if not len(users):
        return np.zeros((0, dim), dtype=np.float32)
    return np.stack(
        [
            keyed_rng(config.seed, "private-init", key, int(user)).normal(
                0.0, config.init_std, size=dim
            )
            for user in users
        ]
    ).astype(np.float32)


def linear_head_init(config: Settings, users: np.ndarray, dim: int) -> dict[str, torch.Tensor]:
    """A linear score head d -> 1 per user (``score-weight`` [n, d], ``score-bias`` [n]), all
    from one shared draw: PyTorch's nn.Linear(d, 1) default init, keyed by the seed."""
    rng = keyed_rng(config.seed, "private-init", 0)
    bound = 1.0 / math.sqrt(dim)
    weight = rng.uniform(-bound, bound, size=dim).astype(np.float32)
    bias = np.float32(rng.uniform(-bound, bound))
    n = len(users)
    return {
        "score-weight": torch.from_numpy(np.tile(weight, (n, 1))),
        "score-bias": torch.full((n,), float(bias), dtype=torch.float32),
    }
