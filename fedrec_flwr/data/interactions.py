"""The raw interaction rows of one dataset, with contiguous user and item ids."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pandas is imported where a dataset is read: a node never needs it
    import pandas as pd


class DataError(ValueError):
    """A dataset file is missing, malformed or fails its checksum; the message says what to do."""


@dataclass(frozen=True, eq=False)
class Interactions:
    """Implicit-feedback rows of one dataset, in file order, after the dataset's own filtering.

    Every row is a positive. ``user`` and ``item`` are contiguous ids assigned in sorted order
    of the raw ids; ``raw_user_ids[u]`` / ``raw_item_ids[i]`` give the raw id back. Row order is
    the file's row order: it breaks timestamp ties in the leave-one-out split. The arrays are
    made read-only.
    """

    name: str
    user: np.ndarray  # int64, contiguous ids 0..num_users-1
    item: np.ndarray  # int64, contiguous ids 0..num_items-1
    timestamp: np.ndarray  # int64; only its order matters
    num_users: int
    num_items: int
    raw_user_ids: np.ndarray  # raw id of each contiguous user id (int64 or str)
    raw_item_ids: np.ndarray
    # What the loader tells about the rows (a user's file: its sha256, what each filter removed)
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.user)
        for field in ("user", "item", "timestamp"):
            array = getattr(self, field)
            if not isinstance(array, np.ndarray) or array.dtype != np.int64 or array.ndim != 1:
                raise ValueError(f"Interactions.{field} must be a 1-D int64 numpy array")
            if len(array) != n:
                raise ValueError(
                    f"Interactions.{field} has {len(array)} rows, Interactions.user has {n}"
                )
        for ids, count, raw in (
            ("user", self.num_users, self.raw_user_ids),
            ("item", self.num_items, self.raw_item_ids),
        ):
            if len(raw) != count:
                raise ValueError(f"Interactions: {len(raw)} raw {ids} ids for num_{ids}s={count}")
            array = getattr(self, ids)
            if n and (array.min() < 0 or array.max() >= count):
                raise ValueError(f"Interactions.{ids} has ids outside 0..{count - 1}")
        for field in ("user", "item", "timestamp", "raw_user_ids", "raw_item_ids"):
            getattr(self, field).setflags(write=False)

    def __len__(self) -> int:
        return len(self.user)

    @classmethod
    def from_raw(
        cls,
        name: str,
        raw_users: np.ndarray | pd.Series,
        raw_items: np.ndarray | pd.Series,
        timestamps: np.ndarray | pd.Series,
    ) -> Interactions:
        """Build from raw ids (integers or strings) in file order, remapping ids to 0..n-1.

        Ids are numbered in sorted order of the raw ids, as ``np.unique(..., return_inverse=True)``
        would; integer raw ids stay int64, any other kind becomes a numpy string array.
        """
        user, raw_user_ids = _remap(raw_users)
        item, raw_item_ids = _remap(raw_items)
        return cls(
            name=name,
            user=user,
            item=item,
            timestamp=np.array(timestamps, dtype=np.int64),
            num_users=len(raw_user_ids),
            num_items=len(raw_item_ids),
            raw_user_ids=raw_user_ids,
            raw_item_ids=raw_item_ids,
        )


def _remap(raw: np.ndarray | pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Contiguous codes in sorted order of the raw values, and the sorted raw values."""
    import pandas as pd

    codes, uniques = pd.factorize(np.asarray(raw), sort=True)
    uniques = np.asarray(uniques)
    if np.issubdtype(uniques.dtype, np.integer):
        uniques = uniques.astype(np.int64)
    else:
        uniques = uniques.astype(str)
    return codes.astype(np.int64, copy=False), uniques
