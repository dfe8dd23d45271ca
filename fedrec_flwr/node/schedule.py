"""The local optimiser's schedule: L2 weight decay, and learning-rate decay over the rounds
and over a user's steps within a round.

FedRAP's reference code trains each client with ``torch.optim.SGD(weight_decay=...)`` and an
``ExponentialLR`` stepped after every batch, both made afresh every round, and multiplies the
learning rates by a constant after every round. These keys give that schedule to every
method's local optimiser (:mod:`fedrec_flwr.node.optim`); their defaults change nothing (the
optimiser then takes exactly the steps it takes without them).

At the ``s``-th local step of user ``u`` in round ``r`` (1-based; ``s`` 0-based, counted over
every stage, epoch and batch of the user's round, phases of one batch sharing it) every local
learning rate ``lr`` (the optimiser's, and those of the steps a method takes outside it:
FedRAP's regularisers) is ``lr * lr-decay ** (r - 1) * lr-step-decay ** s``. Users with more
batches take more steps and reach smaller rates, each on its own count, exactly as if each
trained alone. Weight decay adds ``weight-decay * p`` to the gradient of every trained
parameter ``p`` (PyTorch's ``SGD`` and ``Adam`` ``weight_decay``); item rows are row-sparse
here, so it acts on every row the user holds this round, at each of its steps (see
``weight-decay``'s help).
"""

from __future__ import annotations

import dataclasses

import torch

from fedrec_flwr.methods.base import RoundContext, Step
from fedrec_flwr.run_keys import RunGroups


class LocalSchedule:
    """Each user's learning-rate multiplier at each of its local steps of one round:
    ``lr-decay ** (round - 1) * lr-step-decay ** s``, ``s`` the user's own step count."""

    def __init__(self, lr_decay: float, lr_step_decay: float, context: RoundContext) -> None:
        self.round_scale = lr_decay ** (context.server_round - 1)
        self.step_decay = lr_step_decay
        counts = context.sample_counts
        self.steps = torch.zeros(len(counts), dtype=torch.float64, device=counts.device)

    @classmethod
    def of(cls, config: RunGroups, context: RoundContext) -> LocalSchedule | None:
        """The round's schedule; None when neither rate decays (the steps then carry no
        multiplier and the optimiser runs exactly as without these keys)."""
        schedule = config.schedule
        if schedule.lr_decay == 1.0 and schedule.lr_step_decay == 1.0:
            return None
        return cls(schedule.lr_decay, schedule.lr_step_decay, context)

    def scaled(self, step: Step) -> Step:
        """``step`` with its users' multipliers (``Step.lr_scale``, float64 [a]); counts the
        step for each of them."""
        count = self.steps[step.users]
        scale = self.round_scale * torch.pow(self.step_decay, count)
        self.steps[step.users] = count + 1
        return dataclasses.replace(step, lr_scale=scale)
