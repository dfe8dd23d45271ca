"""The personal-row store: each user's tuned copies of item rows, kept on its device.

Methods with personal rows (PFedRec, and any method under dual personalisation) evaluate
with the rows the user tuned in its latest training round; rows it did not tune come from the
global table. The store is a CSR layout over the node's users (sorted items per user), small
enough for ``context.state``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PersonalRows:
    """User ``j``'s rows are ``rows[indptr[j]:indptr[j+1]]`` for ``items[...]`` (sorted)."""

    indptr: np.ndarray  # [n + 1]
    items: np.ndarray  # [nnz]
    rows: np.ndarray  # [nnz, r] float32

    @classmethod
    def empty(cls, num_users: int, row_dim: int) -> PersonalRows:
        return cls(
            indptr=np.zeros(num_users + 1, dtype=np.int64),
            items=np.empty(0, dtype=np.int64),
            rows=np.empty((0, row_dim), dtype=np.float32),
        )

    def of(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        """(items, rows) of the user at ``position``."""
        lo, hi = self.indptr[position], self.indptr[position + 1]
        return self.items[lo:hi], self.rows[lo:hi]

    def counts(self) -> np.ndarray:
        return np.diff(self.indptr)

    def replaced(self, updates: dict[int, tuple[np.ndarray, np.ndarray]]) -> PersonalRows:
        """A store in which the users at the given positions hold new (items, rows)."""
        items_parts, rows_parts, counts = [], [], []
        for position in range(len(self.indptr) - 1):
            items, rows = updates.get(position) or self.of(position)
            items_parts.append(items)
            rows_parts.append(rows)
            counts.append(len(items))
        return PersonalRows(
            indptr=np.r_[0, np.cumsum(counts)].astype(np.int64),
            items=np.concatenate(items_parts).astype(np.int64),
            rows=np.concatenate(rows_parts).astype(np.float32).reshape(-1, self.rows.shape[1]),
        )

    def overlay(self, position: int, candidates: np.ndarray, rows: np.ndarray) -> None:
        """Replace in ``rows`` (one per candidate item) those the user holds a copy of."""
        items, personal = self.of(position)
        if len(items):
            where = np.searchsorted(items, candidates)
            where[where == len(items)] = 0
            hit = items[where] == candidates
            rows[hit] = personal[where[hit]]

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {
            "personal-indptr": self.indptr,
            "personal-items": self.items,
            "personal-rows": self.rows,
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> PersonalRows:
        return cls(
            indptr=np.asarray(arrays["personal-indptr"]),
            items=np.asarray(arrays["personal-items"]),
            rows=np.asarray(arrays["personal-rows"]),
        )
