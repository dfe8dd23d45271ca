"""``server-optimizer-rows = "all"``: the server optimiser steps the whole item table every
round (FedRecGEL's reference code: ``torch.optim.Adam`` over the table, whose untouched rows
have a zero gradient), against PyTorch's own optimisers."""

import numpy as np
import pytest
import torch

from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.methods import build_method
from fedrec_flwr.server.model import ServerModel
from fedrec_flwr.server.optimizer import OptimizedRows, ServerOptimizer

TABLE = np.array([[1.0, 2.0], [-1.0, 0.5], [0.0, 3.0], [4.0, 4.0]], dtype=np.float32)
# (touched rows, their change) per round; row 3 is never touched, row 0 sits out round 2.
ROUNDS = [
    (np.array([0, 1]), np.array([[0.2, -0.4], [1.0, 0.1]])),
    (np.array([1, 2]), np.array([[-0.3, 0.6], [0.5, -0.5]])),
    (np.array([0]), np.array([[0.1, 0.1]])),
]


def torch_reference(rule: str, lr: float, momentum: float) -> list[np.ndarray]:
    """The table after each round, from PyTorch's optimiser over the whole table."""
    table = torch.nn.Parameter(torch.from_numpy(TABLE.astype(np.float64)))
    if rule == "adam":
        optimizer = torch.optim.Adam([table], lr=lr, betas=(momentum, 0.999), eps=1e-8)
    else:
        optimizer = torch.optim.SGD([table], lr=lr, momentum=momentum)
    history = []
    for touched, delta in ROUNDS:
        grad = torch.zeros_like(table)
        grad[torch.from_numpy(touched)] = -torch.from_numpy(delta)
        table.grad = grad
        optimizer.step()
        with torch.no_grad():  # the server keeps a float32 table
            table.copy_(table.float().double())
        history.append(table.detach().numpy().astype(np.float32))
    return history


@pytest.mark.parametrize("rule", ["adam", "sgd-momentum"])
def test_all_rows_step_like_the_optimiser_over_the_whole_table(rule):
    lr, momentum = 0.5, 0.8
    optimizer = ServerOptimizer(rule, lr, momentum, rows="all")
    expected = torch_reference(rule, lr, momentum)
    table = TABLE
    for r, (touched, delta) in enumerate(ROUNDS):
        table = optimizer.update_rows(table, touched, delta)
        assert table.dtype == np.float32
        assert table == pytest.approx(expected[r], rel=1e-6, abs=1e-7), f"round {r + 1}"
    # Row 0 moved in round 2 too (its momentum); row 3 was never pushed (zero moments, it
    # stays); one step count for the whole table.
    assert not np.array_equal(table[0], TABLE[0]) and np.array_equal(table[3], TABLE[3])
    if rule == "adam":
        assert optimizer.state_arrays()["rows/t"].tolist() == [3, 3, 3, 3]


def test_all_rows_moves_a_row_that_sat_out_the_round_where_touched_leaves_it():
    lazy = ServerOptimizer("adam", 0.1, 0.9)
    dense = ServerOptimizer("adam", 0.1, 0.9, rows=OptimizedRows.ALL)
    lazy_table, dense_table = TABLE, TABLE
    for touched, delta in ROUNDS[:2]:
        lazy_table = lazy.update_rows(lazy_table, touched, delta)
        dense_table = dense.update_rows(dense_table, touched, delta)
    # Round 1 is the same for both; in round 2 row 0 (untouched) keeps moving densely only.
    assert np.array_equal(lazy_table[0], lazy.update_rows(TABLE, *ROUNDS[0])[0])
    assert not np.array_equal(dense_table[0], lazy_table[0])


def test_server_optimizer_rows_is_configured_and_checked():
    config = RunConfig.from_mapping(
        {
            "method": "fedmf",
            "server-optimizer": "adam",
            "server-lr": 0.01,
            "server-optimizer-rows": "all",
        }
    )
    method = build_method(config, num_items=5)
    assert ServerModel.initial(config, method, 5).optimizer.rows is OptimizedRows.ALL
    assert RunConfig().server_rows.server_optimizer_rows == "touched"
    with pytest.raises(ConfigError, match="server-optimizer to 'adam'"):
        RunConfig.from_mapping({"server-optimizer-rows": "all"})
