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
fault at the first write to each. A block such an array leaves when its last reference
goes is kept as a spare (up to ``MAX_SPARES`` of them) and serves the next request it fits:
a round's rows then take the memory of the rows the store dropped the round before, already
mapped, instead of fresh pages every round. Values do not change: no array here reads
memory it did not write.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import sys
import threading
import weakref

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
#: Freed populated blocks kept for the next requests (the oldest unmapped beyond these).
MAX_SPARES = 2
#: A spare serves a request of at least this share of its size (no large block wasted).
SPARE_FILL = 0.8


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
    write (where the kernel has no such advice, the faults come as before), or it takes a
    spare block that an earlier such array left (pages already mapped). The contents are
    as undefined as ``np.empty``'s (zeros, or what the spare's last array held)."""
    dtype = np.dtype(dtype)
    dims = tuple(int(n) for n in np.ravel(shape))
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if nbytes < POPULATE_BYTES:
        return np.empty(dims, dtype)
    block = _SPARES.take(nbytes)
    if block is None:  # a fresh mapping, a little larger: the next rounds' rows vary
        block = _mapped(_capacity(nbytes))
        _populate(_address(block), len(block))
    base = np.frombuffer(block, dtype=np.uint8, count=nbytes)
    weakref.finalize(base, _SPARES.give, block).atexit = False
    return base.view(dtype).reshape(dims)


def _capacity(nbytes: int) -> int:
    """A fresh block's size for ``nbytes``: rounded up to a sixteenth to a thirty-second of
    it (a power of two), whole pages."""
    granule = max(mmap.PAGESIZE, 1 << max(nbytes.bit_length() - 5, 0))
    return -(-nbytes // granule) * granule


def _mapped(size: int) -> mmap.mmap:
    """``size`` bytes of private anonymous memory (Python's default, a shared mapping, is
    kernel shared memory: about twice the cost to map)."""
    if hasattr(mmap, "MAP_PRIVATE"):  # POSIX
        return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)
    return mmap.mmap(-1, size)


def _address(block: mmap.mmap) -> int:
    """The address of ``block``'s memory."""
    return ctypes.addressof(ctypes.c_char.from_buffer(block))


class _SpareBlocks:
    """Freed populated blocks (mapped pages) waiting for a request they fit."""

    def __init__(self) -> None:
        self.blocks: list[mmap.mmap] = []
        self.lock = threading.RLock()  # a collection inside may free an array: give()

    def take(self, nbytes: int) -> mmap.mmap | None:
        """The smallest spare of ``nbytes`` or more that it fills to ``SPARE_FILL``, out of
        the spares; None if there is none."""
        with self.lock:
            fits = [b for b in self.blocks if nbytes <= len(b) and nbytes >= SPARE_FILL * len(b)]
            if not fits:
                return None
            block = min(fits, key=len)
            self.blocks.remove(block)
            return block

    def give(self, block: mmap.mmap) -> None:
        """Keep ``block`` (no array uses it any more); the oldest spare beyond
        ``MAX_SPARES`` is unmapped."""
        with self.lock:
            self.blocks.append(block)
            dropped = self.blocks[:-MAX_SPARES]
            del self.blocks[:-MAX_SPARES]
        for old in dropped:
            old.close()


_SPARES = _SpareBlocks()


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
