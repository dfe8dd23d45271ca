"""Each user's stored rows found from a map of its rows (``overlay_users``) replace the same
rows as the search of every (user, item) pair (``overlay_pairs``), in a CSR or a layered
store, with repeated candidates and items no one holds."""

import numpy as np
import pytest

from fedrec_flwr.node import scoring
from fedrec_flwr.node.layered import LayeredRows
from fedrec_flwr.node.scoring import overlay_users
from fedrec_lab.testing.stores import random_layered_store

DIM = 4


def _store(rng, users: int, items: int, rounds: int) -> LayeredRows:
    return random_layered_store(rng, users, items, rounds, DIM, 12)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("span", [30, 1 << 17])  # the map, and the search past MAPPED_ITEMS
def test_overlay_users_is_overlay_pairs(seed, span):
    rng = np.random.default_rng(seed)
    users, width = int(rng.integers(1, 40)), int(rng.integers(1, 25))
    items = min(span, 30 + seed)
    layered = _store(rng, users, items, int(rng.integers(1, 5)))
    stores = [layered, layered.compact()]
    positions = rng.permutation(users)[: int(rng.integers(1, users + 1))]
    wanted = rng.integers(0, items, (len(positions), width))
    if span > items:
        wanted[0, 0] = span - 1  # an item past the map's bound: the search per pair
    for store in stores:
        base = rng.normal(size=(wanted.size, DIM)).astype(np.float32)
        got, want = base.copy(), base.copy()
        overlay_users(store, positions, wanted, got)
        store.overlay_pairs(np.repeat(positions, width), wanted.reshape(-1), want)
        np.testing.assert_array_equal(got, want)
    assert scoring.MAPPED_ITEMS < 1 << 17
