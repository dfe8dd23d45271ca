"""Flower ServerApp: meet the nodes, run the strategy, write the results."""

from __future__ import annotations

import time
from logging import ERROR, INFO
from typing import Any

import torch
from flwr.app import Context
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import data_dir_read
from fedrec_flwr.methods import Method, build_method
from fedrec_flwr.methods.itemitem import uploads_statistics
from fedrec_flwr.privacy.accounting import summary_fields
from fedrec_flwr.results import RunRecorder
from fedrec_flwr.server.checkpoint import Checkpoints, open_run
from fedrec_flwr.server.global_model import GlobalModel
from fedrec_flwr.server.handshake import Federation, connect
from fedrec_flwr.server.in_flight import message_window, windowed
from fedrec_flwr.server.model import ServerModel, initial_item_table
from fedrec_flwr.server.statistics import StatisticsModel
from fedrec_flwr.server.strategy import FedRecStrategy, model_record

__all__ = ["app", "initial_item_table", "run_federation"]

app = ServerApp()


def run_federation(grid: Grid, config: RunConfig) -> dict:
    """Run one configured experiment on ``grid``; return its summary.

    The server reads no user's data: the numbers of users and items come from the nodes'
    handshake (:mod:`fedrec_flwr.server.handshake`), which also refuses inconsistent nodes.
    """
    started = time.perf_counter()
    grid = windowed(grid, message_window(config))
    if config.execution.torch_threads:
        torch.set_num_threads(config.execution.torch_threads)
    run_dir, resumed = open_run(config)  # a new run folder, or the resumed one
    read = config.replace(data_dir=data_dir_read(config))  # the folder read, not ''
    recorder = RunRecorder(
        run_dir,
        read,
        resumed.extra() if resumed else {},
        resumed_rows=resumed.rows() if resumed else None,
    )
    checkpoints = Checkpoints(run_dir, config, started, recorder, resumed)
    try:
        federation = connect(
            grid, config, config.execution.node_wait_timeout, config.execution.round_timeout
        )
        describe(config, federation, recorder, resumed)
        strategy = run_strategy(grid, config, federation, recorder, checkpoints)
    except BaseException as error:
        recorder.mark_incomplete(f"failed: {type(error).__name__}: {error}")
        raise
    record_outcome(config, strategy, recorder, checkpoints, bool(resumed))
    summary = recorder.finish(time.perf_counter() - started + checkpoints.prior_seconds)
    checkpoints.completed()
    log(
        INFO,
        "best validation round %s: test %s",
        summary["best_round"],
        " ".join(f"{k} {v:.4f}" for k, v in summary["test"].items()),
    )
    log(INFO, "results written to %s", run_dir.resolve())
    return summary


def describe(
    config: RunConfig, federation: Federation, recorder: RunRecorder, resumed: Any
) -> None:
    """Log the federation's data, check it against a resumed run's and record it."""
    num_users, num_items = federation.num_users, federation.num_items
    sources = sorted(set(federation.sources))
    log(
        INFO,
        "%s (%s protocol): %d users x %d items (split %s), read by the nodes from %s",
        config.data.dataset,
        config.training.protocol,
        num_users,
        num_items,
        federation.data.fingerprint[:12],
        "the shared split" if sources == ["shared"] else "their own folders",
    )
    if resumed:
        resumed.check_data(num_users, num_items, federation.data.fingerprint)
    recorder.describe(
        num_users=num_users,
        num_items=num_items,
        data_fingerprint=federation.data.fingerprint,
        node_data=federation.sources,
    )


def server_model(config: RunConfig, method: Method, num_items: int) -> GlobalModel:
    """Round 1's model of the server: the item-item sums of a method that uploads
    co-occurrences (:func:`uploads_statistics`), else the trained item table."""
    if not uploads_statistics(method):
        return ServerModel.initial(config, method, num_items)
    return StatisticsModel(config, method, num_items)


def run_strategy(
    grid: Grid,
    config: RunConfig,
    federation: Federation,
    recorder: RunRecorder,
    checkpoints: Checkpoints,
) -> FedRecStrategy:
    """Build the method, the server's model and the strategy; run the rounds."""
    method = build_method(config, federation.num_items)
    model = server_model(config, method, federation.num_items)
    strategy = FedRecStrategy(
        config,
        method,
        model,
        federation,
        on_round=recorder.record_round,
        checkpoints=checkpoints,
    )
    strategy.start(
        grid,
        model_record(model),
        num_rounds=config.training.num_server_rounds,
        timeout=config.execution.round_timeout,
    )
    return strategy


def record_outcome(
    config: RunConfig,
    strategy: FedRecStrategy,
    recorder: RunRecorder,
    checkpoints: Checkpoints,
    resumed: bool,
) -> None:
    """The run's outcome in its summary (nodes, early stop, resumption, LDP's user-level
    epsilon, the item-item sums' mechanism) and ``per-user.csv`` (the best validation
    round's per-user metrics)."""
    stopping = strategy.stopping
    recorder.extra["num_nodes"] = len(strategy.nodes)
    recorder.extra["stopped_early_round"] = stopping.stopped_early_round
    if resumed:  # the checkpoint's round (0: none, the run started again)
        recorder.extra["resumed_from_round"] = checkpoints.restore_round
    if stopping.best_val is not None and stopping.best_per_user is not None:
        try:  # per-user.csv: the per-user metrics of the best validation round
            recorder.write_per_user(stopping.best_val[1], *stopping.best_per_user)
        except ValueError as error:  # a bug: the summary is still written
            log(ERROR, "per-user.csv not written: %s", error)
    recorder.extra.update(summary_fields(config, recorder.rows))  # LDP's user-level epsilon
    if isinstance(strategy.model, StatisticsModel) and strategy.model.noise is not None:
        recorder.extra["dp_user_level"] = strategy.model.dp_record()  # the sums' mechanism


@app.main()
def main(grid: Grid, context: Context) -> None:
    """ServerApp entry point."""
    try:
        config = RunConfig.from_mapping(context.run_config)
    except ValueError as error:
        log(ERROR, "invalid run config: %s", error)
        raise
    run_federation(grid, config)
