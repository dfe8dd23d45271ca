"""A user's file as :class:`~fedrec_flwr.data.interactions.Interactions`: filters, then ids.

Filters run in this order, each on the rows the previous one kept, and each is recorded
(rows, users and items it removed) for the dataset card:

1. ``rating-column``: rows rated below ``rating-threshold`` are dropped;
2. ``repeated-pairs='keep-newest'``: one row per (user, item), its newest (on equal
   timestamps the earlier line counts as newer, the rule of the leave-one-out split);
3. ``min-user-interactions``: one pass, users with fewer rows are dropped (as the named
   loaders drop Last.fm-2K's and Amazon's small users);
4. ``k-core``: users and items with fewer than k rows are dropped, again and again, until
   every user and every item left has k rows or more.

Ids are numbered 0..n-1 in sorted order of the raw ids, as for the named datasets
(:meth:`Interactions.from_raw`): numerically when every id is an integer, else in text
(code point) order. The numbering does not depend on the order of the rows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fedrec_flwr.data.interactions import DataError, Interactions
from fedrec_flwr.data.user_file import FileColumns, UserFile, read_columns

DATASET_NAME = "file"


@dataclass(frozen=True)
class FilterStep:
    """What one filter removed."""

    name: str  # e.g. 'rating >= 4.0'
    rows: int
    users: int
    items: int


class _Kept:
    """The rows kept so far, and the steps that removed the others."""

    def __init__(self, columns: FileColumns) -> None:
        self.users = pd.factorize(columns.user)[0]
        self.items = pd.factorize(columns.item)[0]
        self.mask = np.ones(len(self.users), dtype=bool)
        self.steps: list[FilterStep] = []

    def counts(self) -> tuple[int, int, int]:
        """(rows, users, items) kept."""
        users = np.unique(self.users[self.mask])
        return int(self.mask.sum()), len(users), len(np.unique(self.items[self.mask]))

    def apply(self, name: str, mask: np.ndarray) -> None:
        before = self.counts()
        self.mask = self.mask & mask
        after = self.counts()
        self.steps.append(FilterStep(name, *(b - a for b, a in zip(before, after, strict=True))))

    def per_user(self, mask: np.ndarray | None = None) -> np.ndarray:
        """Each row's user's number of rows within ``mask`` (the kept rows by default)."""
        mask = self.mask if mask is None else mask
        return np.bincount(self.users[mask], minlength=self.users.max() + 1)[self.users]

    def per_item(self, mask: np.ndarray) -> np.ndarray:
        """Each row's item's number of rows within ``mask``."""
        return np.bincount(self.items[mask], minlength=self.items.max() + 1)[self.items]


def newest_of_each_pair(kept: _Kept, timestamp: np.ndarray) -> np.ndarray:
    """Mask of each kept (user, item) pair's newest kept row (earlier line on equal times)."""
    rows = np.flatnonzero(kept.mask)
    pair = kept.users[rows] * (int(kept.items.max()) + 1) + kept.items[rows]
    order = rows[np.lexsort((rows, -timestamp[rows], pair))]
    ordered_pairs = kept.users[order] * (int(kept.items.max()) + 1) + kept.items[order]
    first = np.r_[True, ordered_pairs[1:] != ordered_pairs[:-1]]
    mask = np.zeros(len(kept.mask), dtype=bool)
    mask[order[first]] = True
    return mask


def load_user_file(spec: UserFile, name: str = DATASET_NAME) -> Interactions:
    """Read ``spec``'s file, filter it and number its ids; the Interactions' ``notes`` hold
    the file, its sha256 and what each filter removed."""
    columns = read_columns(spec)
    kept = _Kept(columns)
    read = kept.counts()
    if columns.rating is not None:
        kept.apply(f"rating >= {spec.rating_threshold:g}", columns.rating >= spec.rating_threshold)
    if spec.repeated_pairs == "keep-newest":
        kept.apply("repeated pairs (keep-newest)", newest_of_each_pair(kept, columns.timestamp))
    if spec.min_user_interactions:
        minimum = spec.min_user_interactions
        kept.apply(f"min-user-interactions {minimum}", kept.per_user() >= minimum)
    if spec.k_core:
        kept.apply(f"{spec.k_core}-core", k_core(kept, spec.k_core))
    _check_enough(spec, columns, kept)
    keep = kept.mask
    data = Interactions.from_raw(
        name, columns.user[keep], columns.item[keep], columns.timestamp[keep]
    )
    notes = {
        "file": str(spec.path.resolve()),
        "sha256": columns.sha256,
        "format": spec.resolved_format,
        "layout": columns.layout,
        "columns": columns.mapped or {},
        "ids": "integer" if np.issubdtype(data.raw_user_ids.dtype, np.integer) else "string",
        "rows-read": read[0],
        "users-read": read[1],
        "items-read": read[2],
        "filters": [dataclasses.asdict(step) for step in kept.steps],
    }
    return dataclasses.replace(data, notes=notes)


def k_core(kept: _Kept, k: int) -> np.ndarray:
    """Mask of the largest set of kept rows in which every user and item has k rows."""
    mask = kept.mask.copy()
    while True:
        core = mask & (kept.per_user(mask) >= k) & (kept.per_item(mask) >= k)
        if int(core.sum()) == int(mask.sum()):
            return core
        mask = core


def _check_enough(spec: UserFile, columns: FileColumns, kept: _Kept) -> None:
    """Refuse a file left empty, or with one user, by its filters."""
    rows, users, _ = kept.counts()
    removed = "; ".join(f"{s.name} removed {s.rows:,} rows ({s.users:,} users)" for s in kept.steps)
    settings = [
        key
        for key, value in (
            ("rating-threshold", columns.rating is not None),
            ("min-user-interactions", spec.min_user_interactions),
            ("k-core", spec.k_core),
        )
        if value
    ]
    lower = f"Lower {' or '.join(settings)}" if settings else "Check the column mapping"
    if rows == 0:
        raise DataError(
            f"{spec.path}: no row is left after filtering ({removed}). {lower}, so that "
            f"some users keep their rows."
        )
    if users == 1:
        only = str(columns.user[kept.mask][0])
        raise DataError(
            f"{spec.path}: one user is left after filtering (user {only!r}, {rows:,} rows)"
            f"{f' ({removed})' if removed else ''}: a federation needs at least 2 users. "
            f"{lower + ', or c' if settings else 'C'}heck that the user ids are in "
            f"{user_column_read(spec, columns)}."
        )


def user_column_read(spec: UserFile, columns: FileColumns) -> str:
    """The column the user ids were read from, as the message names it."""
    read = (columns.mapped or {}).get("user", spec.user_column)
    shown = read if read.startswith("column ") else f"column {read!r}"
    return f"{shown} (user-column={spec.user_column})"
