"""The message schema client and server share: record names, array keys, helpers.

Every array travels in the ``arrays`` ArrayRecord of a message (kebab-case keys, int64 ids):

- server -> node: ``train-users``, ``item-ids`` (absent: the full table) + ``item-rows``,
  ``zero-ids`` (rows that are zero, sent without values; sparse methods only), and one
  ``dense.<name>`` per shared-dense parameter;
- node -> server: ``users``, ``eval-items``, ``next-items`` (handshake); ``item-ids``,
  ``row-sums``, ``row-counts``, ``zero-ids`` + ``zero-counts`` (trained rows whose sum is
  zero), ``dense.<name>`` (sums over the node's users) and ``next-items`` (train);
  ``next-items`` (evaluate).

An evaluate reply also carries a ``per-user`` ArrayRecord, the evaluation report of the
node's evaluated users: ``user-ids`` (int64 [a], their global ids) and ``user-metrics``
(float64 [a, metrics]: the ``val-*`` then the ``test-*`` metrics of each). It is a
measurement the server keeps for ``per-user.csv``, not part of the recommender's protocol:
``bytes-up`` counts only the ``arrays`` record.

Scalars travel in ``metrics`` (MetricRecord) and ``config`` (ConfigRecord: ``server-round``,
and what a node needs to keep its state on disk: ``run-key``, ``session``, ``restore-round``,
``checkpoint-dir``, see :mod:`fedrec_flwr.node.state_store`; in the handshake reply, the ``data-*``
fields of the node's data identity, :class:`fedrec_flwr.data.device.DataIdentity`). Besides
the handshake (``query``), ``query.checkpoint`` and ``query.restore`` carry only a config
(:mod:`fedrec_flwr.server.checkpoint`).

On the wire, a record of two or more arrays holds them in one Flower ``Array``, ``packed``
(:func:`pack`): every Flower ``Array`` is two objects (array and chunk) that the SuperLink
stores and a ServerApp pushes or pulls one request each, so a train reply of six arrays cost
twelve requests where it now costs two. :func:`array_record` packs, :func:`record_arrays`
reads either form; the names above are those of the arrays inside.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from fedrec_flwr.npy import bytes_array, to_array, to_numpy

ARRAYS, METRICS, CONFIG = "arrays", "metrics", "config"
#: ``config`` keys of every train, evaluate and checkpoint message: where and for which run a
#: node keeps its state on disk (:mod:`fedrec_flwr.node.state_store`).
RUN_KEY, SESSION, RESTORE_ROUND, CHECKPOINT_DIR = (
    "run-key",
    "session",
    "restore-round",
    "checkpoint-dir",
)
#: ``config`` key of a checkpoint message that keeps the best validation round's model
#: (``keep-best-state``) in ``checkpoint-dir`` or, with a ``state-dir``, its ``best-state/``.
BEST_STATE = "best-state"
PER_USER = "per-user"  # evaluate replies: per-user metrics of the evaluated users
DENSE_PREFIX = "dense."

#: Arrays a node may upload besides ``dense.<name>`` of the method's shared-dense parameters.
UPLOAD_KEYS = frozenset(
    {
        "users",
        "eval-items",
        "next-items",
        "item-ids",
        "row-sums",
        "row-counts",
        "zero-ids",
        "zero-counts",
        "basket-items",  # a method that sums co-occurrences (fedrec_flwr/node/statistics.py)
        "basket-offsets",
        "user-ids",  # evaluate replies' per-user record
        "user-metrics",
    }
)


PACKED = "packed"  # the one Flower Array holding a record's arrays (see the module doc)
PACK_MAGIC = b"FRPACK1\n"
_PACK_DTYPE = re.compile(r"[<>|=][biuf]\d{1,2}")  # plain numbers only: nothing to unpickle
_ALIGN = 8


def _padding(size: int) -> bytes:
    return bytes(-size % _ALIGN)


def _packed_parts(arrays: Mapping[str, np.ndarray]) -> list:
    """The byte parts of :func:`pack`: magic, the index's length and the JSON index (name,
    dtype, shape, offset of each), then each array's C-ordered bytes, every part padded to
    8 bytes (views of the arrays: joined once, by the caller)."""
    index: list[list[object]] = []
    data: list[bytes | np.ndarray] = []
    offset = 0
    for name, value in arrays.items():
        value = np.asarray(value)
        if not value.flags.c_contiguous:
            value = value.copy(order="C")
        if value.dtype.kind not in "biuf":
            raise TypeError(f"array '{name}' has dtype {value.dtype}: only numbers are packed")
        index.append([name, value.dtype.str, list(value.shape), offset])
        data += [value.reshape(-1).view(np.uint8), _padding(value.nbytes)]
        offset += value.nbytes + len(data[-1])
    header = json.dumps(index, separators=(",", ":")).encode()
    head = len(PACK_MAGIC) + 4 + len(header)
    return [PACK_MAGIC, len(header).to_bytes(4, "little"), header, _padding(head), *data]


def pack(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """Named numeric arrays as one uint8 array (what :func:`array_record` sends)."""
    return np.frombuffer(b"".join(_packed_parts(arrays)), np.uint8)


def unpack(packed: np.ndarray, copy: bool = True) -> dict[str, np.ndarray]:
    """The arrays :func:`pack` wrote (copies; else views of ``packed``, which must then be
    a writable array of its own); ``ValueError`` for anything else."""
    data = np.ascontiguousarray(packed).view(np.uint8).reshape(-1)
    head = len(PACK_MAGIC) + 4
    if data[: len(PACK_MAGIC)].tobytes() != PACK_MAGIC or len(data) < head:
        raise ValueError("not a packed record (no magic)")
    length = int.from_bytes(data[len(PACK_MAGIC) : head].tobytes(), "little")
    try:
        index = json.loads(data[head : head + length].tobytes())
    except ValueError as error:
        raise ValueError(f"packed record: unreadable index ({error})") from error
    start = -(-(head + length) // _ALIGN) * _ALIGN
    arrays: dict[str, np.ndarray] = {}
    try:
        for name, dtype, shape, offset in index:
            if not (isinstance(name, str) and _PACK_DTYPE.fullmatch(dtype)):
                raise ValueError(f"entry {name!r}: dtype {dtype!r} is not a plain number type")
            if name in arrays:
                raise ValueError(f"array '{name}' twice")
            kind = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64))
            begin = start + int(offset)
            end = begin + count * kind.itemsize
            if min(shape, default=0) < 0 or begin < start or end > len(data):
                raise ValueError(f"array '{name}' lies outside the record")
            values = data[begin:end].view(kind).reshape(shape)
            arrays[name] = values.copy() if copy else values
    except (TypeError, ValueError) as error:
        raise ValueError(f"packed record: {error}") from error
    return arrays


def array_record(
    arrays: Mapping[str, np.ndarray] | None = None, /, **named: np.ndarray
) -> ArrayRecord:
    """An ArrayRecord of numpy arrays: ``arrays`` under their wire names, ``named`` with
    ``_`` in a name becoming ``-``. Two or more travel packed (:func:`pack`)."""
    wire = dict(arrays or {})
    wire.update((name.replace("_", "-"), value) for name, value in named.items())
    if len(wire) < 2:
        return ArrayRecord({name: to_array(value) for name, value in wire.items()})
    return ArrayRecord({PACKED: bytes_array(_packed_parts(wire))})


#: What a :class:`~flwr.app.RecordDict` holds under a name.
AnyRecord = ArrayRecord | MetricRecord | ConfigRecord


def record_arrays(record: AnyRecord, what: str = "array") -> dict[str, np.ndarray]:
    """A record's arrays as numpy by wire name, the packed ones unpacked; ``ValueError``
    naming the ``what`` that cannot be read (or that is in a record of another kind)."""
    if not isinstance(record, ArrayRecord):
        raise ValueError(f"the {what}s are in a {type(record).__name__}, not an ArrayRecord")
    arrays: dict[str, np.ndarray] = {}
    for key, array in record.items():
        try:
            values = to_numpy(array)
        except Exception as error:  # bytes that do not decode to an array
            raise ValueError(f"{what} '{key}' cannot be read: {error}") from error
        if key != PACKED:
            arrays[key] = values
            continue
        for name, value in unpack(values, copy=False).items():  # to_numpy copied
            if name in arrays or name in record:
                raise ValueError(f"{what} '{name}' twice (packed and not)")
            arrays[name] = value
    return arrays


def config_record(records: RecordDict, name: str = CONFIG) -> ConfigRecord:
    """The ConfigRecord ``records[name]``; ``ValueError`` if it is a record of another kind."""
    record = records[name]
    if not isinstance(record, ConfigRecord):
        raise ValueError(f"record '{name}' is a {type(record).__name__}, not a ConfigRecord")
    return record


def metric_record(records: RecordDict, name: str = METRICS) -> MetricRecord:
    """The MetricRecord ``records[name]``; ``ValueError`` if it is a record of another kind."""
    record = records[name]
    if not isinstance(record, MetricRecord):
        raise ValueError(f"record '{name}' is a {type(record).__name__}, not a MetricRecord")
    return record


def int_value(record: ConfigRecord | MetricRecord, key: str, default: int | None = None) -> int:
    """``record[key]`` as an int (``default`` when the key is absent and a default is given);
    ``ValueError`` naming the key when the value is no number."""
    value = record[key] if default is None or key in record else default
    if not isinstance(value, int | float):
        raise ValueError(f"'{key}' must be an integer, got {value!r}")
    return int(value)


def round_of(msg: Message) -> int:
    """The ``server-round`` of a message's ``config``."""
    return int_value(config_record(msg.content), "server-round")


