"""Personal-row stores for the node's tests: a layered store built by rounds of random
replacements (:func:`random_layered_store`)."""

from __future__ import annotations

import numpy as np

from fedrec_flwr.node.layered import LayeredRows
from fedrec_flwr.node.personal import PersonalRows


def random_layered_store(
    rng: np.random.Generator,
    users: int,
    items: int,
    rounds: int,
    dim: int,
    max_block: int,
    specials: bool = False,
) -> LayeredRows:
    """A layered store after ``rounds`` rounds, each replacing the rows of about 60 % of the
    ``users`` by fewer than ``max_block`` distinct sorted items each (normal values;
    ``specials``: a round's first row NaN, infinity and -0.0)."""
    store = LayeredRows.of_store(PersonalRows.empty(users, dim))
    for _ in range(rounds):
        updated = np.flatnonzero(rng.random(users) < 0.6)
        blocks = [
            np.sort(rng.choice(items, int(rng.integers(0, max_block)), replace=False))
            for _ in updated
        ]
        positions = np.repeat(updated, [len(b) for b in blocks]).astype(np.int64)
        held = np.concatenate(blocks or [np.empty(0, np.int64)]).astype(np.int64)
        rows = rng.normal(size=(len(held), dim)).astype(np.float32)
        if specials and len(rows):
            rows[0] = [np.nan, np.inf, -0.0] + [0.0] * (dim - 3)
        store = store.replaced(updated, positions, held, rows)
    return store
