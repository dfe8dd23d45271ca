"""FedRAP (Li, Long and Zhou, ICLR 2024): federated recommendation with additive
personalisation.

Per user: a private score head (linear ``d -> 1`` with a bias, one shared initialisation, as
PFedRec's) and a private additive item table ``D_u`` (role ``private-rows``: the device
keeps the rows the user has trained, across rounds, and never uploads them; rows it never
trained are zero). Shared: the global item table ``C`` (the item rows, uploaded and averaged
row by row). Score of item ``i``: ``head_u(D_u[i] + C[i])``.

Objective of user u in round ``a`` (0-based: the first round is fully personalised):

    BCE - lambda_a * dist(D_u, C) + mu_a * ||C||_1,
    lambda_a = tanh(a / 10) * v1,  mu_a = tanh(a / 10) * v2   (``fedrap-schedule = "tanh"``)

(``"constant"``: ``v1`` and ``v2`` from the first round, what the reference code runs). The
minus sign is the paper's: it pushes the local and global views apart. ``dist`` is the
squared Frobenius distance (``fedrap-distance = "squared"``, the paper), or its bounded form
``sum_i kappa * tanh(||D_u[i] - C[i]||^2 / kappa)`` (``"bounded"``, ``kappa`` =
``fedrap-distance-bound``), whose push vanishes once a row is ``sqrt(kappa)`` away.

Each mini-batch step is a forward-backward splitting of that objective:

1. the BCE step on the head, ``D_u`` and ``C`` together (the local optimiser: SGD, or SAM);
2. a gradient step of ``-lambda_a * dist`` on ``D_u`` and ``C`` over the regularised rows;
3. the proximal step of ``mu_a * ||C||_1`` on ``C`` over the same rows: a soft threshold,
   which makes exact zeros (plain SGD on ``|x|`` oscillates around zero and never reaches it).

The regularised rows (``fedrap-reg-rows``): ``held``, every row the user holds this round
(its positives and this round's negatives), once per epoch after the user's last batch, with
the epoch's weight ``b_u / n_u`` (``b_u`` batches of its ``n_u`` samples: about
``1 / batch-size``, the weight of one sample's BCE); applying it at every step with weight
``1 / n_u`` has the same first-order effect but costs ``b_u`` passes over the held rows (10x
slower rounds on Last.fm-2K, whose heaviest users take 50 batches). ``batch``: after every
step, only the rows of the step's batch, each entry weighted like its BCE term
(``1 / batch``): what the reference code does. Both give the regularisers the same expected
weight per epoch; ``held`` also reaches the rows a batch does not hold.

Under the local schedule (``lr-decay``, ``lr-step-decay``: :mod:`fedrec_flwr.node.schedule`)
the regularisers' steps take the decayed rates of the BCE step, as the reference code's
regularisers, part of its loss, do: ``batch`` the rate of the user's step, ``held`` the mean
of its rates over the epoch's steps (the same first-order effect).

Rows of ``C`` whose max ``|value|`` is at or below ``fedrap-zero-threshold`` count as zero:
they travel as ids only, both ways, and the server snaps them to exact zeros.
"""

from __future__ import annotations

import math
from enum import StrEnum

import numpy as np
import torch

from fedrec_flwr.methods.base import (
    ROWS,
    Method,
    Phase,
    Role,
    RoundContext,
    Step,
    bce_grad,
    linear_head_init,
    linear_logits,
    linear_logits_all,
)
from fedrec_flwr.methods.card import LR, MethodCard
from fedrec_flwr.methods.fedrap_local import LOCAL, LocalInit, LocalRows
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.schema import NON_NEGATIVE, POSITIVE, Dim, Group, key

SCORE = ("score-weight", "score-bias")


class Schedule(StrEnum):
    """``fedrap-schedule``: how ``lambda_a`` and ``mu_a`` grow over the rounds."""

    TANH = "tanh"
    CONSTANT = "constant"


class RegRows(StrEnum):
    """``fedrap-reg-rows``: the rows the regularisers see."""

    HELD = "held"
    BATCH = "batch"


