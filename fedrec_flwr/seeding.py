"""Keyed random generators: every draw comes from a generator keyed by (seed, stream, keys...).

Keying by (seed, user, round) rather than drawing from one shared stream makes results
independent of how users are packed into nodes, of the order in which nodes run, and of
which process runs them.
"""

from __future__ import annotations

import numpy as np

# One number per purpose, so that two purposes never share a stream.
STREAMS = {
    "item-init": 1,
    "private-init": 2,
    "train-negatives": 3,
    "shuffle": 4,
    "eval-negatives": 5,
    "participants": 6,
    "dense-init": 7,
    "reconstruct-init": 8,
    "erank-sample": 9,
    "faults": 10,
    "eval-users": 11,
    "ldp-noise": 12,
    "decoys": 13,
    "audit": 14,
    "malicious": 15,
    "secagg-key": 16,
    "secagg-identity": 17,
    "secagg-graph": 18,
    # the lab's analyses of a run's state (fedrec_lab.analysis)
    "sharpness-users": 40,
    "sharpness-start": 41,
    "item-views": 42,
}


def keyed_rng(seed: int, stream: str, *keys: int) -> np.random.Generator:
    """A numpy generator determined by ``seed``, the purpose ``stream`` and integer keys."""
    return np.random.default_rng(
        np.random.SeedSequence([int(seed), STREAMS[stream], *map(int, keys)])
    )
