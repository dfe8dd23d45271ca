"""The personal-row store: each user's tuned copies of item rows, kept on its device.

Methods with personal rows (PFedRec, and any method under dual personalisation) evaluate
with the rows the user tuned in its latest training round; rows it did not tune come from the
global table. The store is a CSR layout over the node's users (sorted items per user); a
round's replacement of its trained users' rows adds a segment to a layered store
(:mod:`fedrec_flwr.node.layered`) instead of rebuilding this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from fedrec_flwr.node import host_loops
from fedrec_flwr.node.host_memory import populated_empty

KEY_STRIDE = 1 << 32  # (position, item) -> position * KEY_STRIDE + item
#: Pairs from which :meth:`PersonalRows.find` takes the compiled search.
COMPILED_PAIRS = 1 << 14


def run_indices(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The indices ``starts[k], ..., starts[k] + counts[k] - 1`` of every run ``k``, run after
    run (int64)."""
    counts = np.asarray(counts, np.int64)
    before = np.cumsum(counts) - counts
    return np.repeat(np.asarray(starts, np.int64) - before, counts) + np.arange(
        int(counts.sum()), dtype=np.int64
    )


def whole_rows(rows: np.ndarray) -> np.ndarray:
    """A C-contiguous float32 [n, r] array as n opaque records of one row each: indexing it
    copies whole rows (one copy per row, not one per value)."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    return rows.view(np.dtype((np.void, rows.itemsize * rows.shape[1]))).reshape(len(rows))


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

    def replaced(
        self, updated: np.ndarray, row_positions: np.ndarray, items: np.ndarray, rows: np.ndarray
    ) -> PersonalRows:
        """A store in which the users at ``updated`` hold exactly the given rows
        (``row_positions[k]`` owns ``items[k]``, ``rows[k]``; the rows of a user contiguous,
        its items sorted, users in ascending position), every other user keeps its own."""
        num_users = len(self.indptr) - 1
        row_positions = np.asarray(row_positions, np.int64)
        rows = np.asarray(rows, np.float32).reshape(-1, self.rows.shape[1])
        items = np.asarray(items, np.int64)
        if np.any(np.diff(row_positions) < 0):  # group the users in ascending position
            order = np.argsort(row_positions, kind="stable")
            row_positions, items, rows = row_positions[order], items[order], rows[order]
        is_updated = np.zeros(num_users, dtype=bool)
        is_updated[np.asarray(updated, np.int64)] = True
        old_counts = np.where(is_updated, 0, self.counts())
        counts = old_counts + np.bincount(row_positions, minlength=num_users)
        indptr = np.r_[0, np.cumsum(counts)].astype(np.int64)
        if not old_counts.any():  # every user with rows was updated: the new rows are all
            return PersonalRows(indptr=indptr, items=items, rows=rows)
        # Every user's rows stay in user order: the output's slots of the updated users take
        # the new rows in order, the others the kept old rows in order (whole-row copies).
        total = int(indptr[-1])
        kept = np.repeat(~is_updated, self.counts())
        new_slot = np.repeat(is_updated, counts)
        out_items = np.empty(total, dtype=np.int64)
        out_rows = np.empty((total, self.rows.shape[1]), dtype=np.float32)
        out_items[~new_slot], out_items[new_slot] = self.items[kept], items
        whole_rows(out_rows)[~new_slot] = whole_rows(self.rows)[kept]
        whole_rows(out_rows)[new_slot] = whole_rows(rows)
        return PersonalRows(indptr=indptr, items=out_items, rows=out_rows)

    def keys(self) -> np.ndarray:
        """``position * KEY_STRIDE + item`` of every stored row, in storage order (sorted);
        computed once per store (read-only: a store never changes)."""
        return self._keys

    @cached_property
    def _keys(self) -> np.ndarray:
        owner = np.repeat(np.arange(len(self.indptr) - 1, dtype=np.int64), self.counts())
        keys = owner * KEY_STRIDE + self.items
        keys.flags.writeable = False
        return keys

    def storage_of(self, positions: np.ndarray) -> np.ndarray:
        """Storage indices of every row of the users at ``positions``, user after user."""
        starts = self.indptr[positions]
        counts = self.indptr[np.asarray(positions) + 1] - starts
        return run_indices(starts, counts)

    def take_items(self, storage: np.ndarray) -> np.ndarray:
        """Items at storage indices (from :meth:`storage_of`)."""
        return self.items[storage]

    def take_rows(self, storage: np.ndarray) -> np.ndarray:
        """Rows at storage indices (from :meth:`storage_of`), a whole row per copy."""
        return np.take(self.rows, storage, axis=0)

    def merged(
        self,
        positions: np.ndarray,
        items: np.ndarray,
        rows: np.ndarray,
        zero_at: float | None = None,
    ) -> PersonalRows:
        """A store that also holds the given rows (one per (position, item) pair, distinct),
        their values replacing those stored for the same pairs: rows a user trained in an
        earlier round stay kept, as private rows must. ``zero_at``: a new row whose max
        |value| is at or below it counts as zero: it is not stored (and drops the old one)."""
        old = self.keys()
        new = np.asarray(positions, np.int64) * KEY_STRIDE + np.asarray(items, np.int64)
        rows = np.asarray(rows)
        if zero_at is not None:
            small = np.abs(rows).max(axis=1, initial=0.0) <= zero_at
            dropped, new, rows = np.sort(new[small]), new[~small], rows[~small]
            if len(dropped) and len(old):
                where = np.minimum(np.searchsorted(dropped, old), len(dropped) - 1)
                gone = dropped[where] == old
                if gone.any():
                    positions, items = np.asarray(positions)[~small], np.asarray(items)[~small]
                    return self._subset(~gone).merged(positions, items, rows)
        if len(new) > 1 and np.any(new[1:] <= new[:-1]):  # sorted, distinct: merge in place
            order = np.argsort(new, kind="stable")
            new, rows = new[order], np.asarray(rows)[order]
        where = np.searchsorted(new, old)
        clipped = np.minimum(where, max(len(new) - 1, 0))
        keep = new[clipped] != old if len(new) else np.ones(len(old), dtype=bool)
        old, where = old[keep], where[keep]
        # Output slot of each kept old row and each new row (both lists are sorted).
        old_slot = np.arange(len(old)) + where
        new_slot = np.arange(len(new)) + np.searchsorted(old, new)
        out = populated_empty((len(old) + len(new), self.rows.shape[1]), np.float32)
        out[old_slot] = self.rows[keep]
        out[new_slot] = rows
        keys = np.empty(len(out), dtype=np.int64)
        keys[old_slot], keys[new_slot] = old, new
        owner = keys // KEY_STRIDE
        counts = np.bincount(owner, minlength=len(self.indptr) - 1)
        return PersonalRows(
            indptr=np.r_[0, np.cumsum(counts)].astype(np.int64),
            items=keys - owner * KEY_STRIDE,
            rows=out,
        )

    def _subset(self, keep: np.ndarray) -> PersonalRows:
        """The store with only the stored rows where ``keep``."""
        owner = np.repeat(np.arange(len(self.indptr) - 1), self.counts())
        counts = np.bincount(owner[keep], minlength=len(self.indptr) - 1)
        return PersonalRows(
            indptr=np.r_[0, np.cumsum(counts)].astype(np.int64),
            items=self.items[keep],
            rows=self.rows[keep],
        )

    def find(self, positions: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(storage index, held mask) of the given (position, item) pairs; the index is
        meaningful only where held."""
        if len(items) >= COMPILED_PAIRS and len(self.items):  # each among its user's items
            return host_loops.stored_pairs(self.indptr, self.items, positions, items)
        keys = self.keys()
        if not len(keys) or not len(items):
            return np.zeros(len(items), dtype=np.int64), np.zeros(len(items), dtype=bool)
        wanted = np.asarray(positions, np.int64) * KEY_STRIDE + np.asarray(items, np.int64)
        where = np.searchsorted(keys, wanted)
        where[where == len(keys)] = 0
        return where, keys[where] == wanted

    def gathered(self, positions: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Rows [m, r] of the given (position, item) pairs; zeros where none is stored."""
        out = np.zeros((len(items), self.rows.shape[1]), dtype=np.float32)
        where, hit = self.find(positions, items)
        out[hit] = self.rows[where[hit]]
        return out

    def overlay_pairs(self, positions: np.ndarray, items: np.ndarray, rows: np.ndarray) -> None:
        """Replace in ``rows`` (one per (position, item) pair) those the user holds a copy of."""
        where, hit = self.find(positions, items)
        rows[hit] = self.rows[where[hit]]

    def gather(self, position: int, items: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Write into ``out`` (one row per item, zeros assumed) the rows the user holds of
        ``items``; returns the mask of the items it holds."""
        held, rows = self.of(position)
        if not len(held):
            return np.zeros(len(items), dtype=bool)
        where = np.searchsorted(held, items)
        where[where == len(held)] = 0
        hit = held[where] == items
        out[hit] = rows[where[hit]]
        return hit

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
