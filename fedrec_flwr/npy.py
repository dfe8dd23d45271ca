"""Flower ``Array`` <-> numpy without ``np.save``/``np.load`` on the hot path.

A Flower ``Array`` holds ``np.save`` bytes. Writing them takes ``np.save``'s file-object
detour and reading them parses the header with ``ast.literal_eval``: tens of microseconds per
array, several arrays per message, thousands of messages per round in faithful mode (one user
per node). :func:`to_array` writes the same bytes (numpy's own header writer, then the raw
data); :func:`to_numpy` reads a header as ``np.save`` writes it directly and falls back to
``Array.numpy()`` for anything else. ``tests/test_npy.py`` checks both against Flower's.
"""

from __future__ import annotations

import functools
import io
import re
import threading

import numpy as np
from flwr.app import Array

MAGIC = b"\x93NUMPY"
HEADER = re.compile(
    rb"\{'descr': '([<>|=][a-zA-Z]\d+)', 'fortran_order': False, 'shape': \(([\d, ]*)\), \}"
)
SIMPLE_KINDS = frozenset("biuf")
#: arrays of this many bytes are interned (see :func:`_interned`): a user's rows, a table
INTERN_BYTES = (16 * 1024, 4 * 1024 * 1024)
INTERN_SLOTS = 8  # so at most 32 MiB are held
_recent: dict[tuple[int, int], bytes] = {}
_recent_lock = threading.Lock()


def to_array(array: np.ndarray) -> Array:
    """``Array(array)`` (the same ``np.save`` bytes), faster for plain numeric arrays."""
    array = np.ascontiguousarray(array)
    if array.dtype.kind not in SIMPLE_KINDS or array.dtype.hasobject:
        return Array(array)
    shape = tuple(int(n) for n in array.shape)
    return Array(
        dtype=str(array.dtype),
        shape=shape,
        stype="numpy.ndarray",
        # One copy of the data (``header + array.tobytes()`` makes two).
        data=_interned(b"".join((_header(array.dtype, shape), array.reshape(-1).data))),
    )


def bytes_array(parts: list) -> Array:
    """A 1-D uint8 ``Array`` of the concatenated byte ``parts`` (buffers), written with one
    copy: the bytes of ``Array(np.frombuffer(b"".join(parts), np.uint8))``."""
    size = sum(memoryview(part).nbytes for part in parts)
    shape = (size,)
    header = _header(np.dtype(np.uint8), shape)
    return Array(dtype="uint8", shape=shape, stype="numpy.ndarray", data=b"".join((header, *parts)))


def _interned(data: bytes) -> bytes:
    """``data``, or an equal bytes object encoded just before (one of the last few large
    ones). Equal arrays then share their bytes: a faithful node's tuned rows go in its reply
    and in its private state, and Ray pickles the two once (under its 100 kB limit for
    passing a result inline); the server's full table goes once into every evaluate message.
    Bytes are immutable, so sharing changes nothing but memory and copies. Larger arrays
    (a packed node's state) are not held: memory, not copies, is their cost."""
    if not INTERN_BYTES[0] <= len(data) <= INTERN_BYTES[1]:
        return data
    key = (len(data), hash(data))
    with _recent_lock:
        found = _recent.get(key)
        if found is not None and found == data:
            return found
        _recent[key] = data
        while len(_recent) > INTERN_SLOTS:
            del _recent[next(iter(_recent))]
    return data


@functools.lru_cache(maxsize=4096)
def _header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """numpy's own ``.npy`` 1.0 header of a C-ordered array (as ``np.save`` writes it)."""
    header = io.BytesIO()
    descr = np.lib.format.dtype_to_descr(dtype)
    info = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(header, info)
    return header.getvalue()


def to_numpy(array: Array) -> np.ndarray:
    """``array.numpy()`` (a writable array of the same dtype, shape and values), faster."""
    data = array.data
    if array.stype != "numpy.ndarray" or data[:8] != MAGIC + b"\x01\x00":
        return array.numpy()
    length = int.from_bytes(data[8:10], "little")
    match = HEADER.match(data, 10, 10 + length)
    if match is None:
        return array.numpy()
    shape = tuple(int(n) for n in match.group(2).split(b",") if n.strip())
    count = int(np.prod(shape, dtype=np.int64))
    dtype = np.dtype(match.group(1).decode())
    values = np.frombuffer(data, dtype=dtype, count=count, offset=10 + length)
    return values.reshape(shape).copy()
