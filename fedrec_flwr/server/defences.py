"""The server's defences against poisoned uploads as a stage of its chain: a per-row bound
and robust aggregation (``row-update-bound``, ``robust-aggregation``, declared with their
arithmetic in :mod:`fedrec_flwr.aggregation`), and the plug-in that declares them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from fedrec_flwr.aggregation import RobustRule, RowUpload, defended_row_changes
from fedrec_flwr.methods import Method, Plugin
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.schema import ConfigError
from fedrec_flwr.stages import RowChanges, ServerStage


class RowDefences(ServerStage):
    """The rows' changes under the defences (:func:`defended_row_changes`) in place of the
    plain rule: each upload's change of a row clipped to ``bound`` times its users (0: no
    bound), and the coordinate-wise ``robust`` location of a row's contributors instead of
    their mean, scaled as the ``aggregation`` rule scales it."""

    name = "defences"
    terminal = True

    def __init__(
        self, bound: float = 0.0, robust: str = RobustRule.NONE, aggregation: str = "round-mean"
    ) -> None:
        if not bound >= 0:
            raise ValueError(f"row-update-bound must be >= 0, not {bound}")
        self.bound = float(bound)
        self.robust = RobustRule(robust)
        self.aggregation = aggregation

    @classmethod
    def of(cls, config: RunGroups, method: Method, num_items: int) -> RowDefences:
        defences = config.defences
        return cls(
            defences.row_update_bound, defences.robust_aggregation, config.learning.aggregation
        )

    def changes(
        self,
        table: np.ndarray,
        uploads: Sequence[RowUpload],
        call_next: Callable[[np.ndarray, Sequence[RowUpload]], RowChanges],
    ) -> RowChanges:
        return defended_row_changes(table, uploads, self.aggregation, self.bound, self.robust)

    def check_contributors(self, users_per_node: int) -> None:
        """Refuse robust aggregation when a node holds several users (its reply is one
        contributor: the sum of its users' rows)."""
        if self.robust != RobustRule.NONE and users_per_node > 1:
            raise ConfigError(
                f"robust-aggregation='{self.robust}' takes the median or trimmed "
                f"mean over each row's contributors, one per reply, but a node holds "
                f"{users_per_node} users and replies with their sum. Run one user per node "
                "(as many SuperNodes as users), or set robust-aggregation = 'none' "
                "(row-update-bound works with packed nodes)."
            )


def defences_enabled(config: RunGroups) -> bool:
    defences = config.defences
    return defences.row_update_bound > 0 or defences.robust_aggregation != RobustRule.NONE


#: A bound on each row's change and robust aggregation, against poisoned uploads.
PLUGIN = Plugin(
    name="defences",
    paper="norm bounding; trimmed mean and median (Yin et al., ICML 2018)",
    enabled=defences_enabled,
    server=RowDefences.of,
)
