"""The message schema client and server share: record names, array keys, helpers.

Every array travels in the ``arrays`` ArrayRecord of a message (kebab-case keys, int64 ids):

- server -> node: ``train-users``, ``item-ids`` (absent: the full table) + ``item-rows``, and
  one ``dense.<name>`` per shared-dense parameter;
- node -> server: ``users``, ``eval-items``, ``next-items`` (handshake); ``item-ids``,
  ``row-sums``, ``row-counts``, ``dense.<name>`` (sums over the node's users) and
  ``next-items`` (train); ``next-items`` (evaluate).

Scalars travel in ``metrics`` (MetricRecord) and ``config`` (ConfigRecord: ``server-round``).
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

ARRAYS, METRICS, CONFIG = "arrays", "metrics", "config"
DENSE_PREFIX = "dense."

#: Arrays a node may upload besides ``dense.<name>`` of the method's shared-dense parameters.
UPLOAD_KEYS = frozenset({"users", "eval-items", "next-items", "item-ids", "row-sums", "row-counts"})


def array_record(**arrays: np.ndarray) -> ArrayRecord:
    """An ArrayRecord of named numpy arrays (``_`` in a name becomes ``-``)."""
    return ArrayRecord(
        {name.replace("_", "-"): Array(np.ascontiguousarray(a)) for name, a in arrays.items()}
    )


def dense_arrays(dense: dict[str, np.ndarray]) -> dict[str, Array]:
    """Shared-dense parameters (or their sums) under their wire names."""
    return {DENSE_PREFIX + name: Array(np.ascontiguousarray(a)) for name, a in dense.items()}


def read_dense(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The ``dense.<name>`` arrays of a record, by parameter name."""
    return {
        key[len(DENSE_PREFIX) :]: array.numpy()
        for key, array in record.items()
        if key.startswith(DENSE_PREFIX)
    }


def allowed_upload_keys(shared_dense: tuple[str, ...]) -> frozenset[str]:
    """Every array key a node may send for a method with these shared-dense parameters."""
    return UPLOAD_KEYS | {DENSE_PREFIX + name for name in shared_dense}


def reply(msg: Message, arrays: ArrayRecord, metrics: dict) -> Message:
    """A reply carrying ``arrays`` and ``metrics``."""
    return Message(RecordDict({ARRAYS: arrays, METRICS: MetricRecord(metrics)}), reply_to=msg)
