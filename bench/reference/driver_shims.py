"""What the reference drivers patch alike, loaded by each driver with ``runpy.run_path`` (the
drivers run under ``python -I``, so this folder is not importable there); never imported by
the project.
"""

from __future__ import annotations

import random
import types


class SetSampling(types.ModuleType):
    """A stand-in for ``random`` in a reference module: ``sample`` of a set samples
    ``tuple(set)``, what Python <= 3.10 did itself (3.11 refuses sets)."""

    def __getattr__(self, name):
        return getattr(random, name)

    @staticmethod
    def sample(population, k):
        if isinstance(population, (set, frozenset)):
            population = tuple(population)
        return random.sample(population, k)


def project_negatives(negatives):
    """A ``SampleGenerator._sample_negative`` (NCF's data code, which both references
    derive from) that keeps the training negatives' pool (every item the user never
    interacted with) and takes each user's evaluation negatives from ``negatives[user]``."""
    import pandas as pd

    def sample_negative(self, ratings):
        interacted = ratings.groupby("userId")["itemId"].apply(set)
        return pd.DataFrame(
            {
                "userId": interacted.index,
                "negative_items": [self.item_pool - items for items in interacted],
                "negative_samples": [negatives[user].tolist() for user in interacted.index],
            }
        )

    return sample_negative
