"""Flower ServerApp: prepare the data, run the strategy, write the results."""

from __future__ import annotations

import time
from logging import ERROR, INFO

import numpy as np
import torch
from flwr.app import Context
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import data_dir_read, prepare
from fedrec_flwr.messages import array_record, dense_arrays
from fedrec_flwr.methods import build_method
from fedrec_flwr.results import RunRecorder, new_run_dir
from fedrec_flwr.seeding import keyed_rng
from fedrec_flwr.strategy import FedRecStrategy

app = ServerApp()


def initial_item_table(config: RunConfig, num_items: int, row_dim: int) -> np.ndarray:
    """The global item table of round 1: N(0, init-std^2), keyed by the seed."""
    rng = keyed_rng(config.seed, "item-init")
    return rng.normal(0.0, config.init_std, size=(num_items, row_dim)).astype(np.float32)


def run_federation(grid: Grid, config: RunConfig) -> dict:
    """Run one configured experiment on ``grid``; return its summary."""
    started = time.perf_counter()
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    prepared = prepare(config)
    log(
        INFO,
        "%s (%s protocol): %d users x %d items, %d train rows; prepared in %s",
        config.dataset,
        config.protocol,
        prepared.num_users,
        prepared.num_items,
        prepared.num_train_rows,
        prepared.path,
    )
    if config.protocol == "paper":
        prepared.eval_negatives(config.seed)  # drawn once here, read by every node
    run_dir = new_run_dir(config)
    recorder = RunRecorder(
        run_dir,
        config.replace(data_dir=data_dir_read(config)),  # the folder read, not ''
        {"num_users": prepared.num_users, "num_items": prepared.num_items},
    )
    method = build_method(config, prepared.num_items)
    table = initial_item_table(config, prepared.num_items, method.row_dim)
    strategy = FedRecStrategy(
        config, method, prepared.num_users, prepared.num_items, on_round=recorder.record_round
    )
    initial = array_record(item_table=table)
    for name, array in dense_arrays(
        {n: v for n, v in method.init_dense().items() if n in method.shared_dense_names()}
    ).items():
        initial[name] = array
    try:
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
    summary = recorder.finish(time.perf_counter() - started)
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
