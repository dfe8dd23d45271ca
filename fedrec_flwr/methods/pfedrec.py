"""PFedRec (Zhang et al., IJCAI-23): dual personalisation.

No user embedding. Each user has a private score function ``S_u`` (one linear layer d -> 1,
then sigmoid) and fine-tunes the global item rows into personal ones. Per batch (Algorithm 1
of the paper): (a) a BCE step on ``S_u`` with the item rows fixed; (b) the BCE recomputed
with the updated ``S_u`` and a step on the item rows only ("post-tuning"). The tuned rows are
uploaded; ``S_u`` never leaves the device. Evaluation uses the user's own tuned rows and
``S_u``; rows it did not tune come from the global table of the start of that round.
"""

from __future__ import annotations

import numpy as np
import torch

from fedrec_flwr.methods.base import (
    ROWS,
    Method,
    Phase,
    Role,
    Step,
    bce_grad,
    linear_head_init,
    linear_logits,
    linear_logits_all,
)
from fedrec_flwr.methods.card import ITEM_LR, LR, NEGATIVES, AuditImitation, MethodCard
from fedrec_flwr.methods.heads import ScoreHeadKeys
from fedrec_flwr.methods.parts import factors_rows
from fedrec_flwr.methods.parts import outer_rows as outer

SCORE = ("score-weight", "score-bias")


class PFedRec(Method):
    name = "pfedrec"
    rowwise_logits = True  # linear_logits: a product and a sum over each row
    linear_score_head = True  # heads.linear_head_init's head: score-init acts on it

    def init_private(self, users: np.ndarray) -> dict[str, torch.Tensor]:
        """One shared initialisation for every user, PyTorch's nn.Linear(d, 1) default; or,
        under ``score-init = "per-user"``, one keyed draw per user."""
        return linear_head_init(self.config, users, self.dim)

    def roles(self) -> dict[str, Role]:
        """The item rows are personal: the user keeps its tuned copies."""
        return {**super().roles(), ROWS: Role.PERSONAL_ROWS}

    def phases(self) -> tuple[Phase, ...]:
        return (Phase("score", SCORE), Phase("items", (ROWS,)))

    def logits(self, params: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        return linear_logits(rows, params["score-weight"], params["score-bias"])

    def logits_all(self, params: dict[str, torch.Tensor], table: torch.Tensor) -> torch.Tensor:
        return linear_logits_all(table, params["score-weight"], params["score-bias"])

    def linear_head(self, params: dict[str, torch.Tensor]):
        return params["score-weight"], params["score-bias"]

    @factors_rows
    def closed_form_grads(self, step: Step, params, rows, wrt, outer_rows: bool = False):
        weight, bias = params["score-weight"], params["score-bias"]
        logits = linear_logits(rows, weight, bias)
        grad_logits = bce_grad(logits, step)
        grads = {}
        if "score-weight" in wrt:
            grads["score-weight"] = (grad_logits.unsqueeze(-1) * rows).sum(1)
        if "score-bias" in wrt:
            grads["score-bias"] = grad_logits.sum(-1)
        if ROWS in wrt:
            grads[ROWS] = outer(grad_logits, weight, outer_rows)
        return grads, logits


CARD = MethodCard(
    PFedRec,
    title="PFedRec",
    paper="Zhang et al., IJCAI 2023",
    keys=ScoreHeadKeys,
    search_space={"lr": LR, "item-lr": ITEM_LR, "num-negatives": NEGATIVES},
    # Every user's score function starts from the same public initialisation (the default
    # score-init; the audit imitates that one).
    audit=AuditImitation(update="alternate", head="shared", train_bias=True, ldp_clip=15.0),
    golden=("sam", "plgc", "paper", "counter", "paper-counter"),
    order=1,
)
