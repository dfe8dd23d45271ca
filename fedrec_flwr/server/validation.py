"""Checks of the nodes' replies before the server uses any of them (plain numpy).

The strategy passes each train or evaluate reply, as numpy arrays and numbers, through
:func:`check_train_reply` or :func:`check_eval_reply` with what it knows of the round (the
users and rows it sent that node). A reply that fails raises :class:`ReplyError` with a
message that says what was wrong; the strategy skips it, so a malformed reply never reaches
the global table, the shared-dense parameters or the metrics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedrec_flwr.aggregation import RowUpload
from fedrec_flwr.config import RunConfig
from fedrec_flwr.messages import DENSE_PREFIX
from fedrec_flwr.methods import Method
from fedrec_flwr.methods.itemitem import uploads_statistics
from fedrec_flwr.server.payloads import TrainOrder

__all__ = [
    "NonFiniteReplyError",
    "ReplyError",
    "ReplySchema",
    "TrainOrder",
    "check_eval_reply",
    "check_number",
    "check_request",
    "check_train_reply",
    "reply_schema",
]

TRAIN_KEYS = frozenset({"item-ids", "row-sums", "row-counts", "zero-ids", "zero-counts"})
EVAL_KEYS: frozenset[str] = frozenset()
PER_USER_KEYS = frozenset({"user-ids", "user-metrics"})  # an evaluate reply's per-user record
REQUEST_KEY = "next-items"  # allowed in both: the rows a node needs next round
ID_DTYPE = np.dtype(np.int64)
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
SHOWN = 5  # offending values quoted in a message


class ReplyError(ValueError):
    """A node's reply is malformed; the message says what was wrong."""


class NonFiniteReplyError(ReplyError):
    """A reply holds NaN or inf: the node's training diverged (or the reply is corrupt)."""


@dataclass(frozen=True)
class ReplySchema:
    """What every reply of a run must match: the item catalogue, the row width and the
    shapes of the method's shared-dense parameters."""

    num_items: int
    row_dim: int
    dense_shapes: Mapping[str, tuple[int, ...]]
    #: A method that sums co-occurrences (its uploads: :mod:`fedrec_flwr.server.statistics`)
    #: and the most items one user may upload (``ItemItem.upload_limit``; 0: no bound).
    statistics: bool = False
    max_degree: int = 0
    #: Their secure vectors' layout this round (a ``StatisticsLayout``; None: none).
    layout: Any = None

    def train_keys(self) -> frozenset[str]:
        """Array keys a train reply may carry (a subset of ``allowed_upload_keys``)."""
        return TRAIN_KEYS | {REQUEST_KEY} | {DENSE_PREFIX + n for n in self.dense_shapes}


def reply_schema(config: RunConfig, method: Method, model: Any) -> ReplySchema:
    """What every reply must match (item catalogue, row width, dense shapes; for a method
    that sums co-occurrences, its uploads and their bound on a user's items)."""
    shapes = {name: value.shape for name, value in model.dense.items()}
    if uploads_statistics(method):
        degree, layout = method.upload_limit, model.secure_layout()
        return ReplySchema(model.num_items, model.row_dim, shapes, True, degree, layout)
    return ReplySchema(model.num_items, model.row_dim, shapes)


def check_train_reply(
    arrays: Mapping[str, np.ndarray],
    metrics: Mapping[str, Any],
    schema: ReplySchema,
    order: TrainOrder,
) -> RowUpload:
    """The upload of a valid train reply; raise :class:`ReplyError` otherwise."""
    _keys(arrays, schema.train_keys(), {"item-ids", "row-sums", "row-counts"}, "train")
    num_users = _number(metrics, "num-users", integral=True)
    if num_users != len(order.users):
        raise ReplyError(
            f"num-users={num_users:g} but the server selected {len(order.users)} users on "
            "this node this round"
        )
    _number(metrics, "num-samples", integral=True)
    _number(metrics, "loss-sum")
    item_ids = _ids(arrays, "item-ids", schema.num_items)
    row_sums = _floats(arrays, "row-sums", (len(item_ids), schema.row_dim))
    row_counts = _counts(arrays, "row-counts", len(item_ids), int(num_users))
    zero_ids = np.empty(0, dtype=np.int64)
    zero_counts = np.empty(0, dtype=np.int64)
    if ("zero-ids" in arrays) != ("zero-counts" in arrays):
        raise ReplyError("'zero-ids' and 'zero-counts' must come together")
    if "zero-ids" in arrays:
        zero_ids = _ids(arrays, "zero-ids", schema.num_items)
        zero_counts = _counts(arrays, "zero-counts", len(zero_ids), int(num_users))
        _disjoint(item_ids, zero_ids)
    if order.item_ids is not None:
        uploaded = np.concatenate([item_ids, zero_ids])
        unsent = uploaded[~np.isin(uploaded, order.item_ids)]
        if len(unsent):
            raise ReplyError(
                f"the reply holds {len(unsent)} rows the server did not send this node this "
                f"round: {_show(unsent)}"
            )
    dense = {}
    for name, shape in schema.dense_shapes.items():
        dense[name] = _floats(arrays, DENSE_PREFIX + name, shape)
    _request(arrays, metrics, schema.num_items)
    shrink = _number(metrics, "row-shrink-sum") if "row-shrink-sum" in metrics else 0.0
    if shrink > num_users:
        raise ReplyError(f"row-shrink-sum={shrink:g} exceeds num-users={num_users:g}")
    return RowUpload(
        item_ids=item_ids,
        row_sums=row_sums,
        row_counts=row_counts,
        num_users=int(num_users),
        dense_sums=dense,
        zero_ids=zero_ids,
        zero_counts=zero_counts,
        row_shrink=shrink,
    )


