"""The best validation round and when a run stops before its last round (plain numpy).

- The best round is the evaluated round with the highest validation HR@10, the earliest on
  ties (a NaN never improves); its users' metrics are kept for ``per-user.csv``.
- ``early-stopping-patience`` (> 0): the run stops once that many evaluated rounds in a row
  have not beaten it (not at its last round: that one ends the run anyway). Its test metrics
  stay those of the best validation round.
- A round whose every update held NaN or inf means training diverged: the run stops there,
  its results are those of the rounds before.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["RunStopping"]

LOG = logging.getLogger("flwr")  # Flower's logger: what it logs reaches `flwr log`
BEST_VAL, SINCE_BEST = "best-val", "evals-since-best"
BEST_IDS, BEST_METRICS = "best-user-ids", "best-user-metrics"


class RunStopping:
    """Tracks the best validation round and records why a run stopped early, if it did."""

    def __init__(self, patience: int) -> None:
        self.patience = patience
        self.best_val: tuple[float, int] | None = None  # (validation HR@10, round)
        self.best_per_user: tuple[np.ndarray, np.ndarray] | None = None  # (user ids, metrics)
        self.evals_since_best = 0
        self.stopped_early_round: int | None = None
        self.diverged_round: int | None = None

    def observe(
        self, server_round: int, val_hr: float, per_user: tuple[np.ndarray, np.ndarray] | None
    ) -> bool:
        """Take an evaluated round's validation HR@10 (and its per-user metrics); True when
        patience (> 0) evaluated rounds in a row have not beaten the best (strictly: the best
        round is the earliest on ties)."""
        if val_hr == val_hr and (self.best_val is None or val_hr > self.best_val[0]):
            self.best_val = (val_hr, server_round)
            self.best_per_user = per_user
            self.evals_since_best = 0
        else:
            self.evals_since_best += 1
        return self.patience > 0 and self.evals_since_best >= self.patience

    def stop_early(self, server_round: int, num_rounds: int) -> None:
        """Validation HR@10 stopped improving: the run stops after ``server_round``."""
        self.stopped_early_round = server_round
        best, best_round = self.best_val or (float("nan"), 0)
        LOG.info(
            "round %d: validation HR@10 has not improved for %d evaluated rounds (best %.4f "
            "at round %d): early stop (early-stopping-patience), %d of %d rounds run",
            server_round,
            self.evals_since_best,
            best,
            best_round,
            server_round,
            num_rounds,
        )

    def stop_diverged(self, server_round: int) -> None:
        """Every update of ``server_round`` held NaN or inf: training diverged."""
        self.diverged_round = server_round
        LOG.error(
            "round %d: training diverged (every update of the round holds NaN or inf; see the "
            "warnings above): the run stops here and its results are those of the rounds "
            "before. Lower the learning rates (lr, item-lr, dense-lr) and run again.",
            server_round,
        )

    def state_dict(self) -> dict[str, Any]:
        """``best-val``, ``evals-since-best`` and the best round's per-user arrays."""
        state: dict[str, Any] = {BEST_VAL: self.best_val, SINCE_BEST: self.evals_since_best}
        if self.best_per_user is not None:
            state[BEST_IDS], state[BEST_METRICS] = self.best_per_user
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s values."""
        best = state[BEST_VAL]
        self.best_val = (float(best[0]), int(best[1])) if best else None
        self.best_per_user = None
        if BEST_IDS in state:
            self.best_per_user = (state[BEST_IDS], state[BEST_METRICS])
        self.evals_since_best = int(state[SINCE_BEST])
