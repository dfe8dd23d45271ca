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


def test_a_populated_array_is_mapped_before_its_first_write():
    """A block of ``POPULATE_BYTES`` or more: its pages are mapped by one call, so writing
    it then faults on almost none of them (where the kernel takes the advice)."""
    import resource

    import numpy as np

    from fedrec_flwr.node.host_memory import POPULATE_BYTES, _populate, populated_empty

    probe = np.empty(POPULATE_BYTES, np.uint8)
    if not _populate(probe.ctypes.data, probe.nbytes):
        pytest.skip("the kernel takes no MADV_POPULATE_WRITE (Linux before 5.14)")
    size = 2 * POPULATE_BYTES
    block = populated_empty(size // 4, np.float32)  # the kernel counts its own faults
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block[:] = 1.0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < (size // 4096) // 10
    assert populated_empty(3, np.int64).shape == (3,)  # small: plain np.empty


def test_rows_at_copies_whole_rows_as_fancy_indexing_does():
    """``lookup_rows``' copy: every index shape, the same rows; an index out of range fails
    as NumPy's indexing does, a negative one counts from the end as there."""
    import numpy as np

    from fedrec_flwr.node import host_memory
    from fedrec_flwr.node.scoring import _rows_at

    rng = np.random.default_rng(0)
    table = rng.standard_normal((50, 8)).astype(np.float32)
    for index in (rng.integers(0, 50, 1000), rng.integers(0, 50, (7, 9)), np.array([], int)):
        assert np.array_equal(_rows_at(table, index), table[index])
    assert np.array_equal(_rows_at(table, np.array([-1, 3])), table[[-1, 3]])
    with pytest.raises(IndexError):
        _rows_at(table, np.array([0, 50]))
    big = rng.integers(0, 50, host_memory.POPULATE_BYTES // 32 + 1)  # a populated block
    assert np.array_equal(_rows_at(table, big), table[big])


def test_a_freed_populated_block_serves_the_next_request_without_page_faults():
    """A populated array's block goes back to the spares when its last reference (a view, a
    tensor on it) goes, and the next request it fits takes it, pages already mapped; at
    most ``MAX_SPARES`` are kept."""
    import resource

    import numpy as np
    import torch

    from fedrec_flwr.node import host_memory

    spares = host_memory._SPARES.blocks
    spares.clear()
    size = 2 * host_memory.POPULATE_BYTES
    block = host_memory.populated_empty((size // 128, 32), np.float32)
    block[:] = 1.0
    tensor = torch.from_numpy(block[1:])
    del block
    assert not spares  # the tensor holds it
    del tensor
    assert len(spares) == 1
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    again = host_memory.populated_empty((size // 128 - 1000, 32), np.float32)
    again[:] = 2.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < (size // 4096) // 10
    assert not spares and np.all(again == 2.0)
    del again
    small = host_memory.populated_empty(host_memory.POPULATE_BYTES // 4, np.float32)
    assert len(spares) == 1  # it would fill too little of the spare: a block of its own
    del small
    blocks = [host_memory.populated_empty(size // 4, np.float32) for _ in range(4)]
    del blocks
    assert len(spares) == host_memory.MAX_SPARES
    spares.clear()
