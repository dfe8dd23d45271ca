"""Flower ServerApp: meet the nodes, run the strategy, write the results."""

from __future__ import annotations

import time
from logging import ERROR, INFO

import numpy as np
import torch
from flwr.app import Context
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import data_dir_read
from fedrec_flwr.messages import array_record, dense_arrays
from fedrec_flwr.methods import build_method
from fedrec_flwr.results import RunRecorder
from fedrec_flwr.seeding import keyed_rng
from fedrec_flwr.server.checkpoint import Checkpoints
from fedrec_flwr.server.handshake import connect
from fedrec_flwr.server.in_flight import message_window, windowed
from fedrec_flwr.server.strategy import FedRecStrategy

app = ServerApp()


def initial_item_table(config: RunConfig, num_items: int, row_dim: int) -> np.ndarray:
    """The global item table of round 1: N(0, init-std^2), keyed by the seed."""
    rng = keyed_rng(config.seed, "item-init")
    return rng.normal(0.0, config.init_std, size=(num_items, row_dim)).astype(np.float32)


def run_federation(grid: Grid, config: RunConfig) -> dict:
    """Run one configured experiment on ``grid``; return its summary.

    The server reads no user's data: the numbers of users and items come from the nodes'
    handshake (:mod:`fedrec_flwr.server.handshake`), which also refuses inconsistent nodes.
    """
    started = time.perf_counter()
    grid = windowed(grid, message_window(config))
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    checkpoints = Checkpoints.open(config, started)  # a new run folder, or the resumed one
    run_dir = checkpoints.run_dir
    read = config.replace(data_dir=data_dir_read(config))  # the folder read, not ''
    resumed = checkpoints.resumed
    recorder = RunRecorder(
        run_dir,
        read,
        resumed.extra() if resumed else {},
        resumed_rows=resumed.rows() if resumed else None,
    )
    checkpoints.recorder = recorder
    try:
        federation = connect(grid, config, config.node_wait_timeout, config.round_timeout)
        num_users, num_items = federation.num_users, federation.num_items
        sources = sorted(set(federation.sources))
        log(
            INFO,
            "%s (%s protocol): %d users x %d items (split %s), read by the nodes from %s",
            config.dataset,
            config.protocol,
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
        method = build_method(config, num_items)
        table = initial_item_table(config, num_items, method.row_dim)
        strategy = FedRecStrategy(
            config, method, num_users, num_items, on_round=recorder.record_round
        )
        strategy.nodes = federation.nodes
        strategy.checkpoints = checkpoints
        shared = method.shared_dense_names()
        initial = array_record(
            dense_arrays({n: v for n, v in method.init_dense().items() if n in shared}),
            item_table=table,
        )
        strategy.start(
            grid,
            initial,
            num_rounds=config.num_server_rounds,
            timeout=config.round_timeout,
        )
    except BaseException as error:
        recorder.mark_incomplete(f"failed: {type(error).__name__}: {error}")
        raise
    recorder.extra["num_nodes"] = len(strategy.nodes)
    recorder.extra["stopped_early_round"] = strategy.stopped_early_round
    if resumed:  # the checkpoint's round (0: none, the run started again)
        recorder.extra["resumed_from_round"] = checkpoints.restore_round
    if strategy.best_val is not None and strategy.best_per_user is not None:
        try:  # per-user.csv: the per-user metrics of the best validation round
            recorder.write_per_user(strategy.best_val[1], *strategy.best_per_user)
        except ValueError as error:  # a bug: the summary is still written
            log(ERROR, "per-user.csv not written: %s", error)
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


@app.main()
def main(grid: Grid, context: Context) -> None:
    """ServerApp entry point."""
    try:
        config = RunConfig.from_mapping(context.run_config)
    except ValueError as error:
        log(ERROR, "invalid run config: %s", error)
        raise
    run_federation(grid, config)
