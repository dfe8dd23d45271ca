"""Row updates of a flat table, ``table.index_add_(0, index, source, alpha=alpha)`` bit for
bit, faster on the CPU.

PyTorch's CPU ``index_add_`` with ``alpha`` adds one row at a time (``table[index[k]] =
table[index[k]] + alpha * source[k]``, one fused multiply-add per element, entries in
order), each row a kernel call of its own. :class:`RowAdder` computes the same values:

- float32 tables and sources in C order, from ``COMPILED_ENTRIES`` entries: a compiled loop
  (:func:`fedrec_flwr.node.host_loops.add_rows`) adds each entry to its row in place, in
  order, by the same fused multiply-add;
- otherwise by a few whole-tensor operations: every entry's row plus ``alpha`` times its
  source (the same fused multiply-add, ``torch.add``), written back at once; a row that
  occurs more than once (padding entries all point at row 0) then takes its later entries
  in order, each from the previous one's result. An entry whose source is all zeros leaves
  a value unchanged unless that value is ``-0.0`` (``-0.0 + 0.0 = +0.0``), and a ``-0.0``
  can only come from a ``-0.0``: when no repeated row starts with one, those entries are
  skipped, so the chains are as long as a user's repeated samples, not as the padding. (A
  repeated row holding a ``-0.0`` falls back to ``index_add_``.)

On other devices it calls ``index_add_`` (CUDA's deterministic one sums in a fixed order of
its own).
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from fedrec_flwr.methods.parts import OuterRows
from fedrec_flwr.node import host_loops

#: Entries from which :meth:`RowAdder.add_` takes the compiled loops
#: (:func:`fedrec_flwr.node.host_loops.add_rows`, else ``repeated_entries``).
COMPILED_ENTRIES = 1 << 8


#: Each thread's scratch of zeros over a table's rows (see :func:`_zeros`).
_SCRATCH = threading.local()


def _zeros(size: int) -> np.ndarray:
    """This thread's int64 scratch of at least ``size`` zeros, grown as tables grow and
    left zero by every use: one allocation for all the rounds of a process."""
    zeros = getattr(_SCRATCH, "zeros", None)
    if zeros is None or len(zeros) < size:
        zeros = _SCRATCH.zeros = np.zeros(size, dtype=np.int64)
    return zeros


class RowAdder:
    """:meth:`add_`: ``index_add_`` by whole-tensor operations on the CPU."""

    def add_(
        self,
        table: torch.Tensor,
        index: torch.Tensor,
        source: torch.Tensor,
        alpha: float = 1.0,
        start: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``table.index_add_(0, index, source, alpha=alpha)`` (in place; returns ``table``).

        ``start``: ``table[index]`` where the caller holds it (a contiguous [n, r] tensor,
        used as a buffer: its values change); else it is gathered."""
        if table.device.type != "cpu" or table.dim() != 2 or not len(index):
            return table.index_add_(0, index, source, alpha=alpha)
        rows = index.numpy()
        if len(rows) >= COMPILED_ENTRIES and _float32_rows(table, source):
            host_loops.add_rows(table.numpy(), rows, source.numpy(), alpha)
            return table
        repeated = self._repeated_entries(rows, len(table))
        if len(repeated):
            keep, negative_zero = self._repeated_sources(table, source, rows, repeated)
            if negative_zero:  # a repeated row holds a -0.0: rare
                return table.index_add_(0, index, source, alpha=alpha)
        new = table.index_select(0, index) if start is None else start
        new.add_(source, alpha=alpha)  # every entry from its row's start
        _put_rows(table, rows, new)
        if len(repeated):
            self._chains(table, rows, repeated, keep, new, source, alpha)
        return table

    def add_outer_(
        self, table: torch.Tensor, index: torch.Tensor, outer: OuterRows, alpha: float = 1.0
    ) -> torch.Tensor:
        """:meth:`add_` of the source ``outer.tensor()`` flattened to [n, r]; on the CPU, from
        ``COMPILED_ENTRIES`` entries, each product taken where it is added
        (:func:`fedrec_flwr.node.host_loops.add_outer_rows`: the same values, no [n, r]
        source written and read back)."""
        scale, vector = outer.scale.contiguous(), outer.vector.contiguous()
        if (
            table.device.type == "cpu"
            and table.dim() == 2
            and len(index) >= COMPILED_ENTRIES
            and table.dtype == scale.dtype == vector.dtype == torch.float32
            and table.is_contiguous()
            and scale.dim() == vector.dim() == 2
        ):
            host_loops.add_outer_rows(
                table.numpy(), index.numpy(), scale.numpy(), vector.numpy(), alpha
            )
            return table
        return self.add_(table, index, outer.tensor().reshape(-1, table.shape[-1]), alpha)

    @staticmethod
    def _repeated_sources(
        table: torch.Tensor, source: torch.Tensor, rows: np.ndarray, repeated: np.ndarray
    ) -> tuple[np.ndarray, bool]:
        """(which ``repeated`` entries have a source other than zeros, does any of their
        rows hold a ``-0.0``)."""
        keep = (source.index_select(0, torch.from_numpy(repeated)) != 0).any(1).numpy()
        starts = table.index_select(0, torch.from_numpy(np.unique(rows[repeated])))
        return keep, bool((starts == 0).logical_and_(starts.signbit()).any())

    def _repeated_entries(self, rows: np.ndarray, size: int) -> np.ndarray:
        """Indices of the entries whose row occurs more than once in ``rows``, in order."""
        last = _zeros(size)
        if len(rows) >= COMPILED_ENTRIES:  # one pass over the entries, the scratch left zero
            return host_loops.repeated_entries(rows, last)
        entry = np.arange(len(rows))
        try:  # only the slots of ``rows`` are written, then read, and zeroed whatever happens
            last[rows] = entry  # one entry of each row wins
            shadowed = last[rows] != entry
        finally:
            last[rows] = 0
        if not shadowed.any():
            return entry[:0]
        # the entries whose row is one of the shadowed ones (no mask over the whole table)
        return np.flatnonzero(np.isin(rows, rows[shadowed]))

    @staticmethod
    def _chains(table, rows, repeated, keep, new, source, alpha) -> None:
        """Each repeated row's final value: its entries with a non-zero source, in order, each
        from the previous one's result (the first from the row's start: ``new``); a row with
        none keeps its start, which every one of its entries wrote."""
        active = repeated[keep]
        if not len(active):
            return
        order = active[np.argsort(rows[active], kind="stable")]
        keys = rows[order]
        first = np.r_[True, keys[1:] != keys[:-1]]
        position = np.arange(len(keys))
        rank = position - np.maximum.accumulate(np.where(first, position, 0))
        entries = torch.from_numpy(order)
        values = new.index_select(0, entries)
        for k in range(1, int(rank.max()) + 1):
            at = torch.from_numpy(np.flatnonzero(rank == k))
            later = source.index_select(0, entries[at])
            values[at] = torch.add(values[at - 1], later, alpha=alpha)
        last = np.r_[keys[1:] != keys[:-1], True]
        _put_rows(table, keys[last], values[torch.from_numpy(last)])


def _float32_rows(table: torch.Tensor, source: torch.Tensor) -> bool:
    """Are ``table`` and ``source`` C-contiguous float32 [*, r] tensors (what
    :func:`fedrec_flwr.node.host_loops.add_rows` takes)?"""
    return (
        table.dtype == source.dtype == torch.float32
        and source.dim() == 2
        and table.is_contiguous()
        and source.is_contiguous()
    )


def _put_rows(table: torch.Tensor, rows: np.ndarray, values: torch.Tensor) -> None:
    """``table[rows] = values`` (a repeated row takes one of its values), each row moved as
    one block of bytes (NumPy's fancy assignment over rows viewed as single items, faster
    than ``index_copy_``, which moves element by element)."""
    if not (table.is_contiguous() and values.is_contiguous()):
        table.index_copy_(0, torch.from_numpy(rows), values)
        return
    item = np.dtype((np.void, table.shape[1] * table.element_size()))
    table.numpy().view(item).reshape(-1)[rows] = values.numpy().view(item).reshape(-1)
