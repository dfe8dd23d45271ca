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
``checkpoint-dir``, see :mod:`fedrec_flwr.state_store`; in the handshake reply, the ``data-*``
fields of the node's data identity, :class:`fedrec_flwr.data.device.DataIdentity`). Besides
the handshake (``query``), ``query.checkpoint`` and ``query.restore`` carry only a config
(:mod:`fedrec_flwr.checkpoint`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

from fedrec_flwr.npy import to_array, to_numpy

ARRAYS, METRICS, CONFIG = "arrays", "metrics", "config"
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
        "user-ids",  # evaluate replies' per-user record
        "user-metrics",
    }
)


def array_record(**arrays: np.ndarray) -> ArrayRecord:
    """An ArrayRecord of named numpy arrays (``_`` in a name becomes ``-``)."""
    return ArrayRecord({name.replace("_", "-"): to_array(a) for name, a in arrays.items()})


def dense_arrays(dense: dict[str, np.ndarray]) -> dict[str, Array]:
    """Shared-dense parameters (or their sums) under their wire names."""
    return {DENSE_PREFIX + name: to_array(a) for name, a in dense.items()}


def read_dense(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The ``dense.<name>`` arrays of a record, by parameter name."""
    return {
        key[len(DENSE_PREFIX) :]: to_numpy(array)
        for key, array in record.items()
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


def read_rows(record: ArrayRecord) -> tuple[np.ndarray | None, np.ndarray]:
    """(item ids or None for the full table, item rows) of a record written by
    :func:`sparse_rows`; zero rows come back as zeros."""
    item_ids = to_numpy(record["item-ids"]) if "item-ids" in record else None
    rows = to_numpy(record["item-rows"])
    if "zero-ids" not in record:
        return item_ids, rows
    zero_ids = to_numpy(record["zero-ids"])
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
    unreadable (the reply is then rejected, see :mod:`fedrec_flwr.validation`)."""
    records = {}
    for name, kind in ((ARRAYS, ArrayRecord), (METRICS, MetricRecord)):
        if name not in msg.content or not isinstance(msg.content[name], kind):
            raise ValueError(f"the reply has no '{name}' {kind.__name__}")
        records[name] = msg.content[name]
    return numpy_arrays(records[ARRAYS]), dict(records[METRICS])


def numpy_arrays(record: ArrayRecord, what: str = "array") -> dict[str, np.ndarray]:
    """A record's arrays as numpy; ``ValueError`` naming the ``what`` that cannot be read."""
    arrays = {}
    for key, array in record.items():
        try:
            arrays[key] = to_numpy(array)
        except Exception as error:  # bytes that do not decode to an array
            raise ValueError(f"{what} '{key}' cannot be read: {error}") from error
    return arrays


def reply(msg: Message, arrays: ArrayRecord, metrics: dict) -> Message:
    """A reply carrying ``arrays`` and ``metrics``."""
    return Message(RecordDict({ARRAYS: arrays, METRICS: MetricRecord(metrics)}), reply_to=msg)
