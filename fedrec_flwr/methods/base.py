"""What a method is: parameters with roles, a loss, a score function and update phases.

Every tensor a method sees is *batched over users*: a private or shared-dense parameter is
stacked (first dimension = the users being trained or scored), and the item rows a round trains
live in one flat table in which every user owns its own disjoint block of rows. No parameter
is shared between users and the loss is a sum of per-user mean losses, so one batched step is
every user taking its own step: training a node's users together is training them one by one
(the conformance suite checks it). Gradients come from autograd by default; a method may give
them in closed form (``closed_form_grads``), which the conformance suite holds equal to
autograd and which makes packed training bit-identical to one-by-one training.

Where each parameter lives is its role (:mod:`fedrec_flwr.methods.parts`); the name lists
the runtime reads are computed from the roles (:func:`fedrec_flwr.methods.layout.layout`).
What a method may offer beside this contract (fast paths, sparse rows, the stored form of
private rows) is in :mod:`fedrec_flwr.methods.capabilities`. Hooks:
``begin_local_update`` (before training) and ``end_local_update`` (after it), with the round's
:class:`RoundContext` (its users, row blocks and their labels), and ``after_step`` (after
each phase's update: proximal steps, regularisers over rows outside the batch).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
import torch

from fedrec_flwr.methods.heads import (
    linear_head_init,
    linear_logits,
    linear_logits_all,
    user_normal,
)
from fedrec_flwr.methods.layout import layout as method_layout
from fedrec_flwr.methods.parts import (
    ROW_ROLES,
    ROWS,
    Phase,
    Role,
    RoundContext,
    Stage,
    Step,
    bce_grad,
    bce_losses,
)
from fedrec_flwr.run_keys import RunGroups

__all__ = [
    "ROWS",
    "ROW_ROLES",
    "Method",
    "Phase",
    "Role",
    "RoundContext",
    "Stage",
    "Step",
    "bce_grad",
    "bce_losses",
    "linear_head_init",
    "linear_logits",
    "linear_logits_all",
    "user_normal",
]


class Method(ABC):
    """A federated recommendation method, as plain batched PyTorch.

    The maths and nothing else: its parameters and their roles (``init_private``,
    ``init_dense``, ``roles``, ``row_dim``), its local update (``stages``, ``phases``,
    ``learning_rate``, the hooks, ``loss``, ``closed_form_grads``) and its score function
    (``logits``, ``logits_all``, ``represent``, ``score``); ``tests/methods/test_contract.py``
    pins it. What is known about it besides its maths (paper, keys, search space, audit) is
    its :class:`~fedrec_flwr.methods.card.MethodCard`, declared beside it
    (``docs/adding-a-method.md``).
    """

    #: The ``method`` run-config key.
    name: ClassVar[str]

    def __init__(self, config: RunGroups, num_items: int) -> None:
        self.config = config
        self.num_items = num_items
        self.dim = config.learning.embedding_dim
        #: Under DualPer (set by that plug-in, :mod:`fedrec_flwr.methods.plugins`, on a
        #: method whose card ``supports_dual``)?
        self.dual = False

    # ----------------------------------------------------------------- roles
    @property
    def row_dim(self) -> int:
        """Width of an item row."""
        return self.dim

    @abstractmethod
    def init_private(self, users: np.ndarray) -> dict[str, torch.Tensor]:
        """Initial private parameters of ``users`` (global user ids), stacked per user.

        Draws must be keyed by (seed, user) so a user's init does not depend on its node.
        """

    def init_dense(self) -> dict[str, np.ndarray]:
        """The method's dense parameters (one copy, keyed by the seed); none by default.

        They are shared-dense, or private (one copy per user, all from this init) under
        dual personalisation.
        """
        return {}

    def roles(self) -> dict[str, Role]:
        """Role of every parameter: private ones, ``rows`` (``personal-rows`` under dual
        personalisation), shared-dense ones. The name lists
        the node, the messages and the server read are computed from it once per method
        object (:func:`fedrec_flwr.methods.layout.layout`)."""
        roles = {name: Role.PRIVATE for name in self.init_private(np.empty(0, np.int64))}
        roles[ROWS] = Role.PERSONAL_ROWS if self.dual else Role.SHARED_ROWS
        for name in self.init_dense():
            roles[name] = Role.PRIVATE if self.dual else Role.SHARED_DENSE
        return roles

    def learning_rate(self, name: str) -> float:
        """Learning rate of a parameter: ``item-lr`` for rows, ``dense-lr`` for the method's
        dense weights (shared, or private under dual personalisation: the plug-in changes
        where they live, not how fast they learn), ``lr`` for the other private ones."""
        layout = method_layout(self)
        role = layout.roles[name]
        if role in (Role.SHARED_ROWS, Role.PERSONAL_ROWS, Role.PRIVATE_ROWS):
            return self.config.learning.item_learning_rate(self.num_items)
        if role is Role.GLOBAL_ROWS:
            return 0.0
        if role is Role.SHARED_DENSE or name in layout.dense:
            return self.config.learning.dense_lr
        return self.config.learning.lr

    # -------------------------------------------------------------- updates
    def stages(self) -> tuple[Stage, ...]:
        """The round's local update: by default ``local-epochs`` epochs of ``phases()``."""
        return (Stage("train", self.phases(), self.config.training.local_epochs),)

    def phases(self) -> tuple[Phase, ...]:
        """The per-batch phases. As published: one joint step on everything the method
        trains; under dual personalisation (PFedRec Table 3): the private parameters first,
        then the item rows with the updated ones (post-tuning)."""
        private = tuple(n for n, r in method_layout(self).roles.items() if r not in ROW_ROLES)
        if self.dual:
            return (Phase("private", private), Phase("items", (ROWS,)))
        return (Phase("joint", (*private, ROWS)),)

    def begin_local_update(self, params: dict[str, torch.Tensor], context: RoundContext) -> None:
        """Hook before a round's training, with the round's users and row blocks (``params``:
        the round users' tensors, in place)."""
        return None

    def after_step(
        self, params: dict[str, torch.Tensor], step: Step, phase: Phase, context: RoundContext
    ) -> None:
        """Hook after each phase's update of a step (``params`` in place): proximal steps,
        regularisers over rows outside the batch. A step it takes scales its learning rates
        by ``step.lr_scale`` (each user's, when not None: the local schedule)."""
        return None

    def end_local_update(self, params: dict[str, torch.Tensor], context: RoundContext) -> None:
        """Hook after the round's last step (``params`` in place)."""
        return None

    def loss(
        self,
        step: Step,
        params: dict[str, torch.Tensor],
        rows: torch.Tensor,
        logits: torch.Tensor,
    ) -> torch.Tensor:
        """The step's loss from its ``logits``: the sum over users of each user's mean BCE on
        its batch. A method with regularisers adds them here.

        ``params``: every non-row parameter of the step's users [a, ...]; ``rows``: [a, B, r].
        """
        return (bce_losses(logits, step) * step.weights).sum()

    def closed_form_grads(
        self,
        step: Step,
        params: dict[str, torch.Tensor],
        rows: torch.Tensor,
        wrt: tuple[str, ...],
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor] | None:
        """Optional fast path: (gradients of ``loss`` w.r.t. ``wrt``, logits [a, B]).

        The gradient w.r.t. ``ROWS`` is per batch entry, [a, B, r]. ``None``: use autograd.
        """
        return None

    # -------------------------------------------------------------- scoring
    @abstractmethod
    def logits(self, params: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        """Scores before the sigmoid: params [a, ...], item rows [a, k, r] -> [a, k].

        Row-role parameters in ``params`` (``private-rows``, ``global-rows``) come aligned
        with ``rows`` [a, k, r]; they may be absent (then: zero private rows).
        """

    def represent(self, params: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        """The item representation the score function reads (FedRAP: ``rows + D_u``)."""
        return rows

    def score(self, params: dict[str, torch.Tensor], reps: torch.Tensor) -> torch.Tensor:
        """The score function on representations: ``logits = score(represent(rows))``."""
        return self.logits(params, reps)

    def logits_all(self, params: dict[str, torch.Tensor], table: torch.Tensor) -> torch.Tensor:
        """Scores of every item of ``table`` [I, r] for each user: [a, I].

        The default expands the table per user; linear score functions override it with a
        matrix product.
        """
        users = next(iter(params.values())).shape[0]
        return self.logits(params, table.unsqueeze(0).expand(users, -1, -1))
