"""The parts a method is made of: parameter roles, steps, phases, stages and the round context.

Roles (``Role``) say where each parameter lives:

- ``private``: never leaves the device (a score function, a user vector);
- ``shared-rows``: the global item table, sent and aggregated row by row (name ``"rows"``);
- ``personal-rows``: the global item table as ``shared-rows``, of which the device also
  keeps its tuned copies and evaluates with them (PFedRec; any method under DualPer);
- ``shared-dense``: dense parameters every user trains a copy of (NCF's MLP), averaged over
  the round's users;
- ``private-rows``: per-user item rows the device keeps across rounds and never uploads
  (FedRAP's additive local table ``D_u``); during training a flat table aligned with the
  item rows (the same blocks), zero for rows the user never trained;
- ``global-rows``: a frozen copy of the received global rows, aligned with the item rows
  (PLGC's global view); never trained, kept or uploaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

ROWS = "rows"  # the name of the item-row parameter in every phase


class Role(StrEnum):
    PRIVATE = "private"
    SHARED_ROWS = "shared-rows"
    PERSONAL_ROWS = "personal-rows"
    SHARED_DENSE = "shared-dense"
    PRIVATE_ROWS = "private-rows"
    GLOBAL_ROWS = "global-rows"


#: Roles of parameters that are flat row tables aligned with the item rows (gathered by
#: ``step.rows``; their gradients arrive per batch entry).
ROW_ROLES = frozenset({Role.SHARED_ROWS, Role.PERSONAL_ROWS, Role.PRIVATE_ROWS, Role.GLOBAL_ROWS})


@dataclass(frozen=True)
class Step:
    """One mini-batch for each active user (padded).

    ``users``: [a] indices of the active users among the round's users; ``rows``: [a, B]
    indices into the flat row table; ``labels``: [a, B] in {0, 1}; ``weights``: [a, B] =
    1 / (the user's batch size) on real entries, 0 on padding, so that
    ``(weights * per-entry loss).sum()`` is the sum over users of their mean batch loss.
    ``lr_scale``: float64 [a], the factor on every learning rate of each user at this step
    (the local schedule, :mod:`fedrec_flwr.node.schedule`); None: 1.
    """

    users: torch.Tensor
    rows: torch.Tensor
    labels: torch.Tensor
    weights: torch.Tensor
    lr_scale: torch.Tensor | None = None


@dataclass(frozen=True)
class OuterRows:
    """A per-entry row gradient that is one factor per batch entry times one vector per
    user: ``scale.unsqueeze(-1) * vector.unsqueeze(1)`` ([a, B, r]; ``scale`` [a, B],
    ``vector`` [a, r]), kept as its factors. The local optimiser's row update on the CPU
    takes each product where it adds it instead of writing the [a, B, r] tensor and reading
    it back (the same float32 products, :mod:`fedrec_flwr.node.row_updates`); elsewhere
    :meth:`tensor` is the gradient."""

    scale: torch.Tensor
    vector: torch.Tensor

    def tensor(self) -> torch.Tensor:
        """The gradient [a, B, r] (the products the closed form writes)."""
        return self.scale.unsqueeze(-1) * self.vector.unsqueeze(1)


def outer_rows(scale: torch.Tensor, vector: torch.Tensor, factored: bool):
    """The row gradient ``scale[a, B] x vector[a, r]``: its factors (:class:`OuterRows`)
    when ``factored``, else the [a, B, r] tensor."""
    outer = OuterRows(scale, vector)
    return outer if factored else outer.tensor()


def factors_rows(closed_form):
    """Marks a ``closed_form_grads`` that takes ``outer_rows=True`` (its row gradient as an
    :class:`OuterRows`); an override without the mark is called without it."""
    closed_form.outer_rows = True
    return closed_form


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

    ``users``: the global ids of the round's users (int64 [n], on the host);
    ``row_offsets`` [n + 1]: user ``j`` of the round owns flat rows
    ``row_offsets[j]:row_offsets[j+1]``; ``sample_counts`` [n]: its samples per epoch;
    ``row_labels`` [R]: 1.0 for a row that is one of its user's positives this round, else 0.
    """

    server_round: int
    num_rounds: int
    users: np.ndarray
    row_offsets: torch.Tensor
    sample_counts: torch.Tensor
    row_labels: torch.Tensor
    #: Per row table, each user's log of the factor weight decay took its rows by this round
    #: (float64 [n]; filled by the local optimiser, :mod:`fedrec_flwr.node.optim`).
    row_decay: dict[str, torch.Tensor] = field(default_factory=dict)

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
