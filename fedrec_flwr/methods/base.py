"""What a method is: parameters with roles, a loss, a score function and update phases.

Every tensor a method sees is *batched over users*: a private or shared-dense parameter is
stacked (first dimension = the users being trained or scored), and the item rows a round trains
live in one flat table in which every user owns its own disjoint block of rows. No parameter
is shared between users and the loss is a sum of per-user mean losses, so one batched step is
every user taking its own step: training a node's users together is training them one by one
(the conformance suite checks it). Gradients come from autograd by default; a method may give
them in closed form (``closed_form_grads``), which the conformance suite holds equal to
autograd and which makes packed training bit-identical to one-by-one training.

Roles (``Role``) say where each parameter lives:

- ``private``: never leaves the device (a score function, a user vector);
- ``shared-rows``: the global item table, sent and aggregated row by row (name ``"rows"``);
- ``personal-rows``: the device keeps its tuned copies of the rows and evaluates with them
  (a flag of the method, ``personal_rows``);
- ``shared-dense``: dense parameters every user trains a copy of (NCF's MLP), averaged over
  the round's users;
- ``private-rows``: per-user item rows the device keeps across rounds and never uploads
  (FedRAP's additive local table ``D_u``); during training a flat table aligned with the
  item rows (the same blocks), zero for rows the user never trained;
- ``global-rows``: a frozen copy of the received global rows, aligned with the item rows
  (PLGC's global view); never trained, kept or uploaded.

Hooks: ``begin_round`` (before training), ``begin_local_update`` and ``end_local_update``
(with the round's :class:`RoundContext`: its row blocks and their labels) and ``after_step``
(after each phase's update: proximal steps, regularisers over rows outside the batch).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

if TYPE_CHECKING:
    from fedrec_flwr.config import RunConfig

ROWS = "rows"  # the name of the item-row parameter in every phase


class Role(StrEnum):
    PRIVATE = "private"
    SHARED_ROWS = "shared-rows"
    SHARED_DENSE = "shared-dense"
    PRIVATE_ROWS = "private-rows"
    GLOBAL_ROWS = "global-rows"


#: Roles of parameters that are flat row tables aligned with the item rows (gathered by
#: ``step.rows``; their gradients arrive per batch entry).
ROW_ROLES = frozenset({Role.SHARED_ROWS, Role.PRIVATE_ROWS, Role.GLOBAL_ROWS})


@dataclass(frozen=True)
class Step:
    """One mini-batch for each active user (padded).

    ``users``: [a] indices of the active users among the round's users; ``rows``: [a, B]
    indices into the flat row table; ``labels``: [a, B] in {0, 1}; ``weights``: [a, B] =
    1 / (the user's batch size) on real entries, 0 on padding, so that
    ``(weights * per-entry loss).sum()`` is the sum over users of their mean batch loss.
    """

    users: torch.Tensor
    rows: torch.Tensor
    labels: torch.Tensor
    weights: torch.Tensor


@dataclass(frozen=True)
class Phase:
    """One update on every mini-batch: the parameters it moves (``ROWS`` for item rows).

    Phases of a stage run in order on each batch, each from the parameters the previous one
    left (PFedRec: the score function, then the item rows with the updated score function).
    """

    name: str
    params: tuple[str, ...]


@dataclass(frozen=True)
class Stage:
    """Phases run for ``epochs`` epochs over the round's samples. ``logged``: its loss is the
    round's reported train loss."""

    name: str
    phases: tuple[Phase, ...]
    epochs: int
    logged: bool = True


@dataclass(frozen=True)
class RoundContext:
    """The round a local update runs in, for hooks that need more than one batch.

    ``row_offsets`` [n + 1]: user ``j`` of the round owns flat rows
    ``row_offsets[j]:row_offsets[j+1]``; ``sample_counts`` [n]: its samples per epoch;
    ``row_labels`` [R]: 1.0 for a row that is one of its user's positives this round, else 0.
    """

    server_round: int
    num_rounds: int
    row_offsets: torch.Tensor
    sample_counts: torch.Tensor
    row_labels: torch.Tensor

    def held_rows(self, users: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(flat rows held by ``users``, index in ``users`` of each row's owner)."""
        lo, hi = self.row_offsets[users], self.row_offsets[users + 1]
        counts = hi - lo
        owner = torch.repeat_interleave(torch.arange(len(users), device=lo.device), counts)
        starts = torch.repeat_interleave(lo - torch.cumsum(counts, 0) + counts, counts)
        return starts + torch.arange(int(counts.sum()), device=lo.device), owner


def bce_grad(logits: torch.Tensor, step: Step) -> torch.Tensor:
    """Gradient w.r.t. the logits [a, B] of the step's loss: ``(sigmoid(z) - y) * weight``."""
    return (torch.sigmoid(logits) - step.labels) * step.weights


def bce_losses(logits: torch.Tensor, step: Step) -> torch.Tensor:
    """Per-entry BCE [a, B] (for the reported train loss)."""
    return F.binary_cross_entropy_with_logits(logits, step.labels, reduction="none")


class Method(ABC):
    """A federated recommendation method, as plain batched PyTorch.

    A subclass declares its parameters and their roles, its score function (``logits``) and
    its phases; adding a method is one module in this package, its entry in ``METHODS``, its
    presets and a README row.
    """

    name: ClassVar[str]
    #: Paper the method comes from (README method table).
    paper: ClassVar[str] = ""
    #: May ``personalization = "dual"`` be applied to it?
    supports_dual: ClassVar[bool] = False

    def __init__(self, config: RunConfig, num_items: int) -> None:
        self.config = config
        self.num_items = num_items
        self.dim = config.embedding_dim
        self.dual = config.personalization == "dual"
        if self.dual and not self.supports_dual:
            from fedrec_flwr.config import ConfigError

            raise ConfigError(
                f"personalization='dual' does not apply to method '{self.name}'"
                + (" (it keeps personal item rows already)" if self.native_personal_rows else "")
                + "; use personalization='none'."
            )

    # ----------------------------------------------------------------- roles
    #: Does the method as published keep personal rows (PFedRec)?
    native_personal_rows: ClassVar[bool] = False

    @property
    def personal_rows(self) -> bool:
        """Does the user keep its tuned item rows and evaluate with them?"""
        return self.native_personal_rows or self.dual

    @property
    def eval_table(self) -> str:
        """Global table evaluation reads for rows a user has no personal copy of:
        ``round-start`` (the table sent at the start of the latest training round, as the
        PFedRec reference code does) or ``latest`` (after that round's aggregation)."""
        return "round-start" if self.personal_rows else "latest"

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

    def dense_names(self) -> tuple[str, ...]:
        return self._names("dense", lambda: tuple(self.init_dense()))

    def roles(self) -> dict[str, Role]:
        """Role of every parameter: private ones, ``rows``, shared-dense ones."""
        roles = {name: Role.PRIVATE for name in self.private_names()}
        roles[ROWS] = Role.SHARED_ROWS
        for name in self.dense_names():
            roles[name] = Role.PRIVATE if self.dual else Role.SHARED_DENSE
        return roles

    def private_names(self) -> tuple[str, ...]:
        return self._names("private", lambda: tuple(self.init_private(np.empty(0, np.int64))))

    def _names(self, kind: str, names: Callable[[], tuple[str, ...]]) -> tuple[str, ...]:
        """``names()`` once per method object: the names do not change, computing them
        initialises parameters (keyed draws), and the roles ask for them on every message."""
        cache = self.__dict__.setdefault("_names_cache", {})
        if kind not in cache:
            cache[kind] = names()
        return cache[kind]

    def shared_dense_names(self) -> tuple[str, ...]:
        return self._names("shared-dense", lambda: self._with_role(Role.SHARED_DENSE))

    def _with_role(self, *roles: Role) -> tuple[str, ...]:
        return tuple(n for n, r in self.roles().items() if r in roles)

    def row_names(self) -> tuple[str, ...]:
        """Parameters that are flat row tables aligned with the item rows (``ROWS`` first)."""
        return (ROWS, *(n for n, r in self.roles().items() if r in ROW_ROLES and n != ROWS))

    def private_row_names(self) -> tuple[str, ...]:
        """Per-user rows kept on the device across rounds (role ``private-rows``)."""
        return self._names("private-rows", lambda: self._with_role(Role.PRIVATE_ROWS))

    def global_row_names(self) -> tuple[str, ...]:
        """Frozen copies of the received global rows (role ``global-rows``)."""
        return self._names("global-rows", lambda: self._with_role(Role.GLOBAL_ROWS))

    #: Does a user start a round's item rows from its personal copies (where it has them)
    #: instead of the global rows? (PLGC: the local rows persist.)
    train_from_personal: ClassVar[bool] = False

    @property
    def zero_threshold(self) -> float | None:
        """Rows whose max |value| is at or below this count as zero: they are not sent (only
        their ids) and the server snaps them to exact zeros. ``None``: rows are dense."""
        return None

    def kept_private_names(self) -> tuple[str, ...]:
        """Per-user parameters kept in the node state: private ones, and under dual
        personalisation the dense ones."""
        return self._names("kept-private", lambda: self._with_role(Role.PRIVATE))

    def learning_rate(self, name: str) -> float:
        """Learning rate of a parameter: ``item-lr`` for rows, ``dense-lr`` for the method's
        dense weights (shared, or private under dual personalisation: the plug-in changes
        where they live, not how fast they learn), ``lr`` for the other private ones."""
        role = self.roles()[name]
        if role in (Role.SHARED_ROWS, Role.PRIVATE_ROWS):
            return self.config.item_learning_rate(self.num_items)
        if role is Role.GLOBAL_ROWS:
            return 0.0
        if role is Role.SHARED_DENSE or name in self.dense_names():
            return self.config.dense_lr
        return self.config.lr

    # -------------------------------------------------------------- updates
    def stages(self) -> tuple[Stage, ...]:
        """The round's local update: by default ``local-epochs`` epochs of ``phases()``."""
        return (Stage("train", self.phases(), self.config.local_epochs),)

    def phases(self) -> tuple[Phase, ...]:
        """The per-batch phases. As published: one joint step on everything the method
        trains; under dual personalisation (PFedRec Table 3): the private parameters first,
        then the item rows with the updated ones (post-tuning)."""
        private = tuple(n for n, r in self.roles().items() if r not in ROW_ROLES)
        if self.dual:
            return (Phase("private", private), Phase("items", (ROWS,)))
        return (Phase("joint", (*private, ROWS)),)

    def begin_round(
        self, params: dict[str, torch.Tensor], users: np.ndarray, server_round: int
    ) -> None:
        """Hook before a round's training (``params``: the round users' tensors, in place)."""
        return None

    def begin_local_update(self, params: dict[str, torch.Tensor], context: RoundContext) -> None:
        """Hook after ``begin_round``, with the round's row blocks (``params`` in place)."""
        return None

    def after_step(
        self, params: dict[str, torch.Tensor], step: Step, phase: Phase, context: RoundContext
    ) -> None:
        """Hook after each phase's update of a step (``params`` in place): proximal steps,
        regularisers over rows outside the batch."""
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

    #: Use ``closed_form_grads`` when the method has it (tests switch it off to compare).
    use_closed_form: bool = True

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

    #: Users scored at once by a full ranking (bounds the memory of [users, items, ...]).
    eval_chunk: ClassVar[int] = 256
    #: Is ``logits`` row-wise, with a result per row that does not depend on the shape of the
    #: batch (elementwise operations and sums over the row; no matrix product)? Evaluation may
    #: then score a user's held rows as a flat list of (user, item) pairs instead of a padded
    #: [users, most held, r] block, with bit-identical scores.
    rowwise_logits: ClassVar[bool] = False

    def describe(self) -> dict[str, str]:
        """Name, paper and roles, for logs and the README's method table."""
        return {"method": self.name, **{k: v.value for k, v in self.roles().items()}}


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


def user_normal(config: RunConfig, users: np.ndarray, dim: int, key: int) -> np.ndarray:
    """[n, dim] N(0, init-std^2) vectors, one keyed draw per (seed, user)."""
    from fedrec_flwr.seeding import keyed_rng

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


def linear_head_init(config: RunConfig, users: np.ndarray, dim: int) -> dict[str, torch.Tensor]:
    """A linear score head d -> 1 per user (``score-weight`` [n, d], ``score-bias`` [n]), all
    from one shared draw: PyTorch's nn.Linear(d, 1) default init, keyed by the seed."""
    import math

    from fedrec_flwr.seeding import keyed_rng

    rng = keyed_rng(config.seed, "private-init", 0)
    bound = 1.0 / math.sqrt(dim)
    weight = rng.uniform(-bound, bound, size=dim).astype(np.float32)
    bias = np.float32(rng.uniform(-bound, bound))
    n = len(users)
    return {
        "score-weight": torch.from_numpy(np.tile(weight, (n, 1))),
        "score-bias": torch.full((n,), float(bias), dtype=torch.float32),
    }
