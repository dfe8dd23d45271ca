"""A layered personal-row store's compaction (:meth:`LayeredRows.compact`): its compiled
copy of the segments' rows gives the NumPy copy's bytes."""

import numpy as np
import pytest

from fedrec_flwr.node import layered
from fedrec_flwr.node.layered import LayeredRows
from fedrec_lab.testing.stores import random_layered_store

DIM, ITEMS = 3, 40


def _store(seed: int) -> LayeredRows:
    """Rounds of replacements of random users' rows (NaN, infinities and -0.0 among them)."""
    rng = np.random.default_rng(seed)
    users = int(rng.integers(1, 12))
    rounds = int(rng.integers(2, 7))
    return random_layered_store(rng, users, ITEMS, rounds, DIM, 6, specials=True)


@pytest.mark.parametrize("seed", range(8))
def test_the_compiled_compaction_copies_what_the_numpy_one_copies(seed, monkeypatch):
    store = _store(seed)
    monkeypatch.setattr(layered, "COMPILED_TAKES", 1 << 62)
    plain = LayeredRows(store.segments, store.owner, store.ids).compact()
    monkeypatch.setattr(layered, "COMPILED_TAKES", 0)
    compiled = LayeredRows(store.segments, store.owner, store.ids).compact()
    assert np.array_equal(compiled.indptr, plain.indptr)
    assert np.array_equal(compiled.items, plain.items)
    assert compiled.rows.dtype == np.float32 and compiled.rows.shape == plain.rows.shape
    assert compiled.rows.tobytes() == plain.rows.tobytes()
