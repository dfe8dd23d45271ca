"""Local optimisers of a phase: plain SGD (Adam for private parameters that carry Adam
state), and SAM as a wrapper around it.

SAM has two modes (``sam-mode``). ``joint``: one gradient with both groups of parameters
perturbed at once (two gradient evaluations a step). ``hierarchical`` (FedRecGEL's reference
code): the shared gradient is taken with only the shared group perturbed and the private
gradient with only the private group perturbed, both perturbations from the same base
gradient (three evaluations).

Both work on the batched parameters of :mod:`fedrec_flwr.methods.base`: per-user tensors
[a, ...] gathered by ``step.users`` and the flat item-row table, whose gradient arrives per
batch entry [a, B, r] and is applied with ``index_add`` (a row sampled twice moves by the sum
of its entries' gradients). The local schedule (:mod:`fedrec_flwr.node.schedule`) scales each
user's rates by ``step.lr_scale`` and adds weight decay; SAM's radii are not scaled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import ClassVar

import torch

from fedrec_flwr.methods import Method, Plugin, enabled_plugins
from fedrec_flwr.methods.adam_state import ADAM_STEPS, adam_moment_names
from fedrec_flwr.methods.base import ROWS, Role, RoundContext, Step
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.methods.parts import OuterRows
from fedrec_flwr.node.row_updates import RowAdder
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.schema import NON_NEGATIVE, Dim, Group, key

Grads = dict[str, torch.Tensor]
#: Gradients (and logits) of the phase's loss at the parameters plus ``offsets``.
GradientFn = Callable[[Grads | None], tuple[Grads, torch.Tensor]]

NORM_EPS = 1e-12


class SamMode(StrEnum):
    """``sam-mode``: where each group's SAM gradient is taken."""

    JOINT = "joint"
    HIERARCHICAL = "hierarchical"


class SamKeys(Group):
    """The SAM plug-in's keys: one radius per group of parameters (both 0: plain SGD)."""

    title = "SAM (plug-in)"
    plugin = "sam"
    search_space: ClassVar[Mapping[str, Dim]] = {
        "sam-rho-private": Dim(0.001, 0.5),
        "sam-rho-shared": Dim(0.001, 0.5),
    }

    sam_rho_private: float = key(
        default=0.0,
        help="SAM radius of the private parameters (0 = no SAM); every method, every phase",
        range=NON_NEGATIVE,
        why=" (0 = no SAM)",
    )
    sam_rho_shared: float = key(
        default=0.0,
        help="SAM radius of the shared parameters (item rows and shared-dense parameters)",
        range=NON_NEGATIVE,
        why=" (0 = no SAM)",
    )
    sam_mode: str = key(
        default="joint",
        help="`joint`: one gradient with both groups perturbed at once; `hierarchical` "
        "(FedRecGEL's reference code): the shared gradient with only the shared group "
        "perturbed, the private one with only the private group perturbed",
        choices=SamMode,
    )


