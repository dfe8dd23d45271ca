"""``weight-decay-rows = "all"``: weight decay on every item row, as dense gradients apply it.

PyTorch's ``SGD(weight_decay=w)`` on an embedding table whose gradient is dense shrinks every
row by ``1 - lr * w`` at each step, the rows the user does not hold too. Here a user holds
only the rows of its round (:mod:`fedrec_flwr.node.optim` decays those at each step); a row it
does not hold takes the product of those factors over its steps, ``f_u``
(``RoundContext.row_decay``), and only that, since nothing else moves it:

- the shared table: a plain round mean of the users' full tables moves row ``i`` by
  ``(sum over its holders of (tuned - C_i) + sum over the others of (f_u - 1) C_i) / n``.
  Each holder uploads ``tuned - (f_u - 1) C_i`` (its round's rows, as sent), and the node
  reports ``row-shrink-sum``, the sum of ``1 - f_u`` over its users; the server then moves
  every row by ``- shrink C_i / n`` besides the uploads' changes
  (:meth:`~fedrec_flwr.server.model.ServerModel.apply`), which is that mean exactly;
- private rows (FedRAP's ``D_u``): the method keeps each user's factor since its first round
  (:mod:`fedrec_flwr.methods.fedrap`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import torch

from fedrec_flwr.methods.base import ROWS
from fedrec_flwr.node.round_params import host_copy
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.stages import Finish, TrainResult, UploadRound, Uploads, UploadStage


@dataclasses.dataclass
class DenseDecay(UploadStage):
    """One round's: the rows each user was sent, and the optimiser's log factors. As the
    first stage of the round's upload chain (:meth:`~fedrec_flwr.stages.UploadChain.around`)
    it changes the users' tuned rows into those they upload and adds ``row_shrink`` to the
    node's upload."""

    name: ClassVar[str] = "weight-decay-rows"

    received: np.ndarray  # the flat rows as sent (a copy: training changes the original)
    logs: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, config: RunGroups, received: torch.Tensor) -> DenseDecay | None:
        """The round's bookkeeping, or None (``weight-decay-rows = "held"``, or no decay).
        ``received`` (the rows the round starts from, on the run's device) is copied to the
        host only when the decay applies (one copy, from the device or on the host): no
        device-to-host copy of the round's rows otherwise."""
        schedule = config.schedule
        if schedule.weight_decay_rows != "all" or schedule.weight_decay <= 0:
            return None
        return cls(host_copy(received).numpy())

    def factors(self, num_users: int) -> np.ndarray:
        """``f_u`` of each of the round's users on the shared rows (1: no step decayed)."""
        if ROWS not in self.logs:
            return np.ones(num_users)
        return torch.exp(self.logs[ROWS]).cpu().numpy()

    def upload(self, tuned: np.ndarray, row_offsets: np.ndarray) -> tuple[np.ndarray, float]:
        """(each user's rows as it uploads them, ``tuned - (f_u - 1) * sent``; the sum of
        ``1 - f_u`` over the users)."""
        factors = self.factors(len(row_offsets) - 1)
        owner = np.repeat(np.arange(len(factors)), np.diff(row_offsets))
        shift = (factors[owner] - 1.0)[:, None] * self.received.astype(np.float64)
        return (tuned - shift).astype(tuned.dtype), float((1.0 - factors).sum())

    def __call__(
        self, uploads: Uploads, upload_round: UploadRound, call_next: Finish
    ) -> TrainResult:
        rows, shrink = self.upload(uploads.host_rows(), uploads.offsets)
        result = call_next(uploads.replace(rows=torch.from_numpy(rows)), upload_round)
        return dataclasses.replace(result, row_shrink=shrink)
