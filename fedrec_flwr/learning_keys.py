"""How a run's parameters learn: the model's size and initialisation, the local learning
rates and their schedule, and the server optimiser, each group a
:class:`~fedrec_flwr.schema.Group` (the run's other keys are in :mod:`fedrec_flwr.run_keys`).
"""

from __future__ import annotations

from enum import StrEnum

from fedrec_flwr.schema import NON_NEGATIVE, POSITIVE, ConfigError, Group, Range, RunValues, key


class Aggregation(StrEnum):
    """``aggregation``: what a row's summed change is divided by."""

    ROUND_MEAN = "round-mean"
    TOUCHER_MEAN = "toucher-mean"


class ItemLrScaling(StrEnum):
    """``item-lr-scaling``: is ``item-lr`` multiplied by the number of items?"""

    NONE = "none"
    NUM_ITEMS = "num-items"


class ServerRule(StrEnum):
    """``server-optimizer``: how the server applies the aggregated change."""

    NONE = "none"
    SGD_MOMENTUM = "sgd-momentum"
    ADAM = "adam"


def check_server_lr(config: RunValues) -> None:
    server = config.group(ServerKeys)
    if server.server_optimizer == ServerRule.NONE and server.server_lr != 1.0:
        raise ConfigError(
            "server-lr only applies with a server optimizer: set server-optimizer to "
            "'adam' or 'sgd-momentum', or leave server-lr at 1.0."
        )


class LearningKeys(Group):
    title = "Model, aggregation and learning rates"

    aggregation: str = key(
        default=Aggregation.ROUND_MEAN.value,
        help="`round-mean`: a row moves by the sum of its users' changes / users in the round "
        "(what the papers' code does); `toucher-mean`: / users that trained the row",
        choices=Aggregation,
    )
    embedding_dim: int = key(
        default=32,
        help="item (and user) embedding size d",
        range=POSITIVE,
    )
    init_std: float = key(
        default=1.0,
        help="item rows (and FedMF user vectors) start N(0, init-std^2)",
        range=POSITIVE,
    )
    lr: float = key(
        default=0.1,
        help="learning rate of the private parameters (PFedRec score function, FedMF user vector)",
        range=NON_NEGATIVE,
    )
    item_lr: float = key(
        default=8.0,
        help='learning rate of the item rows, times `num_items` if `item-lr-scaling = "num-items"` '
        "(PFedRec's 0.1 x 80 x num_items)",
        range=NON_NEGATIVE,
    )
    item_lr_scaling: str = key(
        default=ItemLrScaling.NUM_ITEMS.value,
        help="`num-items`: `item-lr` is multiplied by the number of items; `none`: taken as is",
        choices=ItemLrScaling,
    )
    dense_lr: float = key(
        default=0.1,
        help="learning rate of the dense weights (FedNCF's MLP tower and output layer), shared "
        'or, under `personalization = "dual"`, private',
        range=NON_NEGATIVE,
    )

    def item_learning_rate(self, num_items: int) -> float:
        """The item-row learning rate after ``item-lr-scaling``."""
        if self.item_lr_scaling == ItemLrScaling.NUM_ITEMS:
            return self.item_lr * num_items
        return self.item_lr


class ServerKeys(Group):
    title = "Server optimiser"

    server_optimizer: str = key(
        default=ServerRule.NONE.value,
        help="`none` (apply the mean change), `sgd-momentum` or `adam` on the aggregated change "
        "(pseudo-gradient = minus the change; rows: lazy, per-row state)",
        choices=ServerRule,
    )
    server_lr: float = key(
        default=1.0,
        help="learning rate of the server optimiser (must stay 1.0 with `none`); `0` with "
        "`sgd-momentum` or `adam`: the global table and shared-dense parameters never move, "
        "every user trains from the initial table each round: local-only training, no "
        "federation",
        range=NON_NEGATIVE,
        why=" (server-lr = 0 with a server optimizer: the server never moves the global "
        "parameters, local-only training)",
    )
    server_momentum: float = key(
        default=0.9,
        help="momentum of `sgd-momentum`, beta1 of `adam` (beta2 = 0.999, eps = 1e-8)",
        range=Range(0, 1, high_included=False),
        why=" (Adam's beta1, or the momentum of sgd-momentum)",
    )

    check = check_server_lr


#: A decay factor: in (0, 1], 1 = no decay.
DECAY = Range(0, 1, low_included=False)


class DecayRows(StrEnum):
    """``weight-decay-rows``: which item rows weight decay acts on at a user's step."""

    HELD = "held"
    ALL = "all"


