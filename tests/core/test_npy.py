"""fedrec_flwr.npy writes and reads exactly what Flower's Array does."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array

from fedrec_flwr.npy import bytes_array, to_array, to_numpy

RNG = np.random.default_rng(0)
ARRAYS = [
    RNG.normal(size=(500, 32)).astype(np.float32),
    RNG.normal(size=(3, 4, 5)),
    np.arange(7, dtype=np.int64),
    np.empty(0, dtype=np.int64),
    np.empty((0, 32), dtype=np.float32),
    np.float32(0.5) * np.ones(()),
    np.array([True, False]),
    np.arange(12, dtype=np.int32).reshape(3, 4).T,  # not C-contiguous
    np.arange(10, dtype=">i4"),  # big-endian
    np.array(["a", "bc"]),  # not numeric: Flower's own path
    np.zeros((1, 10**9 // 10**9), dtype=np.uint8),
]


@pytest.mark.parametrize("value", ARRAYS, ids=range(len(ARRAYS)))
def test_same_bytes_and_values_as_flower(value: np.ndarray) -> None:
    ours, flowers = to_array(value), Array(np.ascontiguousarray(value))
    assert ours.data == flowers.data
    assert (ours.dtype, ours.shape, ours.stype) == (flowers.dtype, flowers.shape, flowers.stype)
    back = to_numpy(flowers)
    expected = flowers.numpy()
    assert back.dtype == expected.dtype and back.shape == expected.shape
    assert np.array_equal(back, expected)
    assert back.flags.writeable


def test_fortran_order_falls_back_to_flower() -> None:
    value = np.asfortranarray(RNG.normal(size=(3, 4)))
    flowers = Array(value)  # np.save writes fortran_order: True
    assert np.array_equal(to_numpy(flowers), value)


def test_equal_large_arrays_share_their_bytes() -> None:
    rows = RNG.normal(size=(300, 32)).astype(np.float32)
    first, second = to_array(rows), to_array(rows.copy())
    assert first.data is second.data  # pickled once when both travel together
    other = to_array(rows + 1)
    assert other.data is not first.data and other.data != first.data
    small = np.arange(10, dtype=np.int64)
    assert to_array(small).data is not to_array(small.copy()).data
    large = np.zeros(2 * 1024 * 1024, dtype=np.float32)  # 8 MiB: never held
    assert to_array(large).data is not to_array(large.copy()).data
    assert np.array_equal(to_numpy(second), rows)


def test_bytes_array_is_flowers_array_of_the_joined_bytes() -> None:
    parts = [b"abc", np.arange(3, dtype=np.int64).view(np.uint8), b"", bytes(5)]
    ours = bytes_array(parts)
    flowers = Array(np.frombuffer(b"".join(bytes(p) for p in parts), np.uint8))
    assert ours.data == flowers.data
    assert (ours.dtype, ours.shape, ours.stype) == (flowers.dtype, flowers.shape, flowers.stype)
