"""The personal-row store of many rounds without copying it every round (:class:`LayeredRows`).

:meth:`PersonalRows.replaced <fedrec_flwr.node.personal.PersonalRows.replaced>` rebuilds
the whole CSR store to give a round's trained users their new rows: a copy of every user's
rows per round, though only a fraction trained. A layered store instead keeps a tuple of
immutable CSR *segments* (each over all the node's users, holding rows for some) and, per
user, the segment that holds its current rows (``owner``). A round that replaces some users'
rows adds one segment with their rows and points them at it: the cost is that of the new
rows, not of the store. Rows of earlier segments that no user points at any more are dead;
the segments are merged into one (the live rows, in user order) when they pass
``MAX_SEGMENTS`` or the dead rows outnumber the live ones, a copy amortised over the rounds.

Every read answers as the equivalent CSR store would (same rows, same order): which segment
a row lives in never changes a value. :meth:`LayeredRows.compact` is that CSR store.
"""

from __future__ import annotations

import uuid
from functools import cached_property

import numpy as np

from fedrec_flwr.node import host_loops
from fedrec_flwr.node.host_memory import populated_empty
from fedrec_flwr.node.personal import PersonalRows, run_indices, whole_rows

#: More segments than this are merged into one (each read loops over the segments).
MAX_SEGMENTS = 8
OWNER = "personal-owner"  # array name of the owners (only in a store of several segments)
IDS = "personal-segments"  # array name of the segments' names (idem)
#: Storage indices from which :meth:`LayeredRows.take_rows` (and ``take_items``) group them
#: by segment in one sort and copy rows in a compiled loop (``LayeredRows._take_grouped``).
COMPILED_TAKES = 1 << 14


def _segment_prefix(index: int) -> str:
    """Array-name prefix of segment ``index`` (segment 0 keeps the CSR store's names)."""
    return "personal-" if index == 0 else f"personal-{index}-"


