"""FedMF (Chai et al., 2020): federated matrix factorisation.

Private user vector ``p_u``; shared item table. Score ``sigmoid(<p_u, E[i]>)``. Per batch one
BCE step on ``p_u`` and on the item rows, both from the gradient at the same point; the item
rows are uploaded and averaged, evaluation uses the aggregated global table. Under
``personalization = "dual"`` (PFedRec Table 3) the user vector is the private score function:
it steps first, then the user post-tunes personal item rows that it evaluates with.
"""

from __future__ import annotations

import numpy as np
import torch

from fedrec_flwr.methods.base import (
    ROWS,
    Method,
    Step,
    bce_grad,
    linear_logits,
    linear_logits_all,
    user_normal,
)
from fedrec_flwr.methods.card import INIT_STD, ITEM_LR, LR, NEGATIVES, AuditImitation, MethodCard
from fedrec_flwr.methods.parts import factors_rows
from fedrec_flwr.methods.parts import outer_rows as outer

USER = "user-embedding"


class FedMF(Method):
    name = "fedmf"
    rowwise_logits = True  # linear_logits: a product and a sum over each row

    def init_private(self, users: np.ndarray) -> dict[str, torch.Tensor]:
        """User vectors ~ N(0, init-std^2), keyed by (seed, user)."""
        return {USER: torch.from_numpy(user_normal(self.config, users, self.dim, key=1))}

    def logits(self, params: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        return linear_logits(rows, params[USER], None)

    def logits_all(self, params: dict[str, torch.Tensor], table: torch.Tensor) -> torch.Tensor:
        return linear_logits_all(table, params[USER], None)

    def linear_head(self, params: dict[str, torch.Tensor]):
        return params[USER], None

    @factors_rows
    def closed_form_grads(self, step: Step, params, rows, wrt, outer_rows: bool = False):
        user = params[USER]
        logits = linear_logits(rows, user, None)
        grad_logits = bce_grad(logits, step)
        grads = {}
        if USER in wrt:
            grads[USER] = (grad_logits.unsqueeze(-1) * rows).sum(1)
        if ROWS in wrt:
            grads[ROWS] = outer(grad_logits, user, outer_rows)
        return grads, logits


CARD = MethodCard(
    FedMF,
    title="FedMF",
    paper="Chai et al., IEEE Intelligent Systems 2020",
    search_space={"lr": LR, "item-lr": ITEM_LR, "init-std": INIT_STD, "num-negatives": NEGATIVES},
    # The server cannot know the private user vector: its shadow draws one.
    audit=AuditImitation(update="joint", head="random", train_bias=False, ldp_clip=3.0),
    supports_dual=True,
    golden=("dual", "counter"),
    order=2,
)
