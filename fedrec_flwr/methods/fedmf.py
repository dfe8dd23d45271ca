"""FedMF (Chai et al., 2020): federated matrix factorisation.

Private user vector ``p_u``; shared item table. Score ``sigmoid(<p_u, E[i]>)``. Per batch one
BCE step on ``p_u`` and on the item rows, both from the gradient at the same point; the item
rows are uploaded and averaged, evaluation uses the aggregated global table.
"""

from __future__ import annotations

import numpy as np
import torch

from fedrec_flwr.methods.base import (
    Method,
    Step,
    bce_grad,
    bce_losses,
    linear_logits,
    linear_logits_all,
)
from fedrec_flwr.seeding import keyed_rng


class FedMF(Method):
    name = "fedmf"
    personalised_rows = False
    eval_table = "latest"

    def init_private(self, users: np.ndarray) -> dict[str, torch.Tensor]:
        """User vectors ~ N(0, init-std^2), keyed by (seed, user)."""
        vectors = (
            np.stack(
                [
                    keyed_rng(self.config.seed, "private-init", 1, int(user)).normal(
                        0.0, self.config.init_std, size=self.dim
                    )
                    for user in users
                ]
            )
            if len(users)
            else np.zeros((0, self.dim))
        )
        return {"user-embedding": torch.from_numpy(vectors.astype(np.float32))}

    def logits(self, private: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        return linear_logits(rows, private["user-embedding"], None)

    def logits_all(self, private: dict[str, torch.Tensor], table: torch.Tensor) -> torch.Tensor:
        return linear_logits_all(table, private["user-embedding"], None)

    def train_step(
        self, step: Step, rows: torch.Tensor, private: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        users_all = private["user-embedding"]
        batch_rows = rows[step.rows]  # [a, B, d]
        user = users_all[step.users]
        logits = linear_logits(batch_rows, user, None)
        grad_logits = bce_grad(logits, step)
        grad_user = (grad_logits.unsqueeze(-1) * batch_rows).sum(1)
        grad_rows = grad_logits.unsqueeze(-1) * user.unsqueeze(1)
        users_all[step.users] = user - self.lr * grad_user
        rows.index_add_(
            0, step.rows.reshape(-1), grad_rows.reshape(-1, self.dim), alpha=-self.item_lr
        )
        return bce_losses(logits, step)
