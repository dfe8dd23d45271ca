"""PFedRec (Zhang et al., IJCAI-23): dual personalisation.

No user embedding. Each user has a private score function ``S_u`` (one linear layer d -> 1,
then sigmoid) and fine-tunes the global item rows into personal ones. Per batch (Algorithm 1
of the paper): (a) a BCE step on ``S_u`` with the item rows fixed; (b) the BCE recomputed
with the updated ``S_u`` and a step on the item rows only ("post-tuning"). The tuned rows are
uploaded; ``S_u`` never leaves the device. Evaluation uses the user's own tuned rows and
``S_u``; rows it did not tune come from the global table of the start of that round.
"""

from __future__ import annotations

import math

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


class PFedRec(Method):
    name = "pfedrec"
    personalised_rows = True
    eval_table = "round-start"

    def init_private(self, users: np.ndarray) -> dict[str, torch.Tensor]:
        """One shared initialisation for every user: PyTorch's nn.Linear(d, 1) default."""
        rng = keyed_rng(self.config.seed, "private-init", 0)
        bound = 1.0 / math.sqrt(self.dim)
        weight = rng.uniform(-bound, bound, size=self.dim).astype(np.float32)
        bias = np.float32(rng.uniform(-bound, bound))
        n = len(users)
        return {
            "score-weight": torch.from_numpy(np.tile(weight, (n, 1))),
            "score-bias": torch.full((n,), float(bias), dtype=torch.float32),
        }

    def logits(self, private: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        return linear_logits(rows, private["score-weight"], private["score-bias"])

    def logits_all(self, private: dict[str, torch.Tensor], table: torch.Tensor) -> torch.Tensor:
        return linear_logits_all(table, private["score-weight"], private["score-bias"])

    def train_step(
        self, step: Step, rows: torch.Tensor, private: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        weight_all, bias_all = private["score-weight"], private["score-bias"]
        batch_rows = rows[step.rows]  # [a, B, d]
        # (a) score-function step, item rows fixed.
        weight, bias = weight_all[step.users], bias_all[step.users]
        logits = linear_logits(batch_rows, weight, bias)
        grad_logits = bce_grad(logits, step)
        weight = weight - self.lr * (grad_logits.unsqueeze(-1) * batch_rows).sum(1)
        bias = bias - self.lr * grad_logits.sum(-1)
        weight_all[step.users], bias_all[step.users] = weight, bias
        # (b) post-tuning: loss recomputed with the updated score function, item step only.
        grad_logits = bce_grad(linear_logits(batch_rows, weight, bias), step)
        grad_rows = grad_logits.unsqueeze(-1) * weight.unsqueeze(1)
        rows.index_add_(
            0, step.rows.reshape(-1), grad_rows.reshape(-1, self.dim), alpha=-self.item_lr
        )
        return bce_losses(logits, step)
