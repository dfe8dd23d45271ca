"""The wire form of a record: several arrays packed into one Flower Array, read back exactly;
anything else is refused with a reason."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.app import ArrayRecord
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedrec_flwr.messages import PACK_MAGIC, PACKED, array_record, pack, record_arrays, unpack
from fedrec_flwr.npy import to_array

DTYPES = st.sampled_from(["<i8", "<i4", "<f4", "<f8", "|b1", "|u1", ">i4", "<u2"])
ARRAYS = DTYPES.flatmap(
    lambda dtype: hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0))
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=12), ARRAYS, min_size=0, max_size=6))
def test_packed_arrays_come_back_exactly(arrays: dict[str, np.ndarray]) -> None:
    back = unpack(pack(arrays))
    assert list(back) == list(arrays)
    for name, value in arrays.items():
        assert back[name].dtype == value.dtype and back[name].shape == value.shape, name
        assert back[name].tobytes() == value.tobytes(), name  # NaNs included
        assert back[name].flags.writeable


def test_a_record_of_several_arrays_is_one_flower_array() -> None:
    ids, rows = np.arange(5, dtype=np.int64), np.ones((5, 3), np.float32)
    record = array_record(item_ids=ids, row_sums=rows, row_counts=np.ones(5, np.int64))
    assert list(record.keys()) == [PACKED]
    arrays = record_arrays(record)
    assert sorted(arrays) == ["item-ids", "row-counts", "row-sums"]  # wire names
    assert np.array_equal(arrays["row-sums"], rows) and arrays["item-ids"].dtype == np.int64
    # One array stays as it is; wire names given as a mapping are kept.
    assert list(array_record(item_table=rows).keys()) == ["item-table"]
    assert list(record_arrays(array_record({"dense.w": rows}, users=ids))) == ["dense.w", "users"]
    # Views into the record's own copy: writing one changes neither the message nor the others.
    arrays["item-ids"][:] = -1
    assert record_arrays(record)["item-ids"].tolist() == [0, 1, 2, 3, 4]


def test_a_non_numeric_array_is_not_packed() -> None:
    with pytest.raises(TypeError, match="only numbers are packed"):
        pack({"names": np.array(["a", "b"]), "ids": np.arange(2)})


def _blob(index: list, data: bytes = b"\0" * 64) -> np.ndarray:
    header = json.dumps(index).encode()
    start = -(-(len(PACK_MAGIC) + 4 + len(header)) // 8) * 8
    raw = PACK_MAGIC + len(header).to_bytes(4, "little") + header
    return np.frombuffer(raw + b"\0" * (start - len(raw)) + data, np.uint8)


@pytest.mark.parametrize(
    ("blob", "reason"),
    [
        (np.frombuffer(b"NOTPACKED" + b"\0" * 32, np.uint8), "no magic"),
        (_blob([["x", "|O", [1], 0]]), "not a plain number type"),
        (_blob([["x", "<f8", [100], 0]]), "lies outside the record"),
        (_blob([["x", "<f8", [2], -8]]), "lies outside the record"),
        (_blob([["x", "<f8", [-1, 2], 0]]), "lies outside the record"),
        (_blob([["x", "<i8", [1], 0], ["x", "<i8", [1], 8]]), "'x' twice"),
        (_blob([["x", "<i8"]]), "packed record"),
        (np.frombuffer(PACK_MAGIC + (999).to_bytes(4, "little") + b"[", np.uint8), "index"),
    ],
)
def test_a_malformed_packed_record_is_refused(blob: np.ndarray, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        unpack(blob)
    with pytest.raises(ValueError, match=reason):  # as the server reads a reply
        record_arrays(ArrayRecord({PACKED: to_array(blob)}))


def test_an_array_both_packed_and_not_is_refused() -> None:
    record = array_record(users=np.arange(3), next_items=np.arange(2))
    record["users"] = to_array(np.arange(4))
    with pytest.raises(ValueError, match="'users' twice"):
        record_arrays(record)
