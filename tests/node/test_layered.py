"""The layered personal-row store answers every read as the CSR store it stands for."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrec_flwr.node import layered
from fedrec_flwr.node.layered import LayeredRows, store_from_arrays
from fedrec_flwr.node.personal import PersonalRows

DIM, ITEMS = 3, 40


def updates(rng, users: int, share: float):
    """One round's replacement: (updated positions, row positions, items, rows)."""
    updated = np.flatnonzero(rng.random(users) < share)
    blocks = [
        np.sort(rng.choice(ITEMS, size=int(rng.integers(0, 6)), replace=False)) for _ in updated
    ]
    positions = np.repeat(updated, [len(b) for b in blocks]).astype(np.int64)
    items = np.concatenate(blocks or [np.empty(0)]).astype(np.int64)
    rows = rng.normal(size=(len(items), DIM)).astype(np.float32)
    return updated, positions, items, rows


def same_store(got: LayeredRows, want: PersonalRows) -> None:
    compact = got.compact()
    assert np.array_equal(compact.indptr, want.indptr)
    assert np.array_equal(compact.items, want.items)
    assert np.array_equal(compact.rows, want.rows)
    assert np.array_equal(got.counts(), want.counts())


@settings(max_examples=40, deadline=None)
@given(
    users=st.integers(1, 10),
    rounds=st.integers(1, 14),
    seed=st.integers(0, 10_000),
    share=st.floats(0.0, 1.0),
)
def test_rounds_of_replacements_read_as_the_csr_store(users, rounds, seed, share):
    rng = np.random.default_rng(seed)
    want = PersonalRows.empty(users, DIM)
    got = LayeredRows.of_store(want)
    for _ in range(rounds):
        change = updates(rng, users, share)
        want = want.replaced(*change)
        got = got.replaced(*change)
        assert len(got.segments) <= layered.MAX_SEGMENTS
        same_store(got, want)
        positions = rng.integers(0, users, 30)
        items = rng.integers(0, ITEMS, 30)
        assert np.array_equal(got.gathered(positions, items), want.gathered(positions, items))
        base = rng.normal(size=(30, DIM)).astype(np.float32)
        mine, theirs = base.copy(), base.copy()
        got.overlay_pairs(positions, items, mine)
        want.overlay_pairs(positions, items, theirs)
        assert np.array_equal(mine, theirs)
        asked = rng.permutation(users)[: int(rng.integers(0, users + 1))]
        storage, expected = got.storage_of(asked), want.storage_of(asked)
        assert np.array_equal(got.take_items(storage), want.take_items(expected))
        assert np.array_equal(got.take_rows(storage), want.take_rows(expected))
        for position in range(users):
            for mine_part, theirs_part in zip(got.of(position), want.of(position), strict=True):
                assert np.array_equal(mine_part, theirs_part)
        back = store_from_arrays(got.to_arrays())
        same_store(LayeredRows.of_store(back), want)


def test_a_store_of_many_segments_keeps_them_until_the_dead_rows_dominate():
    rng = np.random.default_rng(0)
    users = 50
    got = LayeredRows.of_store(PersonalRows.empty(users, DIM))
    for _ in range(3):  # a tenth of the users per round: no copy of the others' rows
        got = got.replaced(*updates(rng, users, 0.1))
    assert len(got.segments) > 1
    arrays = got.to_arrays()
    assert layered.OWNER in arrays
    assert isinstance(store_from_arrays(arrays), LayeredRows)
    everyone = got.replaced(*updates(rng, users, 1.0))  # every user replaced: one segment
    assert len(everyone.segments) == 1
    assert set(everyone.to_arrays()) == {"personal-indptr", "personal-items", "personal-rows"}


def test_context_state_writes_each_segment_once_and_reads_back_elsewhere():
    from flwr.app import Context, RecordDict

    from fedrec_flwr.node import context_state
    from fedrec_flwr.node.state import NodeState

    rng = np.random.default_rng(1)
    users = 20
    context = Context(run_id=5, node_id=9, node_config={}, state=RecordDict(), run_config={})
    private = {"w": torch.arange(users, dtype=torch.float32)}
    store = LayeredRows.of_store(PersonalRows.empty(users, DIM))
    written = {}
    for _ in range(4):
        store = store.replaced(*updates(rng, users, 0.3))
        state = NodeState(private, store)
        context_state.save(context, state)
        assert context_state.load(context) is state  # this process: no decoding
        for segment in state.personal.segments:  # the rows are the records' bytes
            assert not segment.rows.flags.writeable and not segment.rows.flags.owndata
        same_store(state.personal, store.compact())
        parts = {k: v for k, v in context.state.items() if k.startswith(context_state.PART_PREFIX)}
        assert len(parts) == len(store.segments) > 1
        for key, record in parts.items():  # a kept segment's record is not written again
            assert written.get(key, record) is record
        written = parts
        context_state._WRITTEN.clear()  # another process: decodes the records
        loaded = context_state.load(context)
        assert isinstance(loaded.personal, LayeredRows)
        assert loaded.personal.ids == store.ids
        same_store(loaded.personal, store.compact())
    context_state.save(context, NodeState(private, PersonalRows.empty(users, DIM)))
    assert not any(k.startswith(context_state.PART_PREFIX) for k in context.state)


@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_take_reads_what_the_numpy_one_reads(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    users = int(rng.integers(1, 12))
    store = LayeredRows.of_store(PersonalRows.empty(users, DIM))
    for _ in range(int(rng.integers(1, 6))):
        store = store.replaced(*updates(rng, users, 0.6))
    if len(store.segments[-1].rows):  # NaN and infinities are copied as they are
        store.segments[-1].rows[0, :] = [np.nan, np.inf, -0.0]
    asked = rng.permutation(users)[: int(rng.integers(0, users + 1))]
    storage = store.storage_of(asked)
    scrambled = rng.permutation(storage)  # any order, not only user after user
    for indices in (storage, scrambled, storage[:0]):
        monkeypatch.setattr(layered, "COMPILED_TAKES", 1 << 62)
        plain = store.take_items(indices), store.take_rows(indices)
        monkeypatch.setattr(layered, "COMPILED_TAKES", 0)
        compiled = store.take_items(indices), store.take_rows(indices)
        for mine, theirs in zip(compiled, plain, strict=True):
            assert mine.dtype == theirs.dtype and mine.shape == theirs.shape
            np.testing.assert_array_equal(mine.view(np.uint8), theirs.view(np.uint8))
