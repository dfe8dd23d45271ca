"""A toy federated recommendation method in a package of its own: matrix factorisation with
an optional private user bias, its scores divided by a temperature.

fedrec-flwr finds it through the entry point its ``pyproject.toml`` declares (group
``fedrec_flwr.methods``, naming :data:`CARD`), so that ``flwr run``, ``fedrec tune`` and
``fedrec audit`` run ``method = "toy"`` like a built-in method (``docs/adding-a-method.md``).
"""

from __future__ import annotations

import numpy as np
import torch

from fedrec_flwr.methods import ROWS, Method, Step
from fedrec_flwr.methods.base import bce_grad, linear_logits, linear_logits_all, user_normal
from fedrec_flwr.methods.card import ITEM_LR, LR, AuditImitation, MethodCard
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.schema import POSITIVE, Dim, Group, key

USER, BIAS = "toy-user", "toy-bias"


class ToyKeys(Group):
    """The toy's own run-config keys."""

    title = "Toy"

    toy_temperature: float = key(
        default=1.0, help="the toy method's scores are divided by it", range=POSITIVE
    )
    toy_bias: bool = key(
        default=True, help="`true`: each user trains a private bias; `false`: none"
    )


class ToyMF(Method):
    """Matrix factorisation with an optional private user bias, its scores divided by a
    temperature (``toy-temperature``)."""

    name = "toy"
    rowwise_logits = True  # linear_logits: a product and a sum over each row

    def __init__(self, config: RunGroups, num_items: int) -> None:
        super().__init__(config, num_items)
        self.keys = config.group(ToyKeys)

    def init_private(self, users: np.ndarray) -> dict[str, torch.Tensor]:
        """User vectors ~ N(0, init-std^2), keyed by (seed, user); biases 0."""
        params = {USER: torch.from_numpy(user_normal(self.config, users, self.dim, key=9))}
        if self.keys.toy_bias:
            params[BIAS] = torch.zeros(len(users))
        return params

    def logits(self, params: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        scores = linear_logits(rows, params[USER], params.get(BIAS))
        return scores / self.keys.toy_temperature

    def logits_all(self, params: dict[str, torch.Tensor], table: torch.Tensor) -> torch.Tensor:
        scores = linear_logits_all(table, params[USER], params.get(BIAS))
        return scores / self.keys.toy_temperature

    def closed_form_grads(
        self, step: Step, params: dict[str, torch.Tensor], rows: torch.Tensor, wrt: tuple[str, ...]
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The BCE's gradients by hand (autograd's, which the conformance suite checks)."""
        logits = self.logits(params, rows)
        grad_logits = bce_grad(logits, step) / self.keys.toy_temperature
        grads = {}
        if USER in wrt:
            grads[USER] = (grad_logits.unsqueeze(-1) * rows).sum(1)
        if BIAS in wrt:
            grads[BIAS] = grad_logits.sum(-1)
        if ROWS in wrt:
            grads[ROWS] = grad_logits.unsqueeze(-1) * params[USER].unsqueeze(1)
        return grads, logits


#: What is known about the toy besides its maths; the entry point names it.
CARD = MethodCard(
    ToyMF,
    title="Toy",
    paper="a toy method, in its own package (tests/toy_method)",
    keys=ToyKeys,
    search_space={"lr": LR, "item-lr": ITEM_LR, "toy-temperature": Dim(0.25, 4.0)},
    # At temperature 1, FedMF with a bias: the audit's shadow steps user and rows jointly.
    audit=AuditImitation(update="joint", head="random", train_bias=True, ldp_clip=3.0),
)
