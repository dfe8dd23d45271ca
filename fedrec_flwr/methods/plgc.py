"""PLGC (Zhao et al. 2025): personalised local-global collaboration, as a plug-in on any
method with personal item rows. Our interpretation of the abstract; ``docs/plgc.md`` gives
the equations and the choices.

The device keeps the received global rows ``G`` frozen (role ``global-rows``) beside its
trainable local rows ``L`` (the base method's item representation: PFedRec's personal rows,
which persist across rounds under ``plgc-persist``; FedRAP's ``D_u + C``). The score function
reads ``alpha_u * L + (1 - alpha_u) * G``; ``alpha_u`` (a private, untrained parameter) is set
at the end of each round's local update from the empirical NTK of the score function on the
user's rows (``plgc-alpha = "ntk"``) and used in evaluation and the next round, or fixed
(``plgc-alpha = "0.5"``). A Barlow-Twins loss between the two views of the batch's items
(weight ``plgc-decorrelation``) decorrelates the features.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import ClassVar

import numpy as np
import torch

from fedrec_flwr.methods.base import ROWS, Method, Role, RoundContext, Step
from fedrec_flwr.methods.capabilities import init_private_from
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.methods.plugin import MethodPlugin, Plugin
from fedrec_flwr.methods.plugins import DualKeys
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.schema import NON_NEGATIVE, ConfigError, Dim, Group, key

GLOBAL = "plgc-global"  # G: the received global rows, frozen
ALPHA = "plgc-alpha"  # alpha_u, per user
EPS = 1e-8
NTK = "ntk"


def check_alpha(value: str) -> None:
    """``plgc-alpha``: ``"ntk"`` or a number in [0, 1]."""
    if value == NTK:
        return
    try:
        alpha = float(value)
    except ValueError:
        alpha = -1.0
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(
            f"plgc-alpha='{value}' must be 'ntk' or a number in [0, 1] "
            "(the fixed weight of the local rows)."
        )


def alpha_from_number(value: object) -> str | None:
    """``plgc-alpha = 0.5`` (a number, e.g. on the command line) as the string ``'0.5'``."""
    return repr(float(value)) if isinstance(value, int | float) else None


class PlgcKeys(Group):
    title = "PLGC (plug-in)"
    plugin = "plgc"
    search_space: ClassVar[Mapping[str, Dim]] = {
        "plgc-alpha": Dim(choices=(NTK, "0.25", "0.5", "0.75")),
        "plgc-decorrelation": Dim(choices=(0.0, 0.001, 0.01)),
    }

    plgc: bool = key(
        default=False,
        help="PLGC plug-in (`docs/plgc.md`) on a method with personal rows: `pfedrec`, `fedrap`, "
        'or `personalization = "dual"`; refused otherwise',
    )
    plgc_alpha: str = key(
        default=NTK,
        help="weight of the local rows in `alpha * L + (1 - alpha) * G`: `ntk` (per user and "
        'round, from the empirical NTK) or a fixed number in [0, 1], e.g. `"0.5"`',
        check=check_alpha,
        parse=alpha_from_number,
    )
    plgc_decorrelation: float = key(
        default=0.0,
        help="weight of PLGC's redundancy-reduction loss between the local and global views",
        range=NON_NEGATIVE,
        why=" (0 = off)",
    )
    plgc_persist: bool = key(
        default=False,
        help="`true` keeps every local row a user has trained and starts its next rounds from "
        "them (else a round starts from the global rows, as the base method; see "
        "`docs/plgc.md`)",
    )


def fixed_alpha(keys: PlgcKeys) -> float | None:
    """The fixed alpha of ``plgc-alpha``, or None for ``"ntk"``."""
    return None if keys.plgc_alpha == NTK else float(keys.plgc_alpha)


def kernel_alignment(rows: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Centred kernel-target alignment of the linear kernel ``rows rows^T`` with ``labels``:
    ``||R_c^T y_c||^2 / (||R_c^T R_c||_F ||y_c||^2)``, in [0, 1] (0 when undefined)."""
    rows = rows.double() - rows.double().mean(0)
    labels = labels.double() - labels.double().mean()
    num = (rows.T @ labels).pow(2).sum()
    den = torch.linalg.matrix_norm(rows.T @ rows) * labels.pow(2).sum()
    return num / den if den > 0 else torch.zeros((), dtype=torch.float64)


def ntk_alpha(local: torch.Tensor, global_: torch.Tensor, labels: torch.Tensor) -> float:
    """alpha = A_L / (A_L + A_G) from the two views' kernel alignments (0.5 if both 0)."""
    a_local, a_global = kernel_alignment(local, labels), kernel_alignment(global_, labels)
    total = float(a_local + a_global)
    return 0.5 if total <= 0 else float(a_local) / total


def decorrelation_loss(local: torch.Tensor, global_: torch.Tensor, mask: torch.Tensor):
    """Per-user Barlow-Twins loss between views [a, B, r] over the real entries ``mask``
    [a, B]: ``sum_k (1 - C_kk)^2 + (1/r) sum_{k != l} C_kl^2`` with ``C`` the
    cross-correlation of the standardised features. Returns [a]."""
    m = mask.unsqueeze(-1)
    n = mask.sum(1).clamp_min(1.0).reshape(-1, 1, 1)

    def standardised(x):
        mean = (x * m).sum(1, keepdim=True) / n
        centred = (x - mean) * m
        std = (centred.pow(2).sum(1, keepdim=True) / n + EPS).sqrt()
        return centred / std

    corr = torch.einsum("abk,abl->akl", standardised(local), standardised(global_)) / n
    diag = torch.diagonal(corr, dim1=-2, dim2=-1)
    on = (1.0 - diag).pow(2).sum(-1)
    off = corr.pow(2).sum((-2, -1)) - diag.pow(2).sum(-1)
    return on + off / local.shape[-1]


