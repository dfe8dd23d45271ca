"""``keep-personal-rows``: which tuned rows a user keeps and evaluates with (under
``strict`` a held-out item drawn as a round negative is otherwise scored from a row the item
step pushed down)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.server_app import initial_item_table

SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 24,
    "synthetic-items": 300,
    "synthetic-mean-degree": 10,
    "batch-size": 32,
    "item-lr": 0.5,
}


def trained_rows(keep: str, **extra):
    """Train one round on a node of 3: the runtime, the personal items each of its users
    keeps, the node's state and the table it trained from."""
    config = RunConfig.from_mapping({**SMALL, "keep-personal-rows": keep, **extra})
    prepared = prepare(config)
    runtime = NodeRuntime(config, prepared, 1, 3)
    table = initial_item_table(config, prepared.num_items, runtime.method.row_dim)
    _, state = runtime.train(runtime.initial_state(), 1, runtime.users, None, table, {})
    kept = {int(u): state.personal.of(j)[0] for j, u in enumerate(runtime.users)}
    return runtime, kept, state, table


@pytest.mark.parametrize("extra", [{}, {"method": "fedmf", "personalization": "dual"}])
def test_positives_keeps_exactly_the_train_positives_tuned_keeps_negatives_too(extra):
    runtime, tuned, _, _ = trained_rows("tuned", **extra)
    _, positives, _, _ = trained_rows("positives", **extra)
    prepared = runtime.prepared
    some_negatives = 0
    for user, items in positives.items():
        train = np.unique(prepared.train_positives(user))
        assert np.array_equal(items, train), user
        assert np.isin(train, tuned[user]).all()
        some_negatives += len(np.setdiff1d(tuned[user], train))
    assert some_negatives > 0  # "tuned" keeps the rows of sampled negatives as well


def test_positives_gives_other_metrics_than_tuned_on_the_same_rows():
    results = {}
    for keep in ("tuned", "positives"):
        runtime, _, state, table = trained_rows(keep)
        results[keep] = runtime.evaluate(state, None, table, {})
    assert results["tuned"] != results["positives"]


def test_keep_personal_rows_is_refused_where_it_cannot_apply():
    with pytest.raises(ConfigError, match="keeps none"):
        RunConfig.from_mapping({**SMALL, "method": "fedmf", "keep-personal-rows": "positives"})
    with pytest.raises(ConfigError, match="plgc-persist"):
        RunConfig.from_mapping(
            {**SMALL, "plgc": True, "plgc-persist": True, "keep-personal-rows": "positives"}
        )
    with pytest.raises(ConfigError, match="keep-personal-rows"):
        RunConfig.from_mapping({**SMALL, "keep-personal-rows": "all"})
    RunConfig.from_mapping({**SMALL, "plgc": True, "keep-personal-rows": "positives"})


def test_paper_protocol_vectorised_candidates_and_kept_rows_are_the_per_user_ones(monkeypatch):
    """The paper protocol's candidates and kept-row mask for many users at once are those
    of :meth:`candidates` and :meth:`keep_personal`, user by user (users with no rows and
    rows outside the candidates included), by the sort and by the compiled loop."""
    from fedrec_flwr.node import protocols
    from fedrec_flwr.node.protocols import PaperProtocol

    config = RunConfig.from_mapping({**SMALL, "protocol": "paper"})
    protocol = PaperProtocol(prepare(config), seed=0)
    rng = np.random.default_rng(0)
    users = rng.permutation(SMALL["synthetic-users"])[:10]
    stacked = np.stack([protocol.candidates(int(u)) for u in users])
    assert np.array_equal(protocol.candidates_of(users), stacked)
    blocks = [
        np.sort(np.r_[rng.choice(stacked[j], 5), rng.integers(0, 300, int(rng.integers(0, 9)))])
        if j % 4
        else np.empty(0, np.int64)
        for j in range(len(users))
    ]
    offsets = np.r_[0, np.cumsum([len(b) for b in blocks])]
    items = np.concatenate(blocks).astype(np.int64)
    pairs = zip(users, blocks, strict=True)
    want = np.concatenate([protocol.keep_personal(int(u), b) for u, b in pairs])
    for compiled_rows in (1 << 62, 0):  # the sort, then the compiled loop
        monkeypatch.setattr(protocols, "COMPILED_ROWS", compiled_rows)
        got = protocol.keep_personal_rows(users, offsets, items)
        assert got.dtype == bool and np.array_equal(got, want) and want.any() and not want.all()
