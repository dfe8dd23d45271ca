"""The round's bound from the public table (``secure-aggregation-bound-scale``).

A fixed bound fits a table of one scale: a table that starts small (FedMF's, a median row
norm near 0.24 before training) lets a few clipped changes move a row many times its
length in the first rounds. With a scale, the round's bound follows the table the round
trains on::

    B_t = min(ceiling, max(floor, scale x median row norm of the table as sent))

rounded down to a multiple of :data:`QUANTUM`. It is computed from public values only (the
table every participant is sent): the node proves its report against it, and the server
and the helper each compute it again from the same table (the report's context holds the
bound, so a report proven against another bound fails verification). The fixed point is
the ceiling's (:meth:`~fedrec_flwr.privacy.bounded.circuit.Bounds.of`), so a smaller bound
never wraps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from fedrec_flwr.privacy.bounded.circuit import Bounds

#: The grid the round's bound is rounded down to (one float rounding apart on two
#: machines cannot give two bounds, but at a grid point).
QUANTUM = 2.0**-10


class ScaleError(ValueError):
    """The table gives no bound (a non-finite row)."""


def median_row_norm(table: np.ndarray) -> float:
    """The median L2 norm of the table's rows (float64)."""
    rows = np.asarray(table, dtype=np.float64)
    if rows.ndim != 2 or not len(rows):
        raise ScaleError(f"the table has shape {rows.shape}: no rows to scale the bound by")
    return float(np.median(np.sqrt(np.square(rows).sum(axis=1))))


@dataclass(frozen=True)
class BoundSchedule:
    """The bounds of each round: the ceiling's (``scale`` 0), or the ceiling's layout with
    the bound scaled to the round's table (see the module's doc)."""

    ceiling: Bounds
    scale: float = 0.0
    floor: float = 0.0

    def bound_of(self, table: np.ndarray) -> float:
        """The round's bound for the table as sent (the ceiling when ``scale`` is 0)."""
        if self.scale <= 0:
            return self.ceiling.bound
        raw = self.scale * median_row_norm(table)
        if not math.isfinite(raw):
            raise ScaleError(f"the table's median row norm is {raw / self.scale}: no bound")
        stepped = math.floor(raw / QUANTUM) * QUANTUM
        return min(self.ceiling.bound, max(self.floor, stepped))

    def at(self, table: np.ndarray) -> Bounds:
        """The round's bounds for the table as sent."""
        if self.scale <= 0:
            return self.ceiling
        return replace(self.ceiling, bound=self.bound_of(table))
