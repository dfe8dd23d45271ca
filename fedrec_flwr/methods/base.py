"""What a method is: its private parameters, its local update step and its score function.

All tensors are *batched over a node's users*: private parameters are stacked (first
dimension = the node's users), and the item rows a round trains live in one flat table in
which every user owns its own disjoint block of rows. Because no parameter is shared between
users and the loss is a sum of per-user mean losses, one batched step equals every user
taking its own step: training a node's users together is training them one by one
(``tests/test_methods.py``). The linear methods write their gradients in closed form with
per-user reductions, which makes the equality bit-exact; a method may use autograd instead,
and is then equal up to float rounding.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from fedrec_flwr.config import RunConfig


@dataclass(frozen=True)
class Step:
    """One mini-batch for each active user (padded to the batch size).

    ``users``: [a] positions of the active users in the node's private tensors;
    ``rows``: [a, B] indices into the flat row table; ``labels``: [a, B] in {0, 1};
    ``weights``: [a, B] = 1 / (the user's batch size) on real entries, 0 on padding, so that
    ``(weights * per-entry loss).sum()`` is the sum over users of their mean batch loss.
    """

    users: torch.Tensor
    rows: torch.Tensor
    labels: torch.Tensor
    weights: torch.Tensor


def bce_grad(logits: torch.Tensor, step: Step) -> torch.Tensor:
    """Gradient w.r.t. the logits [a, B] of the step's loss.

    The step's loss is the sum over users of each user's mean BCE on its batch, so the
    gradient is ``(sigmoid(z) - y) * weight`` (zero on padding).
    """
    return (torch.sigmoid(logits) - step.labels) * step.weights


def bce_losses(logits: torch.Tensor, step: Step) -> torch.Tensor:
    """Per-entry BCE [a, B] (for the reported train loss)."""
    return F.binary_cross_entropy_with_logits(logits, step.labels, reduction="none")


class Method(ABC):
    """A federated recommendation method, as plain batched PyTorch.

    Subclasses set the class attributes and implement the three abstract methods; adding a
    method means one module in this package plus its entry in ``METHODS`` and a preset.
    """

    name: ClassVar[str]
    #: Does the user keep its tuned item rows and evaluate with them (dual personalisation)?
    personalised_rows: ClassVar[bool]
    #: Global table that evaluation reads for rows the user has no personal copy of:
    #: "round-start" (the table sent at the start of the latest training round, as the
    #: PFedRec reference code does) or "latest" (the table after that round's aggregation).
    eval_table: ClassVar[str]

    def __init__(self, config: RunConfig, num_items: int) -> None:
        self.config = config
        self.num_items = num_items
        self.dim = config.embedding_dim
        self.lr = config.lr
        self.item_lr = config.item_learning_rate(num_items)

    @abstractmethod
    def init_private(self, users: np.ndarray) -> dict[str, torch.Tensor]:
        """Initial private parameters of ``users`` (global user ids), stacked per user.

        Draws must be keyed by (seed, user) so a user's init does not depend on its node.
        """

    @abstractmethod
    def train_step(
        self, step: Step, rows: torch.Tensor, private: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """Update ``rows`` and ``private`` in place on one step.

        Returns the per-entry BCE [a, B] at the step's starting point (for logging).
        """

    @abstractmethod
    def logits(self, private: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        """Scores before the sigmoid: private params [a, ...], item rows [a, k, d] -> [a, k]."""

    def logits_all(self, private: dict[str, torch.Tensor], table: torch.Tensor) -> torch.Tensor:
        """Scores of every item of ``table`` [I, d] for each user: [a, I].

        The default expands the table per user; linear score functions override it with a
        matrix product.
        """
        users = next(iter(private.values())).shape[0]
        return self.logits(private, table.unsqueeze(0).expand(users, -1, -1))


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
