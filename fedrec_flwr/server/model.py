"""The server's model without Flower: the global item table, the shared-dense parameters,
the server optimiser and the rows ever touched, and the update a round's uploads make.

:meth:`ServerModel.apply` is the server update of every run: the Flower strategy
(:mod:`fedrec_flwr.server.strategy`) and the audit's Flower-free round loop
(:mod:`fedrec_lab.audit.loop`) both call it. Per round:

1. the float64 change of each touched row, from the server's chain of stages
   (:class:`~fedrec_flwr.stages.ServerChain`, composed from the enabled plug-ins): the
   ``aggregation`` rule (:func:`~fedrec_flwr.aggregation.row_changes`) or, with a defence
   on, :func:`~fedrec_flwr.aggregation.defended_row_changes` (see below), optionally shrunk
   by the LDP denoising stage (:mod:`fedrec_flwr.privacy.denoise`);
2. the server optimiser turns it into the new rows (:mod:`fedrec_flwr.server.optimizer`);
3. a sparse method's rows at or below its zero threshold become exact zeros;
4. each shared-dense parameter moves by the mean of the users' tuned copies, through the
   same optimiser (:func:`~fedrec_flwr.aggregation.dense_changes`).

:meth:`ServerModel.state_dict` holds everything a resumed run needs of it, under the array
names of a checkpoint's ``server.npz`` (:mod:`fedrec_flwr.server.checkpoint`).

Defences against poisoned uploads (``row-update-bound``, ``robust-aggregation``, declared in
:mod:`fedrec_flwr.aggregation`; both off by default). The bound *clips*: each upload's change of
a row is shortened to ``bound`` times its number of users, keeping its direction, so an honest
user whose step happens to be long still counts, and a reply of 1e6 or 1e300 moves no row by
more than ``bound``. Replies holding NaN or inf are *rejected* before
(:mod:`fedrec_flwr.server.validation`): there is no direction to keep; a caller that skips that
check gets them as zero changes. Robust aggregation takes the coordinate-wise median or trimmed
mean over a row's contributors, and the server sees one contributor per reply: a node's sum of
its users' rows. So it needs one user per node (the faithful mode, the only one a real
deployment has); a packed federation is refused at start
(:meth:`ServerModel.check_contributors`, :mod:`fedrec_flwr.server.defences`), and so are
decoys, whose rows are contributors the server cannot tell apart. Neither defence covers
shared-dense parameters (FedNCF's MLP): they are averaged as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedrec_flwr.aggregation import (
    UPDATE_LIMIT,
    RobustRule,
    RowUpload,
    dense_changes,
    upload_violation,
)
from fedrec_flwr.config import RunConfig
from fedrec_flwr.methods import Method, capabilities, enabled_plugins
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.privacy.denoise import Denoise, Denoiser
from fedrec_flwr.seeding import keyed_rng
from fedrec_flwr.server.defences import RowDefences
from fedrec_flwr.server.optimizer import ServerOptimizer
from fedrec_flwr.stages import ModelShapes, NodeUpload, ServerChain, ServerStage, Upload, uploads_of

__all__ = [
    "Denoiser",
    "ServerModel",
    "UpdateRefusedError",
    "initial_item_table",
    "server_stages",
]

TABLE, TOUCHED = "item-table", "touched-ever"
#: The largest value the table may hold without ``value_limit``: float32's.
FLOAT32_LIMIT = float(np.finfo(np.float32).max)


class UpdateRefusedError(ValueError):
    """A round's update is refused whole (the model stays as it was): every upload lies
    beyond ``update-limit``, or the update would leave the table or a shared-dense
    parameter non-finite or beyond the values it may hold."""


DENSE, OPTIMIZER = "dense/", "optim/"


def server_stages(config: RunConfig, method: Method, num_items: int) -> list[ServerStage]:
    """The server's stages of the plug-ins ``config`` enables, in registry order."""
    makers = [plugin.server for plugin in enabled_plugins(config, "server")]
    stages = (make(config, method, num_items) for make in makers if make is not None)
    return [stage for stage in stages if stage is not None]


def initial_item_table(config: RunConfig, num_items: int, row_dim: int) -> np.ndarray:
    """The global item table of round 1: N(0, init-std^2), keyed by the seed."""
    rng = keyed_rng(config.training.seed, "item-init")
    return rng.normal(0.0, config.learning.init_std, size=(num_items, row_dim)).astype(np.float32)


