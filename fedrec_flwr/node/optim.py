"""Local optimisers of a phase: plain SGD, and SAM as a wrapper around it.

Both work on the batched parameters of :mod:`fedrec_flwr.methods.base`: per-user tensors
[a, ...] gathered by ``step.users`` and the flat item-row table, whose gradient arrives per
batch entry [a, B, r] and is applied with ``index_add`` (a row sampled twice moves by the sum
of its entries' gradients).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from fedrec_flwr.methods.base import ROWS, Role, Step
from fedrec_flwr.schema import NON_NEGATIVE, Dim, Key, KeyGroup

Grads = dict[str, torch.Tensor]
#: Gradients (and logits) of the phase's loss at the parameters plus ``offsets``.
GradientFn = Callable[[Grads | None], tuple[Grads, torch.Tensor]]

NORM_EPS = 1e-12

#: The SAM plug-in's keys: one radius per group of parameters (both 0: plain SGD).
SAM_KEYS = KeyGroup(
    title="SAM (plug-in)",
    owner=__name__,
    plugin="sam",
    keys=(
        Key(
            "sam-rho-private",
            0.0,
            "SAM radius of the private parameters (0 = no SAM); every method, every phase",
            range=NON_NEGATIVE,
            why=" (0 = no SAM)",
        ),
        Key(
            "sam-rho-shared",
            0.0,
            "SAM radius of the shared parameters (item rows and shared-dense parameters)",
            range=NON_NEGATIVE,
            why=" (0 = no SAM)",
        ),
    ),
    search_space={"sam-rho-private": Dim(0.001, 0.5), "sam-rho-shared": Dim(0.001, 0.5)},
)


class SGD:
    """``p <- p - lr * g`` with one learning rate per parameter name. ``row_names``: flat
    row tables whose gradients arrive per batch entry (the item rows, private rows)."""

    def __init__(
        self, learning_rates: dict[str, float], row_names: tuple[str, ...] = (ROWS,)
    ) -> None:
        self.learning_rates = learning_rates
        self.row_names = row_names

    def apply(self, params: dict[str, torch.Tensor], step: Step, grads: Grads) -> None:
        for name, grad in grads.items():
            lr = self.learning_rates[name]
            if name in self.row_names:
                params[name].index_add_(
                    0, step.rows.reshape(-1), grad.reshape(-1, grad.shape[-1]), alpha=-lr
                )
            else:
                params[name][step.users] = params[name][step.users] - lr * grad

    def step(self, params: dict[str, torch.Tensor], step: Step, gradients: GradientFn):
        """One update; returns the logits at the starting point (for the train loss)."""
        grads, logits = gradients(None)
        self.apply(params, step, grads)
        return logits


class SAM:
    """Sharpness-aware minimisation (Foret et al. 2021) around an inner optimiser.

    From the base gradient ``g``, each group of parameters is moved by ``rho * g / ||g||``
    with its own radius and its own norm **per user**: the private group (``rho_private``)
    and the shared group (item rows and shared-dense parameters, ``rho_shared``). The
    gradient taken at that perturbed point is applied to the unperturbed parameters by the
    inner optimiser. With both radii 0 it is the inner optimiser exactly.
    """

    def __init__(self, inner: SGD, roles: dict[str, Role], rho_private: float, rho_shared: float):
        self.inner = inner
        self.roles = roles
        self.rho = {"private": rho_private, "shared": rho_shared}

    def group(self, name: str) -> str:
        private = self.roles[name] in (Role.PRIVATE, Role.PRIVATE_ROWS)
        return "private" if private else "shared"

    def step(self, params: dict[str, torch.Tensor], step: Step, gradients: GradientFn):
        grads, logits = gradients(None)
        if any(self.rho[self.group(name)] > 0 for name in grads):
            grads, _ = gradients(self.perturbation(step, grads))
        self.inner.apply(params, step, grads)
        return logits

    def perturbation(self, step: Step, grads: Grads) -> Grads:
        """``rho * g / ||g||`` per group and per user (zero for a group with rho = 0)."""
        users = step.users.shape[0]
        sq = {g: torch.zeros(users, dtype=torch.float32, device=step.rows.device) for g in self.rho}
        rows = {}
        for name, grad in grads.items():
            group = self.group(name)
            if name in self.inner.row_names:
                rows[name] = _distinct_row_grads(step, grad)
                owner, row_grad = rows[name][1], rows[name][2]
                sq[group].index_add_(0, owner, row_grad.pow(2).sum(1))
            else:
                sq[group] += grad.pow(2).reshape(users, -1).sum(1)
        scale = {g: self.rho[g] / (sq[g].sqrt() + NORM_EPS) for g in self.rho}
        offsets: Grads = {}
        for name, grad in grads.items():
            group = self.group(name)
            if self.rho[group] == 0:
                continue
            if name in rows:
                real, owner, row_grad, inverse = rows[name]
                entries = torch.zeros_like(grad)
                entries[real] = (row_grad * scale[group][owner].unsqueeze(-1))[inverse]
                offsets[name] = entries
            else:
                offsets[name] = grad * scale[group].reshape(-1, *[1] * (grad.dim() - 1))
        return offsets


def _distinct_row_grads(step: Step, grad: torch.Tensor):
    """Per-entry row gradients [a, B, r] summed over repeated rows (padding left out).

    Returns (mask of real entries, owner user of each distinct row, its summed gradient,
    index of each real entry's distinct row).
    """
    real = step.weights > 0
    flat = step.rows[real]
    distinct, inverse = torch.unique(flat, return_inverse=True)
    summed = torch.zeros(len(distinct), grad.shape[-1], dtype=grad.dtype, device=grad.device)
    summed.index_add_(0, inverse, grad[real])
    entry_owner = torch.arange(real.shape[0], device=real.device).unsqueeze(1).expand_as(real)
    owner = torch.zeros(len(distinct), dtype=torch.long, device=real.device)
    owner[inverse] = entry_owner[real]
    return real, owner, summed, inverse


def build_optimizer(method, rho_private: float, rho_shared: float) -> SGD | SAM:
    """SGD with the method's learning rates, wrapped in SAM when a radius is positive."""
    roles = method.roles()
    inner = SGD({name: method.learning_rate(name) for name in roles}, method.row_names())
    if rho_private > 0 or rho_shared > 0:
        return SAM(inner, roles, rho_private, rho_shared)
    return inner
