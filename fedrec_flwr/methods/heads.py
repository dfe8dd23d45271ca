"""Score heads and keyed initialisations that several methods share."""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import numpy as np
import torch

from fedrec_flwr.methods.capabilities import linear_score_head
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.schema import ConfigError, Group, key
from fedrec_flwr.seeding import keyed_rng


class HeadInit(StrEnum):
    """``score-init``: how each user's private score function starts."""

    SHARED = "shared"
    PER_USER = "per-user"


class ScoreHeadKeys(Group):
    title = "Score function (PFedRec, FedRAP)"

    score_init: str = key(
        default=HeadInit.SHARED.value,
        help="how each user's private score function (d -> 1) starts: `shared`, one draw for "
        "every user (PyTorch's nn.Linear default, as the papers' code); `per-user`, weights "
        "N(0, init-std^2) drawn per (seed, user) and bias 0, as FedMF's user vectors, so that "
        "users start apart and the shared rows learn more than one common direction",
        choices=HeadInit,
    )


def check_score_init(config: RunGroups, method: object, cards: Mapping[str, Any]) -> None:
    """``score-init`` other than ``shared`` only for a method whose private score function is
    :func:`linear_head_init`'s (:func:`~fedrec_flwr.methods.capabilities.linear_score_head`;
    ``cards``: the registered methods' cards, named in the message)."""
    if config.group(ScoreHeadKeys).score_init == HeadInit.SHARED:
        return
    if not linear_score_head(method):
        heads = [name for name, card in cards.items() if linear_score_head(card.method)]
        raise ConfigError(
            f"score-init applies to the methods with a private linear score function "
            f"({', '.join(heads)}); method '{config.value('method')}' has none: leave "
            "score-init = 'shared'."
        )


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


def fixed_order_dots(rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``sum_k rows[..., k] * weight[..., k]`` (shapes broadcast to [..., r]) in one fixed
    order of float32 operations, whatever the shape, the device or the library: the products
    rounded, the first four summed in turn, then four running sums of every fourth product
    from the fifth on (the first of them seeded with the four), combined as
    ``(s0 + s2) + (s1 + s3)``. No FMA, no blocking chosen by shape: each value is the same
    on CPU and CUDA, alone or in any batch. (It is also the order of MKL's float32
    matrix-vector kernel on 16-byte-aligned rows where MKL takes its AVX2 path, e.g. on AMD
    CPUs.) Widths that are not a multiple of four, or below eight, are padded with zero
    products."""
    products = rows * weight
    width = products.shape[-1]
    padded = max(8, -(-width // 4) * 4)
    if padded != width:
        products = torch.nn.functional.pad(products, (0, padded - width))
    head = products[..., 0] + products[..., 1]
    head = head + products[..., 2]
    head = head + products[..., 3]
    lanes = products[..., 4:].unflatten(-1, (-1, 4))
    sums = lanes[..., 0, :].clone()
    sums[..., 0] = head + sums[..., 0]
    for j in range(1, lanes.shape[-2]):
        sums = sums + lanes[..., j, :]
    return (sums[..., 0] + sums[..., 2]) + (sums[..., 1] + sums[..., 3])


#: Products one block of :func:`linear_logits_all` materialises (users x items x dim).
LOGITS_ALL_BLOCK = 1 << 24


def linear_logits_all(
    table: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """<table[i], weight_u> (+ bias_u) for every item: [a, I], each score in the fixed order
    of :func:`fixed_order_dots`, so a user's scores do not depend on how many users are
    scored with it, nor on the device. (Full rankings of linear heads take the faster exact
    path of :mod:`fedrec_flwr.node.full_ranking`, which gives the same ranks.)"""
    out = table.new_empty(len(weight), len(table))
    step = max(1, LOGITS_ALL_BLOCK // max(1, table.numel()))
    for lo in range(0, len(weight), step):
        out[lo : lo + step] = fixed_order_dots(table.unsqueeze(0), weight[lo : lo + step, None])
    return out if bias is None else out + bias.unsqueeze(-1)


#: The ``private-init`` stream key of ``score-init = "per-user"`` heads (apart from FedMF's
#: user vectors, key 1, and FedNCF's, keys 2 and 3).
HEAD_KEY = 4


def user_normal(config: RunGroups, users: np.ndarray, dim: int, key: int) -> np.ndarray:
    """[n, dim] N(0, init-std^2) vectors, one keyed draw per (seed, user)."""
    if not len(users):
        return np.zeros((0, dim), dtype=np.float32)
    return np.stack(
        [
            keyed_rng(config.training.seed, "private-init", key, int(user)).normal(
                0.0, config.learning.init_std, size=dim
            )
            for user in users
        ]
    ).astype(np.float32)


def linear_head_init(config: RunGroups, users: np.ndarray, dim: int) -> dict[str, torch.Tensor]:
    """A linear score head d -> 1 per user (``score-weight`` [n, d], ``score-bias`` [n]):
    under ``score-init = "shared"`` all from one draw, PyTorch's nn.Linear(d, 1) default
    init keyed by the seed; under ``"per-user"`` weights N(0, init-std^2) keyed by (seed,
    user), as :func:`user_normal`, and bias 0."""
    n = len(users)
    if config.group(ScoreHeadKeys).score_init == HeadInit.PER_USER:
        return {
            "score-weight": torch.from_numpy(user_normal(config, users, dim, key=HEAD_KEY)),
            "score-bias": torch.zeros(n, dtype=torch.float32),
        }
    rng = keyed_rng(config.training.seed, "private-init", 0)
    bound = 1.0 / math.sqrt(dim)
    weight = rng.uniform(-bound, bound, size=dim).astype(np.float32)
    bias = np.float32(rng.uniform(-bound, bound))
    return {
        "score-weight": torch.from_numpy(np.tile(weight, (n, 1))),
        "score-bias": torch.full((n,), float(bias), dtype=torch.float32),
    }