class ServerModel:
    """The global item table (``float32 [items, row_dim]``), the shared-dense parameters, the
    server optimiser and which rows any round has touched.

    ``zero_threshold``: a sparse method's (rows at or below it are zero); ``None``: dense rows.
    ``evaluate_round_start``: evaluation reads the table of the round's start, not the table
    after its update. ``stages``: the server's chain in front of the optimiser (decoding,
    denoising, defences); ``denoise``, ``row_update_bound`` and ``robust_aggregation`` add
    the denoising and defence stages with these explicit arguments.
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
        row_update_bound: float = 0.0,
        robust_aggregation: str = RobustRule.NONE,
        update_limit: float = UPDATE_LIMIT,
        value_limit: float = FLOAT32_LIMIT,
        stages: Sequence[ServerStage] = (),
    ) -> None:
        self.table = table
        self.round_start_table = table
        self.dense = dict(dense)
        self.optimizer = optimizer
        self.aggregation = aggregation
        self.zero_threshold = zero_threshold
        self.evaluate_round_start = evaluate_round_start
        self.update_limit = update_limit
        self.value_limit = value_limit  # the largest |value| of the table and dense parameters
        stages = list(stages)
        if denoise is not None:
            stages.append(Denoise(denoise))
        if row_update_bound > 0 or RobustRule(robust_aggregation) != RobustRule.NONE:
            stages.append(RowDefences(row_update_bound, robust_aggregation, aggregation))
        self.stages = ServerChain(stages, aggregation)
        self.touched_ever = np.zeros(len(table), dtype=bool)

    @classmethod
    def initial(cls, config: RunConfig, method: Method, num_items: int) -> ServerModel:
        """Round 1's model of a run: the seeded table, the method's shared-dense parameters,
        the configured aggregation rule, server optimiser and denoising."""
        table = initial_item_table(config, num_items, method.row_dim)
        shared = layout(method).shared_dense
        dense = {name: v for name, v in method.init_dense().items() if name in shared}
        return cls(
            table,
            dense,
            ServerOptimizer(
                config.server.server_optimizer,
                config.server.server_lr,
                config.server.server_momentum,
                config.server_rows.server_optimizer_rows,
            ),
            aggregation=config.learning.aggregation,
            zero_threshold=capabilities.zero_threshold(method),
            evaluate_round_start=layout(method).eval_table == "round-start",
            update_limit=config.defences.update_limit,
            stages=server_stages(config, method, num_items),
        )

    @property
    def num_items(self) -> int:
        return self.table.shape[0]

    @property
    def row_dim(self) -> int:
        return self.table.shape[1]

    def check_contributors(self, users_per_node: int) -> None:
        """Refuse a stage that cannot work with nodes of ``users_per_node`` users (robust
        aggregation: one reply is one contributor, the sum of its users' rows)."""
        self.stages.check_contributors(users_per_node)

    def limit_values(self, limit: float) -> None:
        """Refuse an update that would write a value beyond ``limit`` (``value_limit``)."""
        self.value_limit = limit

    def shapes(self) -> ModelShapes:
        """The table's shape and the shared-dense parameters' shapes."""
        dense = {name: value.shape for name, value in self.dense.items()}
        return ModelShapes(self.num_items, self.row_dim, dense)

    def decode(self, uploads: list[NodeUpload]) -> list[NodeUpload]:
        """The round's replies as row uploads (the stages' decoding: secure aggregation's
        sum)."""
        return self.stages.decode(uploads, self.shapes())

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

    def refusals(self, uploads: Sequence[Upload]) -> list[str | None]:
        """For each row upload, why it lies beyond ``update-limit`` (None: it does not)."""
        return [
            upload_violation(self.table, self.dense, upload, self.update_limit)
            for upload in uploads_of(RowUpload, uploads)
        ]

    def apply(self, uploads: Sequence[Upload]) -> np.ndarray:
        """Update the table and shared-dense parameters with a round's valid row uploads
        (see the module's doc; ``TypeError`` for an upload not decoded into rows); return
        the rows it touched. Uploads beyond ``update-limit`` are left out;
        :class:`UpdateRefusedError` (the model unchanged) when none is left, or when the
        update would write a value that is not finite or beyond ``value_limit``."""
        rows = uploads_of(RowUpload, uploads)
        if not rows:
            raise ValueError("no uploads to apply: a round without any leaves the model as it is")
        refusals = self.refusals(rows)
        rows = [upload for upload, why in zip(rows, refusals, strict=True) if why is None]
        if not rows:
            raise UpdateRefusedError(f"every upload of the round is refused: {refusals[0]}")
        touched, delta = self.stages.changes(self.table, rows)
        saved = {k: np.array(v) for k, v in self.optimizer.state_arrays().items()}
        with np.errstate(all="ignore"):
            table = self.optimizer.update_rows(self._shrunk(rows), touched, delta)
            if self.zero_threshold is not None:  # rows at or below it are zero (and not sent)
                table[np.abs(table).max(axis=1, initial=0.0) <= self.zero_threshold] = 0.0
            dense = {
                name: self.optimizer.update_dense(name, self.dense[name], change)
                for name, change in dense_changes(self.dense, rows).items()
            }
        why = self._out_of_range({"item-table": table, **dense})
        if why:
            self.optimizer.load_state_arrays(saved)
            raise UpdateRefusedError(f"the round's update would {why}; the model is left as it was")
        self.table, self.dense = table, dense
        self.touched_ever[touched] = True
        return touched

    def _out_of_range(self, values: Mapping[str, np.ndarray]) -> str | None:
        """Why one of ``values`` may not be written (non-finite, beyond ``value_limit``)."""
        for name, value in values.items():
            with np.errstate(all="ignore"):
                worst = float(np.abs(value).max(initial=0.0))
            if not np.isfinite(value).all():
                return f"make '{name}' non-finite"
            if worst > self.value_limit:
                return f"move '{name}' to {worst:.4g}, beyond {self.value_limit:.4g}"
        return None

    def _shrunk(self, uploads: Sequence[RowUpload]) -> np.ndarray:
        """The table with every row moved by ``- shrink * C_i / n`` (the users' factors on
        the rows they did not hold, ``weight-decay-rows = "all"``:
        :mod:`fedrec_flwr.node.dense_decay`; the uploads' changes are taken from the table
        before it, as a round mean of full tables does)."""
        shrink = sum(upload.row_shrink for upload in uploads)
        if not shrink:
            return self.table
        users = sum(upload.num_users for upload in uploads)
        return (self.table.astype(np.float64) * (1.0 - shrink / users)).astype(np.float32)

    def train_arrays(self) -> dict[str, np.ndarray]:
        """What a train message carries besides the users, rows and dense parameters:
        nothing (the item-item methods' support: :mod:`fedrec_flwr.server.statistics`)."""
        return {}

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
