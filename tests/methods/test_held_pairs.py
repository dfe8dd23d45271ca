"""Strict evaluation of held rows: the flat (user, item) pair path gives, bit for bit, the
scores of the padded [users, most held, r] block, for every method that declares row-wise
logits; and a method that declares them really has them."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrec_flwr.config import RunConfig
from fedrec_flwr.methods import build_method
from fedrec_flwr.methods.capabilities import rowwise_logits
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node.personal import PersonalRows
from fedrec_flwr.node.scoring import held_items, lookup_rows, score_held_padded, score_held_pairs
from fedrec_lab.testing import TINY, user_params

ITEMS = 60
ROWWISE = {
    "fedrap": {"method": "fedrap"},
    "fedrap-plgc": {"method": "fedrap", "plgc": True},
    "pfedrec-plgc": {"method": "pfedrec", "plgc": True},
    "fedmf-dual-plgc": {"method": "fedmf", "personalization": "dual", "plgc": True},
    "pfedrec": {"method": "pfedrec"},
    "fedmf": {"method": "fedmf"},
}


def method_of(overrides: dict):
    return build_method(RunConfig.from_mapping({**TINY, **overrides}), ITEMS)


def random_store(rng, users: int, dim: int, most: int, items: int = ITEMS) -> PersonalRows:
    """Each user holds a random number (0 to ``most``) of sorted distinct items."""
    blocks = [
        np.sort(rng.choice(items, int(rng.integers(0, most + 1)), replace=False))
        for _ in range(users)
    ]
    items = np.concatenate(blocks).astype(np.int64)
    return PersonalRows(
        indptr=np.r_[0, np.cumsum([len(b) for b in blocks])].astype(np.int64),
        items=items,
        rows=rng.normal(size=(len(items), dim)).astype(np.float32),
    )


@pytest.mark.parametrize("name", ["fedrap", "fedrap-plgc", "pfedrec-plgc", "fedmf-dual-plgc"])
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), users=st.integers(1, 9), chunk=st.sampled_from([1, 7, 1 << 26]))
def test_flat_pairs_score_the_held_rows_exactly_as_the_padded_block(name, seed, users, chunk):
    method = method_of(ROWWISE[name])
    assert rowwise_logits(method)
    rng = np.random.default_rng(seed)
    params = user_params(method, np.arange(users) * 5 + 1, rng)
    table = rng.normal(size=(ITEMS, method.row_dim)).astype(np.float32)
    personal = random_store(rng, users, method.row_dim, 20)
    private = {
        n: random_store(rng, users, method.row_dim, ITEMS) for n in layout(method).private_rows
    }
    positions = np.arange(users)
    held = [held_items(personal, private, int(p)) for p in positions]
    if not sum(len(h) for h in held):
        return
    base = method.logits_all(params, torch.from_numpy(table))
    padded, flat = base.clone(), base.clone()
    score_held_padded(method, params, personal, private, positions, held, table, padded)
    import fedrec_flwr.node.scoring as protocols

    saved = protocols.PAIR_CHUNK_BYTES
    protocols.PAIR_CHUNK_BYTES = chunk  # 1 and 7 bytes: one pair per chunk
    try:
        score_held_pairs(method, params, personal, private, positions, held, table, flat)
    finally:
        protocols.PAIR_CHUNK_BYTES = saved
    assert torch.equal(padded, flat)
    assert not torch.equal(padded, base)  # the held rows were rescored


@pytest.mark.parametrize("name", sorted(ROWWISE))
def test_rowwise_logits_do_not_depend_on_the_batch_shape(name):
    """What ``rowwise_logits`` promises: [a, k, r] scored at once equals each row scored
    alone as a [1, 1, r] batch with its user's parameters."""
    method = method_of(ROWWISE[name])
    assert rowwise_logits(method)
    rng = np.random.default_rng(3)
    users, k = 5, 37
    params = user_params(method, np.arange(users), rng)
    rows = torch.from_numpy(rng.normal(size=(users, k, method.row_dim)).astype(np.float32))
    extras = {
        n: torch.from_numpy(rng.normal(size=(users, k, method.row_dim)).astype(np.float32))
        for n in (*layout(method).private_rows, *layout(method).global_rows)
    }
    together = method.logits({**params, **extras}, rows)
    for j in range(users):
        for i in range(k):
            one = {n: v[j : j + 1] for n, v in params.items()}
            one.update({n: v[j : j + 1, i : i + 1] for n, v in extras.items()})
            assert torch.equal(method.logits(one, rows[j : j + 1, i : i + 1])[0, 0], together[j, i])


def test_fedncf_is_not_declared_rowwise():
    """Its MLP is a matrix product: held rows keep the padded path."""
    assert not rowwise_logits(method_of({"method": "fedncf", "personalization": "dual"}))
    assert not rowwise_logits(
        method_of({"method": "fedncf", "personalization": "dual", "plgc": True})
    )


@pytest.mark.usefixtures("private_cache")
@pytest.mark.parametrize("name", ["pfedrec", "fedrap", "pfedrec-plgc", "fedmf-dual-plgc"])
def test_strict_ranks_are_the_same_on_either_path(name):
    """StrictProtocol.ranks with the flat pairs and with the padded block (the method
    told it has no row-wise logits): the same ranks, for personal rows alone (PFedRec) and
    with private rows and global views."""
    from fedrec_flwr.data.prepared import prepare
    from fedrec_flwr.node.protocols import StrictProtocol

    config = RunConfig.from_mapping({**TINY, **ROWWISE[name]})
    prepared = prepare(config)
    method = build_method(config, prepared.num_items)
    rng = np.random.default_rng(11)
    users = np.arange(12)
    params = user_params(method, users, rng)
    table = rng.normal(size=(prepared.num_items, method.row_dim)).astype(np.float32)
    personal = random_store(rng, len(users), method.row_dim, 30, prepared.num_items)
    private = {
        n: random_store(rng, len(users), method.row_dim, 120, prepared.num_items)
        for n in layout(method).private_rows
    }
    protocol = StrictProtocol(prepared, 0)
    args = (params, personal, users, users, None, table, private)
    flat = protocol.ranks(method, *args)
    method.rowwise_logits = False
    padded = protocol.ranks(method, *args)
    for field in ("val", "test", "sampled_val", "sampled_test"):
        assert np.array_equal(getattr(flat, field), getattr(padded, field))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), lookups=st.sampled_from([0, 3, 500]))
def test_lookup_rows_from_a_sparse_table_on_either_branch(seed, lookups):
    """Few lookups search the sorted ids; many (> 4 per id) go through a position map:
    both give the table's rows, and both refuse an item the server did not send."""
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(ITEMS, int(rng.integers(1, 20)), replace=False)).astype(np.int64)
    rows = rng.normal(size=(len(ids), 4)).astype(np.float32)
    items = rng.choice(ids, lookups)
    expected = rows[np.searchsorted(ids, items)]
    np.testing.assert_array_equal(lookup_rows(items, ids, rows), expected)
    full = rng.normal(size=(ITEMS, 4)).astype(np.float32)
    np.testing.assert_array_equal(lookup_rows(items, None, full), full[items])
    absent = np.setdiff1d(np.arange(ITEMS + 5), ids)
    bad = np.r_[items, rng.choice(absent)]
    with pytest.raises(RuntimeError, match="missing"):
        lookup_rows(bad, ids, rows)