class PLGC(MethodPlugin):
    """``base`` with PLGC: same name, roles plus the global view and alpha; every member it
    does not override is the base method's (its ``rowwise_logits`` holds: the mix is
    elementwise)."""

    def __init__(self, config: RunGroups, num_items: int, base: Method) -> None:
        super().__init__(config, num_items, base)
        self.alpha = fixed_alpha(config.group(PlgcKeys))

    # ----------------------------------------------------------------- roles
    @property
    def train_from_personal(self) -> bool:
        """``plgc-persist``: the local rows persist across rounds (else, as the base method,
        a round starts them from the global rows)."""
        return layout(self.base).personal_rows and self.config.group(PlgcKeys).plgc_persist

    def init_private(self, users: np.ndarray) -> dict[str, torch.Tensor]:
        start = 0.5 if self.alpha is None else self.alpha
        return {
            **self.base.init_private(users),
            ALPHA: torch.full((len(users),), start, dtype=torch.float32),
        }

    def init_private_from(self, users: np.ndarray, data) -> dict[str, torch.Tensor]:
        base = init_private_from(self.base, users, data)
        return {**base, ALPHA: self.init_private(users)[ALPHA]}

    def roles(self) -> dict[str, Role]:
        return {**self.base.roles(), GLOBAL: Role.GLOBAL_ROWS, ALPHA: Role.PRIVATE}

    def learning_rate(self, name: str) -> float:
        return 0.0 if name in (GLOBAL, ALPHA) else self.base.learning_rate(name)

    # ----------------------------------------------------------------- hooks
    def begin_local_update(self, params: dict[str, torch.Tensor], context: RoundContext) -> None:
        """The base method's hook; a fixed alpha is set (the NTK one is the user's last)."""
        self.base.begin_local_update(params, context)
        if self.alpha is not None:
            params[ALPHA].fill_(self.alpha)

    def end_local_update(self, params: dict[str, torch.Tensor], context: RoundContext) -> None:
        """The base method's hook, then each user's NTK alpha from its tuned local rows and
        the frozen global ones: used in evaluation and in the user's next round."""
        self.base.end_local_update(params, context)
        if self.alpha is not None or GLOBAL not in params:
            return
        rows = {n: params[n] for n in layout(self.base).rows if n in params}
        local = self.base.represent(rows, params[ROWS])
        offsets = context.row_offsets.tolist()
        alphas = [
            ntk_alpha(local[lo:hi], params[GLOBAL][lo:hi], context.row_labels[lo:hi])
            for lo, hi in itertools.pairwise(offsets)
        ]
        params[ALPHA].copy_(torch.tensor(alphas, dtype=params[ALPHA].dtype))

    # --------------------------------------------------------------- scoring
    def represent(self, params: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        """``alpha * L + (1 - alpha) * G`` (``L`` alone when no global view is given)."""
        local = self.base.represent(params, rows)
        if GLOBAL not in params:
            return local
        alpha = params[ALPHA].reshape(-1, *[1] * (local.dim() - 1))
        return alpha * local + (1.0 - alpha) * params[GLOBAL]

    def logits(self, params: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        """The base score function on the mix. (``logits_all``, the base method's: items
        without personal rows have ``L = G`` (PFedRec) or ``D_u = 0`` (FedRAP), so the mix is
        the global row.)"""
        return self.base.score(params, self.represent(params, rows))

    def loss(self, step: Step, params, rows: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """The base loss plus ``plgc-decorrelation`` times the redundancy-reduction loss."""
        loss = self.base.loss(step, params, rows, logits)
        weight = self.config.group(PlgcKeys).plgc_decorrelation
        if weight > 0 and GLOBAL in params:
            local = self.base.represent(params, rows)
            per_user = decorrelation_loss(local, params[GLOBAL].detach(), step.weights > 0)
            loss = loss + weight * per_user.sum()
        return loss

    def closed_form_grads(self, step, params, rows, wrt):
        return None  # autograd through the mix and the decorrelation loss


def check_applies(config: RunGroups, method: Method) -> None:
    """PLGC needs personal item rows (kept rows, or private rows such as FedRAP's ``D_u``)."""
    if not (layout(method).personal_rows or layout(method).private_rows):
        raise ConfigError(
            f"plgc = true needs a method with personal item rows; method '{method.name}'"
            f" with personalization='{config.group(DualKeys).personalization}' has none. Use "
            "pfedrec or fedrap, or personalization='dual' on fedmf, fedncf or fedrecon."
        )


def plgc_enabled(config: RunGroups) -> bool:
    return config.group(PlgcKeys).plgc


PLUGIN = Plugin(
    name="plgc",
    paper="Zhao et al. 2025 (our interpretation, docs/plgc.md)",
    enabled=plgc_enabled,
    check=check_applies,
    method=PLGC,
    keys=(PlgcKeys,),
    presets=("plgc",),
)