class Distance(StrEnum):
    """``fedrap-distance``: the distance between ``D_u`` and ``C``."""

    SQUARED = "squared"
    BOUNDED = "bounded"


OFF = " (0 = off)"


class FedRapKeys(Group):
    title = "FedRAP"

    fedrap_v1: float = key(
        default=0.1,
        help="weight `v1` of the distance term, `lambda_a = tanh(a/10) * v1` (minus sign: pushes "
        "`D_u` and `C` apart)",
        range=NON_NEGATIVE,
        why=OFF,
    )
    fedrap_v2: float = key(
        default=0.1,
        help="weight `v2` of the L1 term on `C`, `mu_a = tanh(a/10) * v2`, applied as a proximal "
        "soft threshold",
        range=NON_NEGATIVE,
        why=OFF,
    )
    fedrap_schedule: str = key(
        default=Schedule.TANH.value,
        help="`tanh`: the paper's curriculum over the 0-based round `a`; `constant`: `v1`, `v2` "
        "from round 1 (what FedRAP's code runs)",
        choices=Schedule,
    )
    fedrap_reg_rows: str = key(
        default=RegRows.HELD.value,
        help="where the regularisers are evaluated: `held`, every row the user holds this round; "
        "`batch`, only the rows of the current batch (the reference code)",
        choices=RegRows,
    )
    fedrap_distance: str = key(
        default=Distance.SQUARED.value,
        help="`squared`: the paper's `||D_u - C||_F^2` (unbounded: diverges); `bounded`: "
        "`sum_i kappa * tanh(||D_u[i] - C[i]||^2 / kappa)`",
        choices=Distance,
    )
    fedrap_distance_bound: float = key(
        default=1.0,
        help="`kappa` of the bounded distance (squared distance per row at which the push fades)",
        range=POSITIVE,
    )
    fedrap_zero_threshold: float = key(
        default=0.0,
        help="rows of `C` whose max abs value is at or below it count as zero: not sent (ids "
        "only), snapped to 0 by the server",
        range=NON_NEGATIVE,
        why=OFF,
    )
    fedrap_local_init: str = key(
        default=LocalInit.ZERO.value,
        help="`D_u`'s rows before the user trains them: `zero`; `normal`, one N(0, "
        "init-std^2) table (keyed by the seed) that every user starts from, as the reference "
        "code copies its one N(0, 1) table to every user",
        choices=LocalInit,
    )
    fedrap_local_lr_ratio: float = key(
        default=1.0,
        help="learning rate of `D_u` over that of `C` (`item-lr`; 1.0 as FedRAP's code)",
        range=NON_NEGATIVE,
        why=" (0: D_u is never trained)",
    )


def fedrap_weights(keys: FedRapKeys, server_round: int) -> tuple[float, float]:
    """(lambda_a, mu_a) of ``server_round`` (1-based; ``a = server_round - 1``)."""
    if keys.fedrap_schedule == "constant":
        return keys.fedrap_v1, keys.fedrap_v2
    ramp = math.tanh((server_round - 1) / 10.0)
    return ramp * keys.fedrap_v1, ramp * keys.fedrap_v2