class SGD:
    """``p <- p - lr * (g + weight_decay * p)`` with one learning rate per parameter name,
    times each user's ``step.lr_scale`` when the step has one. ``row_names``: flat row tables
    whose gradients arrive per batch entry (the item rows, private rows); their weight decay
    acts on every row each of the step's users holds this round (``context``'s blocks)."""

    def __init__(
        self,
        learning_rates: dict[str, float],
        row_names: tuple[str, ...] = (ROWS,),
        weight_decay: float = 0.0,
        context: RoundContext | None = None,
    ) -> None:
        self.learning_rates = learning_rates
        self.row_names = row_names
        self.weight_decay = weight_decay
        self.context = context
        self.rows = RowAdder()  # index_add_ bit for bit, faster on the CPU

    #: :meth:`apply` takes a row gradient as its factors (:class:`OuterRows`).
    takes_outer_rows = True

    def rates(self, name: str, step: Step, grad: torch.Tensor) -> float | torch.Tensor:
        """The learning rate of ``name`` at ``step``: a number, or per user [a, 1, ...]
        shaped to broadcast against ``grad`` (float32 of the float64 product)."""
        lr = self.learning_rates[name]
        if step.lr_scale is None:
            return lr
        shape = (-1,) + (1,) * (grad.dim() - 1)
        return (lr * step.lr_scale).to(grad.dtype).reshape(shape)

    def apply(
        self,
        params: dict[str, torch.Tensor],
        step: Step,
        grads: Grads,
        starts: dict[str, torch.Tensor] | None = None,
    ) -> None:
        """One update from ``grads``. ``starts``: the step's slices of row tables at the
        current parameters (``params[name][step.rows]``), where the caller holds them: a row
        update then reads them instead of gathering again (their values change)."""
        held = None  # the step's users' rows, for weight decay (one look-up per step)
        for name, grad in grads.items():
            if isinstance(grad, OuterRows) and (
                step.lr_scale is not None or name not in self.row_names
            ):
                grad = grad.tensor()  # per-user rates multiply the products
            lr = self.rates(name, step, grad)
            if name in self.row_names:
                start = (starts or {}).get(name)
                if self.weight_decay > 0 and self.learning_rates[name] > 0:
                    held = held or self.held_rows(step)
                    self.decay_rows(params[name], held, lr)
                    self.count_decay(name, step, lr)
                    start = None  # the decay moved the rows
                if isinstance(grad, OuterRows):  # each product taken where it is added
                    self.rows.add_outer_(params[name], step.rows.reshape(-1), grad, -float(lr))
                    continue
                if isinstance(lr, torch.Tensor):  # per-user rates (step.lr_scale): in the grad
                    grad, lr = grad * lr, 1.0
                width = grad.shape[-1]
                self.rows.add_(
                    params[name],
                    step.rows.reshape(-1),
                    grad.reshape(-1, width),
                    -lr,
                    None if start is None else start.view(-1, width),
                )
            else:
                value = params[name].index_select(0, step.users)  # = [step.users], faster
                if self.weight_decay > 0:
                    grad = grad + self.weight_decay * value
                params[name][step.users] = value - lr * grad

    def held_rows(self, step: Step) -> tuple[torch.Tensor, torch.Tensor]:
        """(flat rows the step's users hold this round, index of each row's user)."""
        if self.context is None:
            raise ValueError("weight decay on item rows needs the round's context (its blocks)")
        return self.context.held_rows(step.users)

    def decay_rows(
        self, table: torch.Tensor, held: tuple[torch.Tensor, torch.Tensor], lr: float | torch.Tensor
    ) -> None:
        """``p <- p - lr * weight_decay * p`` on the ``held`` rows, before the gradient is
        added (the decay reads the rows the gradient was taken at)."""
        rows, owner = held
        rate = lr * self.weight_decay
        if isinstance(rate, torch.Tensor):
            rate = rate.reshape(-1, 1)[owner]
        table.index_add_(0, rows, table.index_select(0, rows).mul_(-rate))

    def count_decay(self, name: str, step: Step, lr: float | torch.Tensor) -> None:
        """Add the step's ``log(1 - lr * weight_decay)`` to each of its users' in the
        context's ``row_decay[name]`` (the factor the rows it does not hold would take:
        ``weight-decay-rows = "all"``)."""
        if self.context is None:
            return
        users = len(self.context.sample_counts)
        logs = self.context.row_decay.setdefault(
            name, torch.zeros(users, dtype=torch.float64, device=step.users.device)
        )
        rate = torch.as_tensor(lr, dtype=torch.float64).reshape(-1) * self.weight_decay
        logs.index_add_(0, step.users, torch.log1p(-rate).expand(len(step.users)))

    def step(self, params: dict[str, torch.Tensor], step: Step, gradients: GradientFn):
        """One update; returns the logits at the starting point (for the train loss)."""
        grads, logits = gradients(None)
        self.apply(params, step, grads, getattr(gradients, "starts", None))
        return logits


#: Adam's constants for the private parameters (PyTorch's defaults).
ADAM_BETA1, ADAM_BETA2, ADAM_EPS = 0.9, 0.999, 1e-8


class PrivateAdam(SGD):
    """SGD, except that a private parameter with Adam moments among the parameters
    (:func:`adam_moment_names`) steps with Adam (PyTorch's update), its state kept per user
    across rounds: the step count ``ADAM_STEPS`` counts the user's own steps."""

    def __init__(
        self,
        learning_rates: dict[str, float],
        row_names: tuple[str, ...],
        adam_names: tuple[str, ...],
        weight_decay: float = 0.0,
        context: RoundContext | None = None,
    ) -> None:
        super().__init__(learning_rates, row_names, weight_decay, context)
        self.adam_names = adam_names

    def apply(
        self,
        params: dict[str, torch.Tensor],
        step: Step,
        grads: Grads,
        starts: dict[str, torch.Tensor] | None = None,
    ) -> None:
        plain = {n: g for n, g in grads.items() if n not in self.adam_names}
        super().apply(params, step, plain, starts)
        adam = [n for n in grads if n in self.adam_names]
        if not adam:
            return
        steps = params[ADAM_STEPS][step.users] + 1
        bias1, bias2 = 1 - ADAM_BETA1**steps, (1 - ADAM_BETA2**steps).sqrt()
        for name in adam:
            grad, first, second = grads[name], *adam_moment_names(name)
            if self.weight_decay > 0:  # torch.optim.Adam's weight_decay: L2 on the gradient
                grad = grad + self.weight_decay * params[name][step.users]
            shape = (-1,) + (1,) * (grad.dim() - 1)
            m = params[first][step.users] * ADAM_BETA1 + (1 - ADAM_BETA1) * grad
            v = params[second][step.users] * ADAM_BETA2 + (1 - ADAM_BETA2) * grad * grad
            denom = v.sqrt() / bias2.reshape(shape) + ADAM_EPS
            size = self.rates(name, step, grad) / bias1.reshape(shape)
            params[name][step.users] = params[name][step.users] - size * m / denom
            params[first][step.users], params[second][step.users] = m, v
        params[ADAM_STEPS][step.users] = steps


