"""User-level (epsilon, delta) of the LDP mechanisms over a run, with Google's dp-accounting.

``ldp-epsilon`` is the guarantee of one uploaded row in one round (:mod:`.ldp`). A user
uploads many rows a round and trains in many rounds; what it reveals over the run is the
composition of every row it uploaded:

- one row is the Gaussian (Laplace) mechanism on the row's clipped change: any two changes
  a user could have differ by at most ``2C`` in L2 norm (``2C sqrt(d)`` in L1), so its noise
  multiplier, noise scale over sensitivity, is ``z = sigma / 2C = sqrt(2 ln(1.25/delta)) /
  epsilon`` (Gaussian) or ``b / (2C sqrt(d)) = 1 / epsilon`` (Laplace); neither depends on
  ``C`` or ``d``;
- a user's upload in a round is one vector, the concatenation of its ``k`` rows, each clipped
  on its own and noised independently: its L2 sensitivity is ``2C sqrt(k)``, and the
  Gaussian mechanism on it is exactly the ``k``-fold composition of the rows' mechanisms
  (same privacy loss distribution: a Gaussian of multiplier ``z / sqrt(k)``);
- rounds compose the same way, so a user who uploaded ``n`` rows over the run is exactly a
  Gaussian of multiplier ``z / sqrt(n)``, whose epsilon at a delta the library computes
  exactly (``get_epsilon_gaussian``, the analytic Gaussian of Balle and Wang, 2018);
- Laplace: Renyi DP composes by addition. The RDP of per-coordinate Laplace noise on a shift
  of L1 norm ``s`` is at most that of the one-dimensional Laplace with shift ``s``
  (the one-dimensional RDP is convex in the shift and zero at zero, so it is superadditive
  over coordinates), hence ``n`` rows are ``n`` ``LaplaceDpEvent(1 / epsilon)`` in the RDP
  accountant; the result is also capped by basic composition, ``n epsilon`` (pure DP).

What this does not cover: which rows a user uploads (item ids and their number travel in
the clear, docs/privacy.md), shared-dense parameters (the LDP plug-in refuses methods that
have them), and PFedRec Table 4's ``ldp-laplace-lambda`` (no clipping: no finite epsilon).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fedrec_flwr.privacy.ldp import LdpKeys
from fedrec_flwr.run_keys import RunGroups

#: How to install the accountant (an extra: the runtime runs without it).
INSTALL = "pip install 'fedrec-flwr[privacy]' (Google's dp-accounting)"


@dataclass(frozen=True)
class UserLevel:
    """A user's (epsilon, delta) over ``rows`` uploaded rows (all rounds together)."""

    epsilon: float
    delta: float
    rows: int
    accountant: str


def row_noise_multiplier(mechanism: str, row_epsilon: float, row_delta: float) -> float:
    """One row's noise scale over its sensitivity (``2C`` in L2 for Gaussian, ``2C sqrt(d)``
    in L1 for Laplace): the module doc's ``z``."""
    if mechanism == "gaussian":
        return math.sqrt(2.0 * math.log(1.25 / row_delta)) / row_epsilon
    if mechanism == "laplace":
        return 1.0 / row_epsilon
    raise ValueError(f"no calibrated noise for ldp-mechanism '{mechanism}' (gaussian, laplace)")


def user_level(
    mechanism: str, row_epsilon: float, row_delta: float, rows: int, delta: float
) -> UserLevel:
    """The (epsilon, ``delta``) of a user who uploaded ``rows`` rows under ``mechanism``
    calibrated to (``row_epsilon``, ``row_delta``) per row (module doc)."""
    try:
        from dp_accounting import dp_event, gaussian_mechanism
        from dp_accounting.rdp import rdp_privacy_accountant
    except ImportError as error:
        raise ImportError(f"the privacy accountant is not installed: {INSTALL}") from error
    z = row_noise_multiplier(mechanism, row_epsilon, row_delta)
    if rows <= 0:
        return UserLevel(0.0, 0.0, 0, "none (no row uploaded)")
    if mechanism == "gaussian":
        epsilon = gaussian_mechanism.get_epsilon_gaussian(z / math.sqrt(rows), delta)
        return UserLevel(float(epsilon), delta, rows, "dp-accounting analytic Gaussian")
    accountant = rdp_privacy_accountant.RdpAccountant()
    accountant.compose(dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(z), rows))
    epsilon = min(accountant.get_epsilon(delta), rows * row_epsilon)
    return UserLevel(float(epsilon), delta, rows, "dp-accounting RDP (Laplace)")