def check_eval_reply(
    arrays: Mapping[str, np.ndarray],
    metrics: Mapping[str, Any],
    schema: ReplySchema,
    metric_names: Sequence[str],
    node_users: int | np.ndarray,
    per_user: Mapping[str, np.ndarray] | None = None,
) -> None:
    """Raise :class:`ReplyError` unless the evaluate reply of a node holding
    ``node_users`` users (their number, or their global ids) is valid: metric sums finite,
    in [0, num-users] (every metric of a user lies in [0, 1]).

    ``per_user`` (the reply's ``per-user`` record; None: not checked): ``user-ids``, int64,
    num-users distinct ids among the node's users (when ``node_users`` gives them);
    ``user-metrics``, float [num-users, metrics] in ``metric_names`` order, finite, in [0, 1],
    whose column sums are the metric sums."""
    _keys(arrays, EVAL_KEYS | {REQUEST_KEY}, set(), "evaluate")
    node_ids = None if np.ndim(node_users) == 0 else np.asarray(node_users, dtype=np.int64)
    count = int(node_users) if node_ids is None else len(node_ids)
    num_users = _number(metrics, "num-users", integral=True)
    if num_users > count:
        raise ReplyError(f"num-users={num_users:g} but the node holds {count} users")
    for name in metric_names:
        value = _number(metrics, name)
        if value > num_users * (1 + 1e-9) + 1e-9:
            raise ReplyError(
                f"metric '{name}'={value:g} exceeds num-users={num_users:g} (a sum of "
                "per-user values in [0, 1])"
            )
    if ("erank-personal-sum" in metrics) != ("erank-personal-users" in metrics):
        raise ReplyError("'erank-personal-sum' and 'erank-personal-users' must come together")
    if "erank-personal-users" in metrics:
        _number(metrics, "erank-personal-sum")
        if _number(metrics, "erank-personal-users", integral=True) > num_users:
            raise ReplyError("erank-personal-users exceeds num-users")
    for name in ("fit-loss", "val-loss"):  # eval-loss: sums of per-user BCEs
        if name in metrics:
            _number(metrics, name)
    if "target-exposed" in metrics and _number(metrics, "target-exposed") > num_users:
        raise ReplyError(
            "target-exposed (users with a target item in their top 10) exceeds num-users"
        )
    _request(arrays, metrics, schema.num_items)
    if per_user is not None:
        _per_user(per_user, metrics, metric_names, int(num_users), node_ids)


def _per_user(
    per_user: Mapping[str, np.ndarray],
    metrics: Mapping[str, Any],
    metric_names: Sequence[str],
    num_users: int,
    node_ids: np.ndarray | None,
) -> None:
    """The ``per-user`` record of an evaluate reply (see :func:`check_eval_reply`)."""
    _keys(per_user, PER_USER_KEYS, PER_USER_KEYS, "evaluate per-user")
    ids = _array(per_user, "user-ids", (ID_DTYPE,), 1)
    if len(ids) != num_users:
        raise ReplyError(f"'user-ids' holds {len(ids)} users, num-users={num_users}")
    unique, counts = np.unique(ids, return_counts=True)
    if len(unique) != len(ids):
        raise ReplyError(f"'user-ids' holds duplicated users: {_show(unique[counts > 1])}")
    if node_ids is not None:
        foreign = ids[~np.isin(ids, node_ids)]
        if len(foreign):
            raise ReplyError(f"'user-ids' holds users the node does not hold: {_show(foreign)}")
    values = _floats(per_user, "user-metrics", (num_users, len(metric_names)))
    outside = values[(values < 0) | (values > 1)]
    if len(outside):
        raise ReplyError(f"'user-metrics' holds values outside [0, 1]: {_show(outside)}")
    sums = values.sum(axis=0, dtype=np.float64)
    for j, name in enumerate(metric_names):
        if abs(sums[j] - float(metrics[name])) > 1e-9 * max(1.0, num_users):
            raise ReplyError(
                f"metric '{name}'={float(metrics[name])!r} is not the sum of its per-user "
                f"values ({sums[j]!r})"
            )