class SAM:
    """Sharpness-aware minimisation (Foret et al. 2021) around an inner optimiser.

    From the base gradient ``g``, each group of parameters is moved by ``rho * g / ||g||``
    with its own radius and its own norm **per user**: the private group (``rho_private``)
    and the shared group (item rows and shared-dense parameters, ``rho_shared``). The
    gradient taken at the perturbed point is applied to the unperturbed parameters by the
    inner optimiser. ``joint``: one gradient with every group perturbed; ``hierarchical``:
    each perturbed group's gradient with only that group perturbed (a group with radius 0
    keeps its base gradient). With both radii 0 it is the inner optimiser exactly.
    """

    def __init__(
        self,
        inner: SGD,
        roles: dict[str, Role],
        rho_private: float,
        rho_shared: float,
        mode: str = SamMode.JOINT,
    ):
        self.inner = inner
        self.roles = roles
        self.rho = {"private": rho_private, "shared": rho_shared}
        self.mode = SamMode(mode)

    def group(self, name: str) -> str:
        private = self.roles[name] in (Role.PRIVATE, Role.PRIVATE_ROWS)
        return "private" if private else "shared"

    def step(self, params: dict[str, torch.Tensor], step: Step, gradients: GradientFn):
        grads, logits = gradients(None)
        if any(self.rho[self.group(name)] > 0 for name in grads):
            offsets = self.perturbation(step, grads)
            if self.mode is SamMode.JOINT:
                grads, _ = gradients(offsets)
            else:
                grads = self.per_group_gradients(grads, offsets, gradients)
        self.inner.apply(params, step, grads, getattr(gradients, "starts", None))
        return logits

    def per_group_gradients(self, base: Grads, offsets: Grads, gradients: GradientFn) -> Grads:
        """Hierarchical SAM: each perturbed group's gradient at the point where only that
        group is moved (shared first, as the reference code does); the others keep ``base``."""
        grads = dict(base)
        for group in ("shared", "private"):
            moved = {name: offset for name, offset in offsets.items() if self.group(name) == group}
            if not moved:
                continue
            at, _ = gradients(moved)
            grads.update({name: g for name, g in at.items() if self.group(name) == group})
        return grads

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


def plain_optimizer(
    method: Method, weight_decay: float = 0.0, context: RoundContext | None = None
) -> SGD:
    """SGD with the method's learning rates (Adam for the private parameters that have Adam
    state beside them) and ``weight_decay`` (item rows: over ``context``'s blocks)."""
    roles = layout(method).roles
    learning_rates = {name: method.learning_rate(name) for name in roles}
    adam = tuple(name for name in roles if adam_moment_names(name)[0] in roles)
    rows = layout(method).rows
    if adam:
        return PrivateAdam(learning_rates, rows, adam, weight_decay, context)
    return SGD(learning_rates, rows, weight_decay, context)


def local_optimizer(
    method: Method, config: RunGroups, context: RoundContext | None = None
) -> SGD | SAM:
    """The node's local optimiser: :func:`plain_optimizer` (``weight-decay``), passed
    through every enabled plug-in that acts on the local update (SAM wraps it)."""
    optimizer = plain_optimizer(method, config.schedule.weight_decay, context)
    for plugin in enabled_plugins(config, "local_update"):
        if (wrap := plugin.local_update) is not None:
            optimizer = wrap(config, method, optimizer)
    return optimizer


def sam_enabled(config: RunGroups) -> bool:
    """Is SAM on: a positive radius?"""
    sam = config.group(SamKeys)
    return sam.sam_rho_private > 0 or sam.sam_rho_shared > 0


def with_sam(config: RunGroups, method: Method, inner: SGD) -> SAM:
    """``inner`` wrapped in SAM with the run's radii and ``sam-mode``."""
    sam = config.group(SamKeys)
    return SAM(inner, layout(method).roles, sam.sam_rho_private, sam.sam_rho_shared, sam.sam_mode)


#: Sharpness-aware local steps, one radius for private and one for shared parameters.
SAM_PLUGIN = Plugin(
    name="sam",
    paper="Foret et al., ICLR 2021",
    enabled=sam_enabled,
    local_update=with_sam,
    keys=(SamKeys,),
    presets=("sam", "nosam"),
)