#: What ``weight-decay-rows = "all"`` cannot go with (the key, its neutral value).
DENSE_DECAY_REFUSES = {
    "secure-aggregation": False,
    "ldp-mechanism": "none",
    "ldp-laplace-lambda": 0.0,
    "decoy-ratio": 0.0,
    "robust-aggregation": "none",
    "row-update-bound": 0.0,
    "malicious-fraction": 0.0,
    "server-optimizer": "none",
    "aggregation": "round-mean",
    "plgc": False,
    "personalization": "none",
}


def check_schedule(config: RunValues) -> None:
    """``weight-decay-rows = "all"``: the server applies the users' factor on the rows they
    did not hold as a plain round mean of full tables would
    (:mod:`fedrec_flwr.node.dense_decay`); the uploads that change it (secure, noised,
    defended, decoyed, poisoned) and personal rows are refused."""
    if config.group(ScheduleKeys).weight_decay_rows != DecayRows.ALL:
        return
    for name, neutral in DENSE_DECAY_REFUSES.items():
        value = config.value(name)
        if value != neutral:
            raise ConfigError(
                f"weight-decay-rows = 'all' shrinks the rows a user did not hold through one "
                f"factor per user that the server applies to a plain round mean; {name}="
                f"{value!r} does not combine with it: set {name} = {neutral!r}, or "
                "weight-decay-rows = 'held'."
            )
    if config.value("method") == "pfedrec":
        raise ConfigError(
            "weight-decay-rows = 'all' does not cover personal rows (PFedRec's): use "
            "weight-decay-rows = 'held'."
        )


class ScheduleKeys(Group):
    title = "Local schedule: weight decay and learning-rate decay"
    check = check_schedule

    weight_decay: float = key(
        default=0.0,
        help="L2 weight decay of the local optimiser, as torch.optim.SGD's (`+ weight-decay * "
        "p` on the gradient of every trained parameter, Adam's private parameters too); "
        "item rows (shared and private, FedRAP's `D_u`) decay on every row the user holds "
        "this round at each of its steps, the others as `weight-decay-rows` says",
        range=NON_NEGATIVE,
        why=" (0 = off)",
    )
    weight_decay_rows: str = key(
        default=DecayRows.HELD.value,
        help="the item rows weight decay shrinks at a user's step: `held`, those it holds this "
        "round; `all`, every row, as dense gradients do (the reference code of FedRAP): the "
        "rows it does not hold take its round's factor, the shared ones on the server (a "
        "plain round mean), the private ones on the device",
        choices=DecayRows,
    )
    lr_decay: float = key(
        default=1.0,
        help="every local learning rate of round r (1-based) is multiplied by `lr-decay ** "
        "(r - 1)` (FedRAP's reference code: 0.97)",
        range=DECAY,
        why=" (1 = no decay; a factor per round)",
    )
    lr_step_decay: float = key(
        default=1.0,
        help="the s-th local step of a user in a round (0-based, over all its epochs and "
        "batches) takes every learning rate times `lr-step-decay ** s`, restarted each "
        "round (FedRAP's reference code: ExponentialLR(0.95) stepped after every batch)",
        range=DECAY,
        why=" (1 = no decay; a factor per local step)",
    )


class OptimizedRows(StrEnum):
    """``server-optimizer-rows``: which item rows the server optimiser steps each round."""

    TOUCHED = "touched"
    ALL = "all"


def check_optimized_rows(config: RunValues) -> None:
    rows = config.group(ServerOptimizerKeys).server_optimizer_rows
    if rows != OptimizedRows.TOUCHED and config.group(ServerKeys).server_optimizer == "none":
        raise ConfigError(
            f"server-optimizer-rows='{rows}' applies to a server "
            "optimizer: set server-optimizer to 'adam' or 'sgd-momentum', or leave "
            "server-optimizer-rows = 'touched'."
        )


class ServerOptimizerKeys(Group):
    """The server optimiser's own keys (its rule, step and momentum are :class:`ServerKeys`)."""

    title = "Server optimiser rows"

    server_optimizer_rows: str = key(
        default=OptimizedRows.TOUCHED.value,
        help="item rows the server optimiser steps: `touched` (lazy, per-row state and step "
        "count) or `all` (the whole table every round, untouched rows with a zero "
        "pseudo-gradient, one step count: FedRecGEL's reference code)",
        choices=OptimizedRows,
    )

    check = check_optimized_rows
