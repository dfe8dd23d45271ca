"""The effective rank of a user's personal rows (``erank-personal``) is that of the rows its
score function reads for the items it holds: for a method that reads its personal rows
alone, those rows taken from the store are what the general look-up gives, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.node.scoring import held_items, user_rows
from fedrec_flwr.server_app import initial_item_table
from fedrec_flwr.spectrum import effective_rank

SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 24,
    "synthetic-items": 300,
    "synthetic-mean-degree": 10,
    "batch-size": 32,
    "item-lr": 0.5,
}


@pytest.mark.parametrize("protocol", ["paper", "strict"])
def test_personal_erank_reads_the_rows_the_general_look_up_gives(protocol):
    config = RunConfig.from_mapping({**SMALL, "protocol": protocol})
    runtime = NodeRuntime(config, prepare(config), 0, 1)
    table = initial_item_table(config, runtime.prepared.num_items, runtime.method.row_dim)
    _, state = runtime.train(runtime.initial_state(), 1, runtime.users, None, table, {})
    item_ids = runtime.eval_items()  # the paper protocol's candidates; None: every row
    item_rows = table if item_ids is None else table[item_ids]
    positions = np.arange(len(runtime.users))
    params = runtime._eval_params(state, positions, {})
    measured = 0
    for j in positions:
        got = runtime._personal_erank(state, params, positions, j, item_ids, item_rows)
        items = held_items(state.personal, state.private_rows, int(j))
        if item_ids is not None:
            items = items[np.isin(items, item_ids)]
        if len(items) < 2:
            assert got is None
            continue
        rows, extras = user_rows(
            runtime.method,
            state.personal,
            state.private_rows,
            positions[j : j + 1],
            items[None],
            item_ids,
            item_rows,
        )
        assert not extras
        user = {n: v[j : j + 1] for n, v in params.items()}
        want = effective_rank(runtime.method.represent(user, torch.from_numpy(rows))[0])
        assert got == want
        measured += 1
    assert measured > len(positions) // 2
    # every user at once: the same matrices, of the users that hold two items or more
    batched = runtime._personal_matrices(state, params, positions, positions, item_ids, item_rows)
    alone = [
        runtime._personal_reps(state, params, positions, j, item_ids, item_rows) for j in positions
    ]
    alone = [m for m in alone if m is not None]
    assert len(batched) == len(alone) == measured
    assert all(
        torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(batched, alone, strict=True)
    )