def accounted(config: RunGroups) -> bool:
    """Does the run's LDP carry a formal epsilon (``ldp-mechanism`` laplace or gaussian)?"""
    ldp = config.group(LdpKeys)
    return ldp.ldp_mechanism != "none" and not ldp.ldp_laplace_lambda


def run_rows_bound(rounds: Sequence[dict[str, Any]]) -> int:
    """An upper bound on the rows any one user uploaded over the run, from ``rounds.csv``'s
    rows: in each round with training, every distinct row uploaded (``touched-items``)."""
    total = 0
    for row in rounds:
        if _count(row.get("train-users")) > 0:
            total += _count(row.get("touched-items"))
    return total


def _count(value: Any) -> int:
    return 0 if value in ("", None) else int(float(value))


def summary_record(config: RunGroups, rounds: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """``summary.json``'s ``ldp_user_level``: None without LDP; the worst user's bound
    (:func:`run_rows_bound`) under a formal mechanism; why there is none otherwise."""
    ldp = config.group(LdpKeys)
    if ldp.ldp_mechanism == "none" and not ldp.ldp_laplace_lambda:
        return None
    per_row = {"mechanism": ldp.ldp_mechanism, "epsilon": ldp.ldp_epsilon}
    if not accounted(config):
        return {
            "mechanism": "laplace-lambda",
            "epsilon": None,
            "why": "ldp-laplace-lambda adds noise without clipping: no finite epsilon",
        }
    per_row["delta"] = ldp.ldp_delta if ldp.ldp_mechanism == "gaussian" else 0.0
    record: dict[str, Any] = {
        "per_row": per_row,
        "rows": "bound: every distinct row uploaded in each round with training",
    }
    try:
        level = user_level(
            ldp.ldp_mechanism,
            ldp.ldp_epsilon,
            ldp.ldp_delta,
            run_rows_bound(rounds),
            ldp.ldp_delta,
        )
    except ImportError as error:
        return {**record, "epsilon": None, "why": str(error)}
    return {**record, **asdict(level)}


def summary_fields(config: RunGroups, rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``{"ldp_user_level": ...}`` for ``summary.json`` (:func:`summary_record`); empty
    without LDP, so that such a run's summary keeps its fields."""
    record = summary_record(config, rounds)
    return {} if record is None else {"ldp_user_level": record}


class RowCounter:
    """An upload observer (:data:`fedrec_flwr.privacy.uploads.OBSERVERS`) counting the rows
    each user uploads, every round: the exact ``rows`` of :func:`user_level`."""

    def __init__(self) -> None:
        self.rows: dict[int, int] = defaultdict(int)

    def __call__(self, user: int, server_round: int, items: np.ndarray, *_: np.ndarray) -> None:
        self.rows[int(user)] += len(items)

    def user_levels(self, config: RunGroups) -> dict[str, Any]:
        """Median and worst user's epsilon (at ``ldp-delta``) over the counted rows; empty
        without a formal mechanism."""
        if not accounted(config) or not self.rows:
            return {}
        counts = sorted(self.rows.values())
        ldp = config.group(LdpKeys)

        def epsilon(rows: int) -> float:
            return user_level(
                ldp.ldp_mechanism, ldp.ldp_epsilon, ldp.ldp_delta, rows, ldp.ldp_delta
            ).epsilon

        median = counts[(len(counts) - 1) // 2]
        return {
            "delta": ldp.ldp_delta,
            "rows-median": median,
            "rows-max": counts[-1],
            "epsilon-median": epsilon(median),
            "epsilon-max": epsilon(counts[-1]),
        }
