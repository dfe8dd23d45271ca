"""The rows a node's round starts from (:func:`~fedrec_flwr.node.round_params.round_rows`):
on an accelerator they are gathered from the distinct items' rows there
(:func:`~fedrec_flwr.node.round_params.gathered_rows`), which must give the host's look-up
exactly (run here on the CPU); and the host copies of a round's tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedrec_flwr.node.protocols import lookup_rows
from fedrec_flwr.node.round_params import gathered_rows, host_array, host_copy, round_rows

CPU = torch.device("cpu")


def _table(num_items: int, dim: int = 5) -> np.ndarray:
    return np.random.default_rng(3).normal(size=(num_items, dim)).astype(np.float32)


@pytest.mark.parametrize("sparse", [False, True])
def test_gathered_rows_are_the_lookup(sparse):
    table = _table(50)
    items = np.random.default_rng(4).integers(0, 50, size=400)
    item_ids, item_rows = None, table
    if sparse:  # the server sent the rows of some items: those the round needs, and others
        item_ids = np.union1d(items, [0, 49])
        item_rows = table[item_ids]
    expected = lookup_rows(items, item_ids, item_rows)
    gathered = gathered_rows(items, item_ids, item_rows, CPU)
    assert gathered.dtype == torch.float32
    assert gathered.numpy().tobytes() == expected.tobytes()
    assert np.array_equal(round_rows(items, item_ids, item_rows, CPU).numpy(), expected)


def test_gathered_rows_of_no_items():
    rows = gathered_rows(np.empty(0, np.int64), None, _table(4), CPU)
    assert tuple(rows.shape) == (0, 5)


def test_gathered_rows_refuse_a_missing_row():
    table = _table(10)
    with pytest.raises(RuntimeError, match="missing"):
        gathered_rows(np.array([1, 7]), np.array([1, 2]), table[[1, 2]], CPU)


def test_round_rows_on_the_host_share_the_lookup_memory():
    """On the host the look-up's array is the tensor (no copy; training then tunes it)."""
    rows = round_rows(np.array([2, 0, 2]), None, _table(3), CPU)
    rows[0, 0] = 123.0
    assert rows.numpy()[0, 0] == 123.0
    assert rows[2, 0] != 123.0  # a new array: each flat row its own copy


def test_host_copy_and_host_array():
    tensor = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    copy = host_copy(tensor)
    assert torch.equal(copy, tensor) and copy.data_ptr() != tensor.data_ptr()
    array = host_array(tensor)  # on the host: the tensor itself
    assert array.ctypes.data == tensor.data_ptr()
