"""Freed host memory kept for the next round (:func:`keep_freed_memory`).

A round's tensors and arrays (gathered rows, products, gradients, the step's scratch) are
allocated and freed step after step, round after round. glibc's ``malloc`` serves the large
ones by ``mmap`` and gives them back on ``free``, or gives back the top of its heap once more
than a few of them are free (its thresholds follow the largest block freed so far): every
new block is then fresh pages that the kernel must map and zero on first touch, the same
bytes each round. :func:`keep_freed_memory` fixes the thresholds instead, so that freed
blocks up to ``MMAP_THRESHOLD`` stay in the heap and serve the next allocations without a
page fault. Larger blocks (a round's new personal-row segment, which the store keeps) are
still mapped and given back as before. Values do not change: no array here reads memory it
did not write.

Only on Linux with glibc (elsewhere it does nothing); once per process.
"""

from __future__ import annotations

import ctypes
import functools
import sys

#: ``mallopt`` parameters (glibc's ``malloc.h``).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Blocks up to this size come from the heap (glibc's largest allowed threshold on 64 bits).
MMAP_THRESHOLD = 32 << 20
#: Free memory at the top of the heap kept, not given back to the system, up to this size.
TRIM_THRESHOLD = 1 << 30


@functools.cache
def keep_freed_memory() -> bool:
    """Fix glibc's thresholds (see the module's doc); True when they were set."""
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