def float_value(record: ConfigRecord | MetricRecord, key: str) -> float:
    """``record[key]`` as a float; ``ValueError`` naming the key when the value is no number."""
    value = record[key]
    if not isinstance(value, int | float):
        raise ValueError(f"'{key}' must be a number, got {value!r}")
    return float(value)


def dense_arrays(dense: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Shared-dense parameters (or their sums) under their wire names."""
    return {DENSE_PREFIX + name: value for name, value in dense.items()}


def read_dense(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The ``dense.<name>`` arrays of a message's arrays, by parameter name."""
    return {
        key[len(DENSE_PREFIX) :]: value
        for key, value in arrays.items()
        if key.startswith(DENSE_PREFIX)
    }


def sparse_rows(
    item_ids: np.ndarray | None, rows: np.ndarray, threshold: float | None
) -> dict[str, np.ndarray]:
    """The arrays that carry global rows (``item_ids`` None: the full table). When
    ``threshold`` is set (a sparse method) and some rows are exactly zero, those rows travel
    as ``zero_ids`` only: ``item_rows`` keeps the non-zero ones (and ``item_ids``, for a
    request, their ids), so the bytes drop by a row per zero row."""
    zero = ~rows.any(axis=1) if threshold is not None else np.zeros(len(rows), dtype=bool)
    if not zero.any():
        if item_ids is None:
            return {"item_rows": rows}
        return {"item_ids": item_ids, "item_rows": rows}
    ids = np.flatnonzero(zero) if item_ids is None else item_ids[zero]
    arrays = {"item_rows": rows[~zero], "zero_ids": ids.astype(np.int64)}
    if item_ids is not None:
        arrays["item_ids"] = item_ids[~zero]
    return arrays


def read_rows(arrays: Mapping[str, np.ndarray]) -> tuple[np.ndarray | None, np.ndarray]:
    """(item ids or None for the full table, item rows) of arrays written by
    :func:`sparse_rows`; zero rows come back as zeros."""
    item_ids = arrays.get("item-ids")
    rows = arrays["item-rows"]
    if "zero-ids" not in arrays:
        return item_ids, rows
    zero_ids = arrays["zero-ids"]
    if item_ids is None:  # the full table
        full = np.zeros((len(rows) + len(zero_ids), rows.shape[1]), dtype=rows.dtype)
        nonzero = np.ones(len(full), dtype=bool)
        nonzero[zero_ids] = False
        full[nonzero] = rows
        return None, full
    ids = np.concatenate([item_ids, zero_ids])
    order = np.argsort(ids, kind="stable")
    full = np.concatenate([rows, np.zeros((len(zero_ids), rows.shape[1]), rows.dtype)])
    return ids[order], full[order]


def allowed_upload_keys(shared_dense: tuple[str, ...]) -> frozenset[str]:
    """Every array key a node may send for a method with these shared-dense parameters."""
    return UPLOAD_KEYS | {DENSE_PREFIX + name for name in shared_dense}


def read_reply(msg: Message) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays as numpy, metrics) of a reply; ``ValueError`` saying what is missing or
    unreadable (the reply is then rejected, see :mod:`fedrec_flwr.server.validation`)."""
    arrays, metrics = msg.content.get(ARRAYS), msg.content.get(METRICS)
    if not isinstance(arrays, ArrayRecord):
        raise ValueError(f"the reply has no '{ARRAYS}' ArrayRecord")
    if not isinstance(metrics, MetricRecord):
        raise ValueError(f"the reply has no '{METRICS}' MetricRecord")
    return record_arrays(arrays), dict(metrics)


def reply(msg: Message, arrays: ArrayRecord, metrics: dict) -> Message:
    """A reply carrying ``arrays`` and ``metrics``."""
    return Message(RecordDict({ARRAYS: arrays, METRICS: MetricRecord(metrics)}), reply_to=msg)
