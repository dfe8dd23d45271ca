"""Freed host memory is reused, not mapped afresh: a block freed and allocated again takes
no page faults once :func:`keep_freed_memory` has set glibc's thresholds."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fedrec_flwr.node.host_memory import keep_freed_memory

#: In a fresh process: fault counts of the first touch of a 16 MB array, allocated, freed and
#: allocated again (NumPy's huge-page advice off: every page of it faults when fresh).
PROBE = """
import resource, sys
import numpy as np
from numpy._core import multiarray
multiarray._set_madvise_hugepage(False)
if sys.argv[1] == "keep":
    from fedrec_flwr.node.host_memory import keep_freed_memory
    assert keep_freed_memory()
faults = []
for _ in range(2):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = np.ones(4 << 20, dtype=np.float32)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del block
print(*faults)
"""
PAGES = (16 << 20) // 4096

pytestmark = pytest.mark.skipif(
    not keep_freed_memory(), reason="glibc's malloc thresholds: Linux with glibc only"
)


def faults(mode: str) -> list[int]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return [int(n) for n in done.stdout.split()]


def test_a_freed_block_serves_the_next_allocation():
    first, second = faults("keep")
    assert first >= PAGES // 2  # fresh pages: the probe sees faults
    assert second < PAGES // 10


def test_without_it_the_block_is_mapped_afresh():
    """The control: glibc's own thresholds give the second block fresh pages."""
    first, second = faults("default")
    assert first >= PAGES // 2 and second >= PAGES // 2
