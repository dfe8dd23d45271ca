"""FedRAP's private item table ``D_u`` as the device stores it (:mod:`fedrec_flwr.methods.fedrap`).

Stored: zero for a row the user never trained, as every private-rows store keeps it
(:mod:`fedrec_flwr.node.personal`). Two options of the reference code change what that
means:

- ``fedrap-local-init = "normal"``: every user's ``D_u`` starts from one N(0, init-std^2)
  table ``T`` keyed by the seed (the reference copies its one N(0, 1) table to every user); a
  row is stored as its offset from ``T``;
- ``weight-decay-rows = "all"`` with weight decay: every row of ``D_u`` decays at every step of
  the user, held or not (:mod:`fedrec_flwr.node.dense_decay`). The rows are stored divided by
  the user's factor since its first round, the private parameter ``local-scale``: a row it does
  not hold keeps its stored value while the factor shrinks. During a local update ``D_u`` holds
  its values (the round's rows are multiplied at its start, divided at its end, when the
  factor has taken the round's product of ``1 - lr * weight-decay``).

So ``D_u[i] = (stored[i] + T[i]) * local-scale``, with ``T = 0`` and ``local-scale = 1`` when
the options are off (then nothing is computed).
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np
import torch

from fedrec_flwr.methods.base import RoundContext, linear_logits_all
from fedrec_flwr.seeding import keyed_rng

LOCAL = "local-rows"  # D_u
SCALE = "local-scale"  # each user's factor on D_u since its first round


class LocalInit(StrEnum):
    """``fedrap-local-init``: what ``D_u`` holds for a row the user never trained."""

    ZERO = "zero"
    NORMAL = "normal"


class LocalRows:
    """The stored form of ``D_u`` of a run (see the module doc)."""

    def __init__(
        self, init: str, scaled: bool, seed: int, init_std: float, shape: tuple[int, int]
    ) -> None:
        self.init = init  # fedrap-local-init
        self.scaled = scaled  # weight-decay-rows = "all" with weight decay
        self.seed, self.init_std, self.shape = seed, init_std, shape  # T: [items, d]
        self.training = False  # inside a local update: D_u holds its values
        self._initial: np.ndarray | None = None

    @property
    def initial(self) -> np.ndarray | None:
        """``T`` [items, d] (``fedrap-local-init = "normal"``), None: zero."""
        if self.init != LocalInit.NORMAL:
            return None
        if self._initial is None:
            rng = keyed_rng(self.seed, "fedrap-local-init")
            self._initial = rng.normal(0.0, self.init_std, size=self.shape).astype(np.float32)
        return self._initial

    def scale_init(self, users: np.ndarray) -> dict[str, torch.Tensor]:
        """The private ``local-scale`` of ``users`` (1), when the rows are scaled."""
        return {SCALE: torch.ones(len(users), dtype=torch.float32)} if self.scaled else {}

    def loaded(self, rows: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Stored rows plus ``T``'s (what the score reads, before the scale)."""
        initial = self.initial
        return rows if initial is None else rows + initial[np.asarray(items, dtype=np.int64)]

    def stored(self, rows: np.ndarray, items: np.ndarray) -> np.ndarray:
        initial = self.initial
        return rows if initial is None else rows - initial[np.asarray(items, dtype=np.int64)]

    def values(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """``D_u``'s values of the rows in ``params`` (aligned [a, k, d])."""
        if SCALE in params and not self.training:
            return params[LOCAL] * params[SCALE].reshape(-1, 1, 1)
        return params[LOCAL]

    def untrained_scores(
        self, params: dict[str, torch.Tensor], scores: torch.Tensor
    ) -> torch.Tensor:
        """``scores`` [a, I] of ``C`` alone plus the head on the rows never trained,
        ``T * local-scale`` (zero without ``T``)."""
        initial = self.initial
        if initial is None:
            return scores
        table = torch.from_numpy(initial).to(scores.device)
        local = linear_logits_all(table, params["score-weight"], None)
        return scores + local * (params[SCALE].unsqueeze(1) if SCALE in params else 1.0)

    def begin(self, params: dict[str, torch.Tensor], owner: torch.Tensor) -> None:
        """The round's rows take their values (times each owner's factor)."""
        self.training = True
        if SCALE in params and LOCAL in params:
            params[LOCAL] *= params[SCALE][owner].unsqueeze(1)

    def end(self, params: dict[str, torch.Tensor], context: RoundContext) -> None:
        """The factor takes the round's, and the rows are divided by it again."""
        self.training = False
        if SCALE not in params or LOCAL not in params:
            return
        scale = params[SCALE].double()
        if LOCAL in context.row_decay:
            scale = scale * torch.exp(context.row_decay[LOCAL])
        params[SCALE] = scale.to(params[SCALE].dtype)
        counts = torch.diff(context.row_offsets)
        owner = torch.repeat_interleave(torch.arange(len(counts), device=counts.device), counts)
        params[LOCAL] /= params[SCALE][owner].unsqueeze(1)
