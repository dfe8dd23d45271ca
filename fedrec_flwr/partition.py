"""Which users a node holds, and which users train in a round.

Both are pure functions of public numbers, so the server and every node compute them alike.
"""

from __future__ import annotations

import numpy as np

from fedrec_flwr.seeding import keyed_rng


def users_of_partition(partition_id: int, num_partitions: int, num_users: int) -> np.ndarray:
    """Users ``u`` with ``u mod num_partitions == partition_id``."""
    return np.arange(partition_id, num_users, num_partitions, dtype=np.int64)


def participants(seed: int, server_round: int, num_users: int, fraction: float) -> np.ndarray:
    """Sorted users that train in ``server_round``: all, or ``int(fraction * num_users)``
    (at least one) drawn without replacement from a generator keyed by (seed, round)."""
    if fraction >= 1.0:
        return np.arange(num_users, dtype=np.int64)
    count = max(1, int(fraction * num_users))
    rng = keyed_rng(seed, "participants", server_round)
    return np.sort(rng.choice(num_users, size=count, replace=False)).astype(np.int64)


def eval_sample(seed: int, server_round: int, num_users: int, count: int) -> np.ndarray:
    """Sorted users evaluated in ``server_round``: all (``count`` 0 or >= ``num_users``), or
    ``count`` drawn without replacement from a generator keyed by (seed, round), the same on
    every node whatever the packing (``eval-users``)."""
    if count <= 0 or count >= num_users:
        return np.arange(num_users, dtype=np.int64)
    rng = keyed_rng(seed, "eval-users", server_round)
    return np.sort(rng.choice(num_users, size=count, replace=False)).astype(np.int64)
