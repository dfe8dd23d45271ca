"""A fake finished cell of the transfer studies (the leave-one-dataset-out study and the
defaults on generated shapes), shared by their tests."""

from __future__ import annotations

import numpy as np

USERS = 200


def finished_cell(method: str, candidate: str, target: str, rate: float) -> dict:
    """A fake finished cell whose users hit at ``rate`` (exactly: the first users hit)."""
    hits = (np.arange(USERS) < round(rate * USERS)).astype(float)
    return {
        "method": method,
        "candidate": candidate,
        "target": target,
        "best_round": 40,
        "rounds": 50,
        "val_hr10": rate,
        "test_hr10": float(hits.mean()),
        "test_ndcg10": float(hits.mean()) / 2,
        "seconds": 1.0,
        "users": list(range(USERS)),
        "hits": hits.tolist(),
    }