# ------------------------------------------------------------------ helpers
def _keys(
    arrays: Mapping[str, Any], allowed: AbstractSet[str], required: AbstractSet[str], kind: str
) -> None:
    missing = sorted(set(required) - set(arrays))
    if missing:
        raise ReplyError(f"missing arrays in {kind} replies: {', '.join(missing)}")
    extra = sorted(set(arrays) - set(allowed))
    if extra:
        raise ReplyError(
            f"arrays not allowed in {kind} replies of this method: {', '.join(extra)} "
            f"(allowed: {', '.join(sorted(allowed))})"
        )


def _number(metrics: Mapping[str, Any], name: str, integral: bool = False) -> float:
    """A finite, non-negative metric (an integer if ``integral``)."""
    if name not in metrics:
        raise ReplyError(f"missing metric '{name}'")
    value = metrics[name]
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise ReplyError(f"metric '{name}' is {type(value).__name__}, expected a number")
    value = float(value)
    if not math.isfinite(value):
        raise NonFiniteReplyError(f"metric '{name}' is not finite ({value})")
    if value < 0:
        raise ReplyError(f"metric '{name}'={value:g} is negative")
    if integral and not value.is_integer():
        raise ReplyError(f"metric '{name}'={value:g} is not an integer")
    return value


def _array(arrays: Mapping[str, np.ndarray], key: str, dtypes: tuple, ndim: int) -> np.ndarray:
    if key not in arrays:
        raise ReplyError(f"missing array '{key}'")
    array = np.asarray(arrays[key])
    if array.dtype not in dtypes:
        expected = " or ".join(str(d) for d in dtypes)
        raise ReplyError(f"'{key}' has dtype {array.dtype}, expected {expected}")
    if array.ndim != ndim:
        raise ReplyError(f"'{key}' has {array.ndim} dimensions {array.shape}, expected {ndim}")
    return array


def _ids(arrays: Mapping[str, np.ndarray], key: str, num_items: int) -> np.ndarray:
    """Distinct int64 item ids in [0, num_items)."""
    ids = _array(arrays, key, (ID_DTYPE,), 1)
    outside = ids[(ids < 0) | (ids >= num_items)]
    if len(outside):
        raise ReplyError(f"'{key}' holds ids outside [0, {num_items}): {_show(outside)}")
    unique, counts = np.unique(ids, return_counts=True)
    if len(unique) != len(ids):
        raise ReplyError(f"'{key}' holds duplicated ids: {_show(unique[counts > 1])}")
    return ids


def _disjoint(item_ids: np.ndarray, zero_ids: np.ndarray) -> None:
    both = np.intersect1d(item_ids, zero_ids)
    if len(both):
        raise ReplyError(f"ids both in 'item-ids' and 'zero-ids': {_show(both)}")


def _counts(arrays: Mapping[str, np.ndarray], key: str, length: int, num_users: int) -> np.ndarray:
    """int64 counts, one per id, each in [1, num_users]."""
    counts = _array(arrays, key, (ID_DTYPE,), 1)
    if len(counts) != length:
        raise ReplyError(f"'{key}' has {len(counts)} entries for {length} ids")
    if len(counts) and counts.min() < 1:
        raise ReplyError(f"'{key}' holds counts below 1: {_show(counts[counts < 1])}")
    if len(counts) and counts.max() > num_users:
        raise ReplyError(
            f"'{key}' holds counts above num-users={num_users} (users trained on the node): "
            f"{_show(counts[counts > num_users])}"
        )
    return counts


def _floats(arrays: Mapping[str, np.ndarray], key: str, shape: tuple[int, ...]) -> np.ndarray:
    """A float32/float64 array of ``shape`` without NaN or inf."""
    array = _array(arrays, key, FLOAT_DTYPES, len(shape))
    if array.shape != tuple(shape):
        raise ReplyError(f"'{key}' has shape {array.shape}, expected {tuple(shape)}")
    bad = int(np.size(array) - np.isfinite(array).sum())
    if bad:
        raise NonFiniteReplyError(f"'{key}' holds {bad} NaN or inf values")
    return array


def _request(arrays: Mapping[str, np.ndarray], metrics: Mapping[str, Any], num_items: int) -> None:
    """``next-items`` (if any): distinct ids in range, with an integer ``next-round``."""
    if REQUEST_KEY in arrays:
        _ids(arrays, REQUEST_KEY, num_items)
        _number(metrics, "next-round", integral=True)


check_number, check_request = _number, _request  # for the other uploads' checks


def _show(values: np.ndarray) -> str:
    shown = ", ".join(str(v) for v in values[:SHOWN].tolist())
    return shown + (f" (and {len(values) - SHOWN} more)" if len(values) > SHOWN else "")
