"""The server's model without Flower: the global item table, the shared-dense parameters,
the server optimiser and the rows ever touched, and the update a round's uploads make.

:meth:`ServerModel.apply` is the server update of every run: the Flower strategy
(:mod:`fedrec_flwr.server.strategy`) and the audit's Flower-free round loop
(:mod:`fedrec_lab.audit.loop`) both call it. Per round:

1. the float64 change of each touched row (:func:`~fedrec_flwr.aggregation.row_changes`,
   ``aggregation`` rule), optionally shrunk by the LDP denoising hook
   (:mod:`fedrec_flwr.privacy.denoise`);
2. the server optimiser turns it into the new rows (:mod:`fedrec_flwr.server.optimizer`);
3. a sparse method's rows at or below its zero threshold become exact zeros;
4. each shared-dense parameter moves by the mean of the users' tuned copies, through the
   same optimiser (:func:`~fedrec_flwr.aggregation.dense_changes`).

:meth:`ServerModel.state_dict` holds everything a resumed run needs of it, under the array
names of a checkpoint's ``server.npz`` (:mod:`fedrec_flwr.server.checkpoint`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fedrec_flwr.aggregation import RowUpload, dense_changes, row_changes
from fedrec_flwr.config import RunConfig
from fedrec_flwr.methods import Method
from fedrec_flwr.privacy.denoise import denoiser
from fedrec_flwr.seeding import keyed_rng
from fedrec_flwr.server.optimizer import ServerOptimizer

__all__ = ["Denoiser", "ServerModel", "initial_item_table"]

#: (touched rows, their float64 change, the round's uploads) -> the change to apply.
Denoiser = Callable[[np.ndarray, np.ndarray, Sequence[RowUpload]], np.ndarray]

TABLE, TOUCHED = "item-table", "touched-ever"
DENSE, OPTIMIZER = "dense/", "optim/"


def initial_item_table(config: RunConfig, num_items: int, row_dim: int) -> np.ndarray:
    """The global item table of round 1: N(0, init-std^2), keyed by the seed."""
    rng = keyed_rng(config.seed, "item-init")
    return rng.normal(0.0, config.init_std, size=(num_items, row_dim)).astype(np.float32)


class ServerModel:
    """The global item table (``float32 [items, row_dim]``), the shared-dense parameters, the
    server optimiser and which rows any round has touched.

    ``zero_threshold``: a sparse method's (rows at or below it are zero); ``None``: dense rows.
    ``evaluate_round_start``: evaluation reads the table of the round's start, not the table
    after its update. ``denoise``: applied to the rows' change before the optimiser.
    """

    def __init__(
        self,
        table: np.ndarray,
        dense: Mapping[str, np.ndarray],
        optimizer: ServerOptimizer,
        aggregation: str = "round-mean",
        zero_threshold: float | None = None,
        evaluate_round_start: bool = False,
        denoise: Denoiser | None = None,
    ) -> None:
        self.table = table
        self.round_start_table = table
        self.dense = dict(dense)
        self.optimizer = optimizer
        self.aggregation = aggregation
        self.zero_threshold = zero_threshold
        self.evaluate_round_start = evaluate_round_start
        self.denoise = denoise
        self.touched_ever = np.zeros(len(table), dtype=bool)

    @classmethod
    def initial(cls, config: RunConfig, method: Method, num_items: int) -> ServerModel:
        """Round 1's model of a run: the seeded table, the method's shared-dense parameters,
        the configured aggregation rule, server optimiser and denoising."""
        table = initial_item_table(config, num_items, method.row_dim)
        shared = method.shared_dense_names()
        dense = {name: v for name, v in method.init_dense().items() if name in shared}
        return cls(
            table,
            dense,
            ServerOptimizer(
                config.server_optimizer,
                config.server_lr,
                config.server_momentum,
                config.server_optimizer_rows,
            ),
            aggregation=config.aggregation,
            zero_threshold=method.zero_threshold,
            evaluate_round_start=method.eval_table == "round-start",
            denoise=denoiser(config, num_items),
        )

    @property
    def num_items(self) -> int:
        return self.table.shape[0]

    @property
    def row_dim(self) -> int:
        return self.table.shape[1]

    def load_initial(self, table: np.ndarray, dense: Mapping[str, np.ndarray]) -> None:
        """Take round 1's table and shared-dense parameters (e.g. from a Flower record),
        checked against this model's shapes and parameter names."""
        table = np.array(table, dtype=np.float32)
        if table.shape != self.table.shape:
            raise ValueError(
                f"item-table has shape {table.shape}, expected {self.table.shape}: build the "
                "initial arrays for this run's number of items and method"
            )
        if set(dense) != set(self.dense):
            raise ValueError(
                f"initial arrays hold dense {sorted(dense)}, expected {sorted(self.dense)}"
            )
        self.table = self.round_start_table = table
        self.dense = dict(dense)

    def start_round(self) -> None:
        """Remember the table a training round starts from (what a ``round-start``
        evaluation reads). No copy: :meth:`apply` replaces the table, never writes into it."""
        self.round_start_table = self.table

    def apply(self, uploads: Sequence[RowUpload]) -> np.ndarray:
        """Update the table and shared-dense parameters with a round's valid uploads (see
        the module's doc); return the rows it touched."""
        if not uploads:
            raise ValueError("no uploads to apply: a round without any leaves the model as it is")
        uploads = list(uploads)
        touched, delta = row_changes(self.table, uploads, self.aggregation)
        if self.denoise is not None:  # post-processing of the LDP noise
            delta = self.denoise(touched, delta, uploads)
        self.table = self.optimizer.update_rows(self.table, touched, delta)
        if self.zero_threshold is not None:  # rows at or below it are zero (and not sent)
            self.table[np.abs(self.table).max(axis=1, initial=0.0) <= self.zero_threshold] = 0.0
        self.dense = {
            name: self.optimizer.update_dense(name, self.dense[name], change)
            for name, change in dense_changes(self.dense, uploads).items()
        }
        self.touched_ever[touched] = True
        return touched

    def evaluation_table(self) -> np.ndarray:
        """The global table evaluation reads (the round's start, or its latest)."""
        return self.round_start_table if self.evaluate_round_start else self.table

    def density(self) -> float:
        """Share of the table's rows that are not all zero."""
        return float(self.table.any(axis=1).mean())

    def state_dict(self) -> dict[str, np.ndarray]:
        """The model's arrays (not copies): ``item-table``, ``touched-ever``,
        ``dense/<name>`` and the optimiser's ``optim/<name>/<part>``."""
        state = {TABLE: self.table, TOUCHED: self.touched_ever}
        state.update({DENSE + name: value for name, value in self.dense.items()})
        state.update({OPTIMIZER + k: v for k, v in self.optimizer.state_arrays().items()})
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s arrays (copied; other keys are ignored)."""
        needed = [TABLE, TOUCHED, *(DENSE + name for name in self.dense)]
        missing = [key for key in needed if key not in state]
        if missing:
            raise ValueError(
                f"the server state lacks {', '.join(missing)}: it was saved by a run of "
                "another method; resume with that run's configuration"
            )
        table = np.array(state[TABLE])
        if table.shape != self.table.shape:
            raise ValueError(
                f"the saved item-table is {table.shape}, this run's {self.table.shape}: "
                "resume with the run's data and configuration"
            )
        self.table = self.round_start_table = table
        self.dense = {name: np.array(state[DENSE + name]) for name in self.dense}
        self.optimizer.load_state_arrays(
            {k.removeprefix(OPTIMIZER): v for k, v in state.items() if k.startswith(OPTIMIZER)}
        )
        self.touched_ever = np.array(state[TOUCHED], dtype=bool)