class LayeredRows:
    """User ``j``'s rows are those segment ``owner[j]`` holds for it (read-only)."""

    def __init__(
        self,
        segments: tuple[PersonalRows, ...],
        owner: np.ndarray,
        ids: tuple[int, ...] | None = None,
    ) -> None:
        """``ids``: a name for each segment (what ``context.state`` keeps it under, written
        once: :mod:`fedrec_flwr.node.context_state`); new ones for segments without."""
        self.segments = tuple(segments)
        self.owner = np.asarray(owner, dtype=np.int32)
        self.owner.flags.writeable = False
        self.ids = tuple(ids) if ids is not None else tuple(new_id() for _ in self.segments)

    # ------------------------------------------------------------ construction
    @classmethod
    def of_store(cls, store: PersonalRows | LayeredRows) -> LayeredRows:
        """``store`` as a layered store (a CSR store is one segment)."""
        if isinstance(store, LayeredRows):
            return store
        return cls((store,), np.zeros(len(store.indptr) - 1, dtype=np.int32))

    def replaced(
        self, updated: np.ndarray, row_positions: np.ndarray, items: np.ndarray, rows: np.ndarray
    ) -> LayeredRows:
        """:meth:`PersonalRows.replaced`: the users at ``updated`` hold exactly the given rows
        (one new segment), every other user keeps its own."""
        fresh = PersonalRows.empty(len(self.owner), self.row_dim)
        segment = fresh.replaced(updated, row_positions, items, rows)
        owner = self.owner.copy()
        owner[np.asarray(updated, np.int64)] = len(self.segments)
        ids = (*self.ids, new_id())
        return LayeredRows((*self.segments, segment), owner, ids)._tidied()

    def _tidied(self) -> LayeredRows:
        """Without the segments no user points at; merged into one when there are more than
        ``MAX_SEGMENTS`` or more dead rows than live ones."""
        used = np.bincount(self.owner, minlength=len(self.segments)) > 0
        store = self
        if not used.all():
            renumber = np.cumsum(used) - 1
            kept = tuple(s for s, u in zip(self.segments, used, strict=True) if u)
            ids = tuple(i for i, u in zip(self.ids, used, strict=True) if u)
            store = LayeredRows(kept, renumber[self.owner], ids)
        stored = sum(len(s.items) for s in store.segments)
        if len(store.segments) > 1 and (
            len(store.segments) > MAX_SEGMENTS or stored > 2 * int(store.counts().sum())
        ):
            return LayeredRows.of_store(store.compact())
        return store

    # ------------------------------------------------------------------ reads
    @property
    def num_users(self) -> int:
        return len(self.owner)

    @property
    def row_dim(self) -> int:
        return self.segments[0].rows.shape[1]

    def _members(self, positions: np.ndarray):
        """(segment index, segment, indices into ``positions`` of the users it holds), for
        each segment that holds some of them."""
        if len(self.segments) == 1:
            yield 0, self.segments[0], np.arange(len(positions))
            return
        owners = self.owner[positions]
        for index, segment in enumerate(self.segments):
            selected = np.flatnonzero(owners == index)
            if len(selected):
                yield index, segment, selected

    def of(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        return self.segments[self.owner[position]].of(position)

    def counts(self) -> np.ndarray:
        return self._counts.copy()

    @cached_property
    def _counts(self) -> np.ndarray:
        counts = np.zeros(self.num_users, dtype=np.int64)
        for _, segment, selected in self._members(np.arange(self.num_users)):
            counts[selected] = segment.counts()[selected]
        return counts

    def gathered(self, positions: np.ndarray, items: np.ndarray) -> np.ndarray:
        out = np.zeros((len(items), self.row_dim), dtype=np.float32)
        self.overlay_pairs(positions, items, out)
        return out

    def overlay_pairs(self, positions: np.ndarray, items: np.ndarray, rows: np.ndarray) -> None:
        if len(self.segments) == 1:
            self.segments[0].overlay_pairs(positions, items, rows)
            return
        positions, items = np.asarray(positions, np.int64), np.asarray(items, np.int64)
        for _, segment, selected in self._members(positions):
            where, hit = segment.find(positions[selected], items[selected])
            rows[selected[hit]] = segment.rows[where[hit]]

    def gather(self, position: int, items: np.ndarray, out: np.ndarray) -> np.ndarray:
        return self.segments[self.owner[position]].gather(position, items, out)

    def overlay(self, position: int, candidates: np.ndarray, rows: np.ndarray) -> None:
        self.segments[self.owner[position]].overlay(position, candidates, rows)

    @cached_property
    def _offsets(self) -> np.ndarray:
        """Where each segment starts in the segments' rows laid end to end."""
        return np.cumsum([0] + [len(s.items) for s in self.segments]).astype(np.int64)

    def storage_of(self, positions: np.ndarray) -> np.ndarray:
        """Indices of every row of the users at ``positions``, user after user, into the
        segments' rows laid end to end (read with :meth:`take_items`, :meth:`take_rows`)."""
        if len(self.segments) == 1:  # its storage is the segment's
            return self.segments[0].storage_of(positions)
        positions = np.asarray(positions, np.int64)
        counts = self._counts[positions]
        starts = np.cumsum(counts) - counts
        out = np.empty(int(counts.sum()), dtype=np.int64)
        for index, segment, selected in self._members(positions):
            source = segment.storage_of(positions[selected]) + self._offsets[index]
            out[run_indices(starts[selected], counts[selected])] = source
        return out

    def _take(self, storage: np.ndarray, part: str) -> np.ndarray:
        storage = np.asarray(storage, np.int64)
        first = getattr(self.segments[0], part)
        if len(self.segments) == 1:  # one copy, no look-up of each row's segment
            return np.take(first, storage, axis=0)
        out = np.empty((len(storage), *first.shape[1:]), dtype=first.dtype)
        if len(storage) >= COMPILED_TAKES:
            return self._take_grouped(storage, part, out)
        segment_of = np.searchsorted(self._offsets, storage, side="right") - 1
        for index, segment in enumerate(self.segments):
            selected = np.flatnonzero(segment_of == index)
            if len(selected):
                out[selected] = getattr(segment, part)[storage[selected] - self._offsets[index]]
        return out

    def _take_grouped(self, storage: np.ndarray, part: str, out: np.ndarray) -> np.ndarray:
        """:meth:`_take` into ``out``: the indices grouped by segment in one stable (radix)
        sort of their small segment numbers, each segment's rows copied where they go in
        a compiled loop (:func:`fedrec_flwr.node.host_loops.rows_into`)."""
        # bucket 0: before the first segment, s + 1: segment s, past the last: none taken
        bucket = np.searchsorted(self._offsets, storage, side="right").astype(np.int16)
        order = np.argsort(bucket, kind="stable")
        bounds = np.cumsum(np.bincount(bucket, minlength=len(self.segments) + 2))
        for index, segment in enumerate(self.segments):
            selected = order[bounds[index] : bounds[index + 1]]
            if not len(selected):
                continue
            source, local = getattr(segment, part), storage[selected] - self._offsets[index]
            if source.ndim == 2:
                host_loops.rows_into(selected, source, local, out)
            else:
                out[selected] = source[local]
        return out

    def take_items(self, storage: np.ndarray) -> np.ndarray:
        return self._take(storage, "items")

    def take_rows(self, storage: np.ndarray) -> np.ndarray:
        return self._take(storage, "rows")

    # ------------------------------------------- everything else: the CSR store
    def compact(self) -> PersonalRows:
        """The equivalent CSR store (the live rows, user after user); built anew unless a
        read below already keeps one (a state file's copy is not kept)."""
        if len(self.segments) == 1:
            return self.segments[0]
        kept = self.__dict__.get("_compact")
        return kept if kept is not None else self._built()

    @cached_property
    def _compact(self) -> PersonalRows:
        """The CSR store, kept for the reads that need its arrays."""
        return self.compact()

    def _built(self) -> PersonalRows:
        """The live rows in user order, each segment's copied where they go (from
        ``COMPILED_TAKES`` rows in a compiled loop, no temporary of the rows taken) into
        memory mapped at once (:func:`~fedrec_flwr.node.host_memory.populated_empty`)."""
        counts = self._counts
        indptr = np.r_[0, np.cumsum(counts)].astype(np.int64)
        items = np.empty(int(indptr[-1]), dtype=np.int64)
        rows = populated_empty((len(items), self.row_dim), np.float32)
        for _, segment, selected in self._members(np.arange(self.num_users)):
            source = segment.storage_of(selected)
            dest = run_indices(indptr[selected], counts[selected])
            items[dest] = segment.items[source]
            if len(source) >= COMPILED_TAKES:
                host_loops.rows_into(dest, segment.rows, source, rows)
            else:
                whole_rows(rows)[dest] = whole_rows(segment.rows)[source]
        return PersonalRows(indptr=indptr, items=items, rows=rows)

    @property
    def indptr(self) -> np.ndarray:
        return self._compact.indptr

    @property
    def items(self) -> np.ndarray:
        return self._compact.items

    @property
    def rows(self) -> np.ndarray:
        return self._compact.rows

    def keys(self) -> np.ndarray:
        return self._compact.keys()

    def find(self, positions: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._compact.find(positions, items)

    def merged(self, positions, items, rows, zero_at: float | None = None) -> PersonalRows:
        return self._compact.merged(positions, items, rows, zero_at=zero_at)

    def with_segments(self, segments: dict[int, PersonalRows]) -> LayeredRows:
        """The same store with segment ``i`` replaced by ``segments[i]`` (the same rows held
        elsewhere, e.g. read from a record's bytes)."""
        replaced = tuple(segments.get(i, s) for i, s in enumerate(self.segments))
        return LayeredRows(replaced, self.owner, self.ids)

    # ------------------------------------------------------------ as arrays
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The segments' arrays (segment 0 under the CSR store's names) and the owners; a
        store of one segment is exactly its CSR store's arrays."""
        if len(self.segments) == 1:
            return self.segments[0].to_arrays()
        arrays: dict[str, np.ndarray] = {
            OWNER: self.owner,
            IDS: np.asarray(self.ids, dtype=np.int64),
        }
        for index, segment in enumerate(self.segments):
            prefix = _segment_prefix(index)
            arrays.update(
                {prefix + k.removeprefix("personal-"): v for k, v in segment.to_arrays().items()}
            )
        return arrays


#: A node's personal-row store: one CSR store, or its layered form.
RowStore = PersonalRows | LayeredRows


def store_from_arrays(arrays: dict[str, np.ndarray]) -> RowStore:
    """Inverse of ``to_arrays`` of either store."""
    if OWNER not in arrays:
        return PersonalRows.from_arrays(arrays)
    segments, index = [], 0
    while f"{_segment_prefix(index)}indptr" in arrays:
        prefix = _segment_prefix(index)
        index += 1
        segments.append(
            PersonalRows(
                indptr=np.asarray(arrays[prefix + "indptr"]),
                items=np.asarray(arrays[prefix + "items"]),
                rows=np.asarray(arrays[prefix + "rows"]),
            )
        )
    ids = tuple(int(i) for i in arrays[IDS]) if IDS in arrays else None
    return LayeredRows(tuple(segments), np.asarray(arrays[OWNER]), ids)


def new_id() -> int:
    """A fresh segment name (63 random bits: not a draw of the run, only a name)."""
    return uuid.uuid4().int >> 65


def segment_names(index: int) -> tuple[str, str, str]:
    """The array names of segment ``index`` in ``to_arrays``."""
    prefix = _segment_prefix(index)
    return prefix + "indptr", prefix + "items", prefix + "rows"
