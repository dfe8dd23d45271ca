"""The personal-row store: vectorised replacement against a per-user reference."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrec_flwr.node.personal import PersonalRows


def store_from(blocks: list[np.ndarray], dim: int, rng) -> PersonalRows:
    counts = [len(b) for b in blocks]
    items = np.concatenate(blocks).astype(np.int64) if blocks else np.empty(0, np.int64)
    return PersonalRows(
        indptr=np.r_[0, np.cumsum(counts)].astype(np.int64),
        items=items,
        rows=rng.normal(size=(len(items), dim)).astype(np.float32),
    )


def reference(store: PersonalRows, updates: dict[int, tuple[np.ndarray, np.ndarray]]):
    """The per-user loop the vectorised version replaced."""
    items, rows, counts = [], [], []
    for position in range(len(store.indptr) - 1):
        i, r = updates.get(position) or store.of(position)
        items.append(i)
        rows.append(r)
        counts.append(len(i))
    return np.r_[0, np.cumsum(counts)], np.concatenate(items), np.concatenate(rows)


@settings(max_examples=60, deadline=None)
@given(
    users=st.integers(1, 12),
    seed=st.integers(0, 10_000),
    share=st.floats(0.0, 1.0),
    shuffled=st.booleans(),
)
def test_replaced_equals_the_per_user_reference(users, seed, share, shuffled):
    rng = np.random.default_rng(seed)
    dim = 3

    def block() -> np.ndarray:
        return np.sort(rng.choice(50, size=int(rng.integers(0, 6)), replace=False))

    store = store_from([block() for _ in range(users)], dim, rng)
    updated = np.flatnonzero(rng.random(users) < share)
    new_blocks = {int(p): block() for p in updated}
    new_rows = {p: rng.normal(size=(len(b), dim)).astype(np.float32) for p, b in new_blocks.items()}
    order = list(new_blocks)
    if shuffled:
        rng.shuffle(order)
    positions = np.concatenate([np.full(len(new_blocks[p]), p) for p in order] or [[]])
    items = np.concatenate([new_blocks[p] for p in order] or [[]])
    rows = np.concatenate([new_rows[p] for p in order] or [np.zeros((0, dim))])
    got = store.replaced(updated, positions, items, rows)
    indptr, ref_items, ref_rows = reference(
        store, {p: (new_blocks[p], new_rows[p]) for p in new_blocks}
    )
    assert np.array_equal(got.indptr, indptr)
    assert np.array_equal(got.items, ref_items)
    assert np.array_equal(got.rows, ref_rows)


def test_chunked_float64_row_sums_equal_one_index_add():
    import torch

    from fedrec_flwr.node.upload import SUM_CHUNK, float64_row_sums

    rng = np.random.default_rng(0)
    rows = rng.normal(size=(3 * SUM_CHUNK + 7, 4)).astype(np.float32)
    inverse = rng.integers(0, 50, len(rows))
    whole = torch.zeros(50, 4, dtype=torch.float64)
    whole.index_add_(0, torch.from_numpy(inverse), torch.from_numpy(rows).double())
    assert torch.equal(float64_row_sums(inverse, rows, 50, min_rows=1 << 30), whole)
    assert torch.equal(float64_row_sums(inverse, rows, 50, min_rows=0), whole)  # compiled