class FedRAP(Method):
    name = "fedrap"
    rowwise_logits = True  # linear_logits: a product and a sum over each row
    linear_score_head = True  # heads.linear_head_init's head: score-init acts on it

    def __init__(self, config: RunGroups, num_items: int) -> None:
        super().__init__(config, num_items)
        self.keys = config.group(FedRapKeys)
        self.weights = fedrap_weights(self.keys, 1)
        schedule = config.schedule
        self.local = LocalRows(  # how D_u is stored on the device
            self.keys.fedrap_local_init,
            schedule.weight_decay_rows == "all" and schedule.weight_decay > 0,
            config.training.seed,
            config.learning.init_std,
            (num_items, self.dim),
        )

    def init_private(self, users: np.ndarray) -> dict[str, torch.Tensor]:
        """One shared initialisation for every user: PyTorch's nn.Linear(d, 1) default (the
        same draw as PFedRec's), or under ``score-init = "per-user"`` one keyed draw per
        user; each user's factor on ``D_u`` (1) when it is scaled."""
        return {**linear_head_init(self.config, users, self.dim), **self.local.scale_init(users)}

    def private_rows_in(self, name: str, rows: np.ndarray, items: np.ndarray) -> np.ndarray:
        return self.local.loaded(rows, items) if name == LOCAL else rows

    def private_rows_out(self, name: str, rows: np.ndarray, items: np.ndarray) -> np.ndarray:
        return self.local.stored(rows, items) if name == LOCAL else rows

    def roles(self) -> dict[str, Role]:
        roles = super().roles()
        roles[LOCAL] = Role.PRIVATE_ROWS
        return roles

    @property
    def zero_threshold(self) -> float:
        return self.keys.fedrap_zero_threshold

    def phases(self) -> tuple[Phase, ...]:
        return (Phase("joint", (*SCORE, LOCAL, ROWS)),)

    def learning_rate(self, name: str) -> float:
        """``D_u`` learns at ``fedrap-local-lr-ratio`` times the item rows' rate."""
        rate = super().learning_rate(name)
        return rate * self.keys.fedrap_local_lr_ratio if name == LOCAL else rate

    # -------------------------------------------------------------- scoring
    def represent(self, params: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        return rows + self.local.values(params) if LOCAL in params else rows

    def score(self, params: dict[str, torch.Tensor], reps: torch.Tensor) -> torch.Tensor:
        return linear_logits(reps, params["score-weight"], params["score-bias"])

    def logits(self, params: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        return self.score(params, self.represent(params, rows))

    def logits_all(self, params: dict[str, torch.Tensor], table: torch.Tensor) -> torch.Tensor:
        """Scores from ``C`` and ``D_u``'s rows never trained (zero, or the initial table
        times the user's factor); evaluation rescores the rows a user holds."""
        scores = linear_logits_all(table, params["score-weight"], params["score-bias"])
        return self.local.untrained_scores(params, scores)

    def linear_head(self, params: dict[str, torch.Tensor]):
        """The head on ``C``: not the whole score when untrained rows of ``D_u`` are not
        zero (``fedrap-local-init = "normal"``: then None, scores come from ``logits_all``)."""
        if self.local.initial is not None:
            return None
        return params["score-weight"], params["score-bias"]

    def closed_form_grads(self, step: Step, params, rows, wrt):
        """Gradients of the BCE (the regularisers are separate steps, see ``after_step``)."""
        weight = params["score-weight"]
        reps = self.represent(params, rows)
        logits = linear_logits(reps, weight, params["score-bias"])
        grad_logits = bce_grad(logits, step)
        grads = {}
        if "score-weight" in wrt:
            grads["score-weight"] = (grad_logits.unsqueeze(-1) * reps).sum(1)
        if "score-bias" in wrt:
            grads["score-bias"] = grad_logits.sum(-1)
        grad_rows = grad_logits.unsqueeze(-1) * weight.unsqueeze(1)
        if ROWS in wrt:
            grads[ROWS] = grad_rows
        if LOCAL in wrt:
            grads[LOCAL] = grad_rows.clone()
        return grads, logits

    # ----------------------------------------------------------- regularisers
    def begin_local_update(self, params: dict[str, torch.Tensor], context: RoundContext) -> None:
        self.weights = fedrap_weights(self.keys, context.server_round)
        counts = torch.diff(context.row_offsets)
        owner = torch.repeat_interleave(torch.arange(len(counts), device=counts.device), counts)
        self.local.begin(params, owner)  # D_u's values for the round's steps
        # held: a user's rows are regularised once per epoch, after its last batch, with the
        # epoch's weight (its batches / its samples, about 1 / batch-size).
        self._batches = torch.ceil(
            context.sample_counts / self.config.training.batch_size
        ).clamp_min(1)
        self._seen = torch.zeros_like(self._batches)
        self._row_weight = (self._batches / context.sample_counts)[owner]
        # held: the sum of each user's learning-rate factors (step.lr_scale) over the epoch
        self._owner, self._scales = owner, torch.zeros_like(self._batches, dtype=torch.float64)

    def end_local_update(self, params: dict[str, torch.Tensor], context: RoundContext) -> None:
        self.local.end(params, context)

    def regularised_rows(
        self, step: Step, context: RoundContext
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(distinct flat rows, weight of each) the regularisers see after this step; rows
        ``None``: every row of the round, in order. Under the local schedule a weight also
        holds the factor on the learning rates (``step.lr_scale``): its user's at this step
        (``batch``), the mean of its user's over the epoch's steps (``held``)."""
        scale = step.lr_scale
        if self.keys.fedrap_reg_rows == "held":
            self._seen[step.users] += 1
            if scale is not None:
                self._scales[step.users] += scale
            done = step.users[self._seen[step.users] % self._batches[step.users] == 0]
            if len(done) == len(context.sample_counts):
                rows, owner, weight = None, self._owner, self._row_weight
            else:
                rows, owner = context.held_rows(done)
                owner, weight = done[owner], self._row_weight[rows]
            if scale is not None:  # the epoch's mean factor; the next epoch starts afresh
                factor = self._scales / self._batches
                self._scales[done] = 0.0
                weight = (weight * factor[owner]).to(weight.dtype)
            return rows, weight
        real = step.weights > 0  # batch: an entry's weight is its BCE weight; repeats add up
        entries = step.weights if scale is None else step.weights * scale.unsqueeze(1)
        rows, inverse = torch.unique(step.rows[real], return_inverse=True)
        weight = torch.zeros(len(rows), dtype=step.weights.dtype, device=rows.device)
        return rows, weight.index_add_(0, inverse, entries[real].to(weight.dtype))

    def after_step(
        self, params: dict[str, torch.Tensor], step: Step, phase: Phase, context: RoundContext
    ) -> None:
        """The regularisers' step after the BCE step: ``-lambda * dist`` on ``D_u`` and ``C``,
        then the soft threshold of ``mu * ||C||_1`` on ``C``, over the regularised rows."""
        if ROWS not in phase.params:
            return
        lam, mu = self.weights
        if lam == 0 and mu == 0:
            return
        rows, weight = self.regularised_rows(step, context)
        if rows is not None and not len(rows):
            return
        lr_c = self.learning_rate(ROWS)
        local = LOCAL in params and lam > 0
        table = params[ROWS] if rows is None else params[ROWS][rows]
        if local:
            d = params[LOCAL] if rows is None else params[LOCAL][rows]
            diff = d - table
            coef = 2.0 * lam * weight
            if self.keys.fedrap_distance == "bounded":
                coef = coef * self.distance_slope((diff * diff).sum(-1))
            push = diff.mul_(coef.unsqueeze(-1))  # = -d(-lam dist)/dD = d(-lam dist)/dC
            d.add_(push, alpha=self.learning_rate(LOCAL))
            table.sub_(push, alpha=lr_c)
        if mu > 0:  # soft threshold, x - clip(x, -t, t): exact zeros
            shrink = (lr_c * mu * weight).unsqueeze(-1)
            table.sub_(torch.minimum(torch.maximum(table, -shrink), shrink))
        if rows is not None:
            params[ROWS][rows] = table
            if local:
                params[LOCAL][rows] = d

    def distance_slope(self, squared: torch.Tensor) -> torch.Tensor:
        """d dist / d ||D_u[i] - C[i]||^2 per row: 1 (squared), sech^2(x / kappa) (bounded)."""
        if self.keys.fedrap_distance == "squared":
            return torch.ones_like(squared)
        kappa = self.keys.fedrap_distance_bound
        return 1.0 - torch.tanh(squared / kappa).pow(2)


CARD = MethodCard(
    FedRAP,
    title="FedRAP",
    paper="Li, Long and Zhou, ICLR 2024",
    keys=FedRapKeys,
    search_space={
        "lr": LR,
        "item-lr": Dim(0.05, 4.0),
        "fedrap-v1": Dim(0.001, 1.0),
        "fedrap-v2": Dim(0.0001, 0.1),
        "fedrap-local-lr-ratio": Dim(0.0001, 1.0),
    },
    golden=("plgc",),
    order=6,
)
