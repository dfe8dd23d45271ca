"""Negative sampling: uniform draws over the items outside a user's exclusion set."""

from __future__ import annotations

from enum import StrEnum

import numpy as np

from fedrec_flwr.schema import Group, key


class NegativeSampler(StrEnum):
    """``negative-sampler``: the generator of a user's training negatives."""

    KEYED_NUMPY = "keyed-numpy"
    COUNTER = "counter"


#: The training negatives' generator (both keyed by (seed, user, round): packing-invariant).
class NegativeSamplerKeys(Group):
    title = "Negative sampling"

    negative_sampler: str = key(
        default="keyed-numpy",
        help="`keyed-numpy`: a NumPy generator per (seed, user, round), drawn user by user; "
        "`counter`: Philox4x32-10 of (seed, user, round, draw) in tensor ops, every user "
        "of a round at once, the same on CPU and CUDA, and the epochs' shuffles and "
        "mini-batch plan from it in tensor ops too (other draws: other figures)",
        choices=NegativeSampler,
    )


def is_member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Boolean mask: which ``values`` occur in the sorted array ``sorted_set``."""
    if len(sorted_set) == 0:
        return np.zeros(len(values), dtype=bool)
    pos = np.searchsorted(sorted_set, values)
    pos[pos == len(sorted_set)] = 0
    return sorted_set[pos] == values


def sample_excluding(
    rng: np.random.Generator,
    num_items: int,
    excluded: np.ndarray,
    size: int,
    distinct: bool = False,
) -> np.ndarray:
    """Draw ``size`` items uniformly from ``range(num_items)`` minus the sorted ``excluded``.

    With ``distinct=True`` no item is drawn twice (sampling without replacement).
    """
    available = num_items - len(excluded)
    if available <= 0 or (distinct and available < size):
        raise ValueError(
            f"cannot draw {size} {'distinct ' if distinct else ''}negatives: only {available} "
            f"of {num_items} items lie outside the user's exclusion set."
        )
    if size == 0:
        return np.empty(0, dtype=np.int64)
    if distinct:
        if available < 4 * size:
            pool = np.setdiff1d(np.arange(num_items, dtype=np.int64), excluded)
            return rng.choice(pool, size=size, replace=False)
        chosen: list[np.ndarray] = []
        seen = np.array(excluded, dtype=np.int64)
        while sum(len(c) for c in chosen) < size:
            draw = rng.integers(0, num_items, size=2 * size, dtype=np.int64)
            _, first = np.unique(draw, return_index=True)
            draw = draw[np.sort(first)]  # first occurrences, in draw order
            draw = draw[~is_member(draw, seen)]
            chosen.append(draw)
            seen = np.union1d(seen, draw)
        return np.concatenate(chosen)[:size]
    out = rng.integers(0, num_items, size=size, dtype=np.int64)
    bad = is_member(out, excluded)
    while bad.any():
        out[bad] = rng.integers(0, num_items, size=int(bad.sum()), dtype=np.int64)
        bad = is_member(out, excluded)
    return out
