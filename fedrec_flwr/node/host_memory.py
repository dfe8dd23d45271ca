"""How a node's process takes host memory (:func:`tune_host_memory`).

A round's tensors and arrays (gathered rows, products, gradients, the step's scratch) are
allocated and freed step after step, round after round. glibc's ``malloc`` serves the large
ones by ``mmap`` and gives them back on ``free``, or gives back the top of its heap once more
than a few of them are free (its thresholds follow the largest block freed so far): every
new block is then fresh pages that the kernel must map and zero on first touch, the same
bytes each round. :func:`tune_host_memory` fixes the thresholds instead, so that freed
blocks up to ``MMAP_THRESHOLD`` stay in the heap and serve the next allocations without a
page fault.

Larger blocks are still mapped afresh, and some of them stay: a round's rows become the
personal-row segment the store keeps, new memory every round. NumPy advises the kernel to
back its large arrays with huge pages; on a machine whose memory is fragmented (other
processes, the page cache) each huge page then waits for the kernel to compact memory,
several times the cost of zeroing small pages, and varying from round to round. Without the
advice a fresh page costs the same every round. Those fresh blocks are taken by
:func:`populated_empty` where the round allocates them (its rows, which the store keeps):
the kernel maps all their pages in one call (``MADV_POPULATE_WRITE``) instead of taking a
fault at the first write to each. Values do not change: no array here reads memory it did
not write.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import sys

import numpy as np
import numpy.typing as npt

#: ``mallopt`` parameters (glibc's ``malloc.h``).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Blocks up to this size come from the heap (glibc's largest allowed threshold on 64 bits).
MMAP_THRESHOLD = 32 << 20
#: Free memory at the top of the heap kept, not given back to the system, up to this size.
TRIM_THRESHOLD = 1 << 30
#: ``madvise`` advice (Linux 5.14 on): map a range's pages, writable, now.
MADV_POPULATE_WRITE = 23
#: Arrays from this size are populated at once (blocks this large are fresh mappings).
POPULATE_BYTES = MMAP_THRESHOLD


@functools.cache
def tune_host_memory() -> tuple[bool, bool]:
    """Once per process: fix glibc's thresholds and turn NumPy's huge-page advice off (see
    the module's doc); whether each was done (glibc's only on Linux with glibc)."""
    return _fix_malloc_thresholds(), _no_huge_page_advice()


def _fix_malloc_thresholds() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018  # glibc only: musl has no such thresholds
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def _no_huge_page_advice() -> bool:
    """NumPy's runtime switch of its ``madvise(MADV_HUGEPAGE)`` (``numpy._core`` from NumPy
    2, ``numpy.core`` before)."""
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    switch = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if switch is None:
        return False
    switch(False)
    return True


def populated_empty(shape: int | tuple[int, ...], dtype: npt.DTypeLike) -> np.ndarray:
    """``np.empty(shape, dtype)``; from ``POPULATE_BYTES`` its pages are mapped by the kernel
    in one ``madvise(MADV_POPULATE_WRITE)`` call, not one page fault per page at the first
    write (where the kernel has no such advice, the faults come as before). The contents
    are as undefined as ``np.empty``'s (in fact zeros)."""
    out = np.empty(shape, dtype)
    if out.nbytes >= POPULATE_BYTES:
        _populate(out.ctypes.data, out.nbytes)
    return out


def _populate(address: int, size: int) -> bool:
    """Ask the kernel to map the whole pages of ``[address, address + size)``; whether it
    did."""
    madvise = _madvise()
    if madvise is None:
        return False
    page = mmap.PAGESIZE
    start = -(-address // page) * page
    length = (address + size - start) // page * page
    return length > 0 and madvise(start, length, MADV_POPULATE_WRITE) == 0


@functools.cache
def _madvise():
    """libc's ``madvise`` (Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    return madvise
