"""``secure-aggregation-bound`` and ``secure-aggregation-max-rows``: bounded secure
aggregation's run keys (:mod:`fedrec_flwr.privacy.bounded`), and the checks that need the
method and the table (:func:`bounds_of`)."""

from __future__ import annotations

from typing import Any

from fedrec_flwr.methods.itemitem import uploads_statistics
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.privacy.bounded.circuit import Bounds, BoundsError
from fedrec_flwr.privacy.secagg import SecAggKeys
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.schema import NON_NEGATIVE, ConfigError, Group, RunValues, key


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


def bounds_of(config: RunGroups, method: Any, num_items: int, row_dim: int) -> Bounds | None:
    """The round's bounds (None when ``secure-aggregation-bound`` is 0), refused
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
        return Bounds.of(
            num_items,
            row_dim,
            group.secure_aggregation_bound,
            group.secure_aggregation_max_rows,
        )
    except BoundsError as error:
        raise ConfigError(str(error)) from error
