"""A node's host memory: a block freed and allocated again takes no page faults once
:func:`tune_host_memory` has set glibc's thresholds, and NumPy gives no huge-page advice."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fedrec_flwr.node.host_memory import tune_host_memory

#: In a fresh process: fault counts of the first touch of a 16 MB array, allocated, freed and
#: allocated again (NumPy's huge-page advice off: every page of it faults when fresh); then
#: NumPy's huge-page advice as it was (its switch returns the previous setting).
PROBE = """
import resource, sys
import numpy as np
from numpy._core import multiarray
if sys.argv[1] == "tuned":
    from fedrec_flwr.node.host_memory import tune_host_memory
    assert tune_host_memory() == (True, True)
advice = multiarray._set_madvise_hugepage(False)
faults = []
for _ in range(2):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = np.ones(4 << 20, dtype=np.float32)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del block
print(*faults, int(advice))
"""
PAGES = (16 << 20) // 4096

pytestmark = pytest.mark.skipif(
    tune_host_memory() != (True, True), reason="glibc's malloc thresholds: Linux with glibc"
)


def probe(mode: str) -> list[int]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return [int(n) for n in done.stdout.split()]


def test_a_freed_block_serves_the_next_allocation_and_numpy_advises_no_huge_pages():
    first, second, advice = probe("tuned")
    assert first >= PAGES // 2  # fresh pages: the probe sees faults
    assert second < PAGES // 10
    assert advice == 0


def test_without_it_the_block_is_mapped_afresh():
    """The control: glibc's own thresholds give the second block fresh pages."""
    first, second, _ = probe("default")
    assert first >= PAGES // 2 and second >= PAGES // 2
