"""``secure-aggregation-bound``, ``-max-rows``, ``-bound-scale`` and ``-bound-floor``:
bounded secure aggregation's run keys (:mod:`fedrec_flwr.privacy.bounded`), the checks that
need the method and the table (:func:`bounds_of`), and each round's bounds
(:func:`round_bounds`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import numpy as np

from fedrec_flwr.methods.itemitem import uploads_statistics
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.privacy.bounded.circuit import Bounds, BoundsError
from fedrec_flwr.privacy.bounded.scaled import BoundSchedule
from fedrec_flwr.privacy.secagg import SecAggKeys
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.schema import NON_NEGATIVE, ConfigError, Group, RunValues, key


class HelperPlace(StrEnum):
    """``secure-aggregation-helper``: where the helper (the second aggregator) runs."""

    IN_PROCESS = "in-process"
    PROCESS = "process"


def check_bounded(config: RunValues) -> None:
    keys = config.group(BoundedKeys)
    bound, max_rows = keys.secure_aggregation_bound, keys.secure_aggregation_max_rows
    if bound > 0 and not config.group(SecAggKeys).secure_aggregation:
        raise ConfigError(
            "secure-aggregation-bound proves each user's change under secure aggregation: "
            "set secure-aggregation = true, or leave secure-aggregation-bound = 0 (without "
            "secure aggregation, row-update-bound clips each upload on the server)."
        )
    if max_rows > 0 and bound <= 0:
        raise ConfigError(
            "secure-aggregation-max-rows bounds the rows each user's proof covers: set "
            "secure-aggregation-bound (> 0) too, or leave secure-aggregation-max-rows = 0."
        )
    scale, floor = keys.secure_aggregation_bound_scale, keys.secure_aggregation_bound_floor
    if scale > 0 and bound <= 0:
        raise ConfigError(
            "secure-aggregation-bound-scale makes each round's bound follow the table, up to "
            "secure-aggregation-bound: set secure-aggregation-bound (> 0) too (the ceiling), or "
            "leave secure-aggregation-bound-scale = 0."
        )
    if scale > 0 and not 0 < floor <= bound:
        raise ConfigError(
            f"secure-aggregation-bound-floor = {floor:g}: with secure-aggregation-bound-scale "
            f"the round's bound needs a floor above 0 and at most secure-aggregation-bound "
            f"= {bound:g} (a bound of 0 refuses every change): set it in (0, {bound:g}]."
        )
    if keys.secure_aggregation_helper != HelperPlace.IN_PROCESS and bound <= 0:
        raise ConfigError(
            "secure-aggregation-helper places the helper of bounded secure aggregation: set "
            "secure-aggregation-bound (> 0) too, or leave secure-aggregation-helper = "
            "'in-process'."
        )
    if floor > 0 and scale <= 0:
        raise ConfigError(
            "secure-aggregation-bound-floor is the least bound of a bound that follows the "
            "table: set secure-aggregation-bound-scale (> 0) too, or leave "
            "secure-aggregation-bound-floor = 0."
        )


class BoundedKeys(Group):
    title = "Bounded secure aggregation (plug-in)"
    check = check_bounded

    secure_aggregation_bound: float = key(
        default=0.0,
        help="under secure aggregation, each user proves that it changed every row of the "
        "table by at most this much in L2 (a report per user, verified by the server and a "
        "helper before the table moves; a user whose report fails is dropped, the others "
        "aggregate); 0 = off. Methods with shared-dense parameters are refused",
        range=NON_NEGATIVE,
    )
    secure_aggregation_max_rows: int = key(
        default=0,
        help="with secure-aggregation-bound: the most rows one user may change in a round "
        "(an honest user keeps its longest changes); 0 = every row",
        range=NON_NEGATIVE,
    )
    secure_aggregation_bound_scale: float = key(
        default=0.0,
        help="with secure-aggregation-bound: each round's bound is this times the median row "
        "norm of the table the round trains on (public: every party computes it), at least "
        "secure-aggregation-bound-floor and at most secure-aggregation-bound; 0 = "
        "secure-aggregation-bound every round",
        range=NON_NEGATIVE,
    )
    secure_aggregation_bound_floor: float = key(
        default=0.0,
        help="with secure-aggregation-bound-scale: the least bound of a round (> 0, at most "
        "secure-aggregation-bound)",
        range=NON_NEGATIVE,
    )
    secure_aggregation_helper: str = key(
        default=HelperPlace.IN_PROCESS.value,
        help="with secure-aggregation-bound: where the helper (the second aggregator) runs: "
        "`in-process` (an object of the ServerApp's process) or `process` (an OS process of "
        "its own, reached through a pipe: its private key never enters the ServerApp's "
        "process)",
        choices=HelperPlace,
    )


def schedule_of(config: RunGroups, num_items: int, row_dim: int) -> BoundSchedule:
    """The bounds of every round: the ceiling ``secure-aggregation-bound`` (whose fixed point
    every round's report uses) with the scale and floor."""
    group = config.group(BoundedKeys)
    ceiling = Bounds.of(
        num_items, row_dim, group.secure_aggregation_bound, group.secure_aggregation_max_rows
    )
    return BoundSchedule(
        ceiling, group.secure_aggregation_bound_scale, group.secure_aggregation_bound_floor
    )


def round_bounds(config: RunGroups, table: np.ndarray) -> Bounds:
    """The bounds of a round that trains on ``table`` (the table as sent)."""
    return schedule_of(config, table.shape[0], table.shape[1]).at(table)


def bounds_of(config: RunGroups, method: Any, num_items: int, row_dim: int) -> BoundSchedule | None:
    """The bounds of every round (None when ``secure-aggregation-bound`` is 0), refused
    (:class:`ConfigError`) for a method whose uploads they cannot cover."""
    group = config.group(BoundedKeys)
    if group.secure_aggregation_bound <= 0:
        return None
    dense = layout(method).shared_dense
    if dense or uploads_statistics(method):
        what = f"shared-dense parameters {list(dense)}" if dense else "co-occurrence sums"
        raise ConfigError(
            f"secure-aggregation-bound proves bounds on a user's change of the item table; "
            f"method '{config.method_name}' also uploads {what}, which no proof covers: leave "
            "secure-aggregation-bound = 0 for it, or pick a method that uploads item rows only "
            "(pfedrec, fedmf, fedrap, ...)"
        )
    try:
        return schedule_of(config, num_items, row_dim)
    except BoundsError as error:
        raise ConfigError(str(error)) from error
