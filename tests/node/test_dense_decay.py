"""``weight-decay-rows = "all"`` (weight decay on every item row, as dense gradients apply it)
and FedRAP's ``fedrap-local-init = "normal"``, from their equations: the server's table is
the plain round mean of the users' full tables, each row a user did not hold shrunk by its
factor; ``D_u``'s rows a user does not hold decay by the same factor, from the shared initial
table when never trained."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedrec_flwr.aggregation import RowUpload
from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.methods.capabilities import private_rows_in
from fedrec_flwr.methods.fedrap_local import LOCAL, SCALE
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.server.model import ServerModel, initial_item_table
from fedrec_lab.testing import TINY

RATE, DECAY = 0.5, 0.1
BASE = {
    **TINY,
    "item-lr": RATE,
    "item-lr-scaling": "none",
    "lr": RATE,
    "weight-decay": DECAY,
    "weight-decay-rows": "all",
    "batch-size": 8,
    "local-epochs": 2,
}


def nodes(mapping):
    config = RunConfig.from_mapping(mapping)
    prepared = prepare(config)
    return config, prepared, [NodeRuntime(config, prepared, u, 3) for u in range(3)]


def steps_of(node: NodeRuntime, user: int, config) -> int:
    """The user's local steps in round 1: epochs x batches of its samples."""
    positives = len(node.prepared.train_positives(user))
    samples = positives * (1 + config.training.num_negatives)
    return config.training.local_epochs * -(-samples // config.training.batch_size)


def test_the_table_is_the_round_mean_of_full_tables_with_the_factor_on_rows_not_held():
    config, prepared, runtimes = nodes({**BASE, "method": "fedmf"})
    _, _, held_runtimes = nodes({**BASE, "method": "fedmf", "weight-decay-rows": "held"})
    table = initial_item_table(config, prepared.num_items, config.learning.embedding_dim)
    uploads, full_tables = [], []
    for node, plain in zip(runtimes, held_runtimes, strict=True):
        for user in node.users[:2].tolist():  # one user at a time: its own factor
            users = np.array([user])
            result, _ = node.train(node.initial_state(), 1, users, None, table)
            raw, _ = plain.train(plain.initial_state(), 1, users, None, table)
            factor = (1 - RATE * DECAY) ** steps_of(node, user, config)
            assert result.row_shrink == pytest.approx(1 - factor, rel=1e-6)
            full = table.astype(np.float64) * factor  # its full table: rows not held shrink
            full[raw.item_ids] = raw.row_sums  # the rows it held: as trained (decayed there)
            full_tables.append(full)
            uploads.append(
                RowUpload(result.item_ids, result.row_sums, result.row_counts, 1, {},
                          row_shrink=result.row_shrink)
            )  # fmt: skip
    model = ServerModel.initial(config, runtimes[0].method, prepared.num_items)
    model.load_initial(table, {})
    model.apply(uploads)
    np.testing.assert_allclose(model.table, np.mean(full_tables, axis=0), rtol=1e-5, atol=1e-6)


def test_fedrap_local_rows_decay_where_not_held_and_start_from_the_shared_table():
    mapping = {**BASE, "method": "fedrap", "fedrap-local-init": "normal", "protocol": "paper"}
    config, prepared, (node, *_) = nodes(mapping)
    method = node.method
    state = node.initial_state()
    assert torch.equal(state.private[SCALE], torch.ones(len(node.users)))
    table = initial_item_table(config, prepared.num_items, config.learning.embedding_dim)
    user = node.users[:1]
    _, state = node.train(state, 1, user, None, table)
    factor = (1 - RATE * DECAY) ** steps_of(node, int(user[0]), config)
    assert float(state.private[SCALE][0]) == pytest.approx(factor, rel=1e-5)
    assert float(state.private[SCALE][1]) == 1.0  # a user that did not train
    held = state.private_rows[LOCAL].of(0)[0]
    never = np.setdiff1d(np.arange(prepared.num_items), held)[:5]
    stored = state.private_rows[LOCAL].gathered(np.zeros(len(never), np.int64), never)
    assert not stored.any()  # stored: the offset from the shared table
    values = private_rows_in(method, LOCAL, stored, never)
    np.testing.assert_array_equal(values, method.local.initial[never])
    params = {SCALE: state.private[SCALE][:1], LOCAL: torch.from_numpy(values)[None]}
    reps = method.represent(params, torch.zeros(1, len(never), config.learning.embedding_dim))
    torch.testing.assert_close(reps[0], torch.from_numpy(method.local.initial[never]) * factor)


@pytest.mark.parametrize(
    "change",
    [{"secure-aggregation": True}, {"server-optimizer": "adam"}, {"method": "pfedrec"}],
)
def test_dense_decay_refuses_what_it_cannot_follow(change):
    with pytest.raises(ConfigError, match="weight-decay-rows"):
        RunConfig.from_mapping({**BASE, "method": "fedmf", **change})
