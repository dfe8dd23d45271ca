"""The reply validator (property-based): valid replies pass, each corruption is rejected with a
message that says what was wrong."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays as np_arrays

from fedrec_flwr.server.validation import (
    ReplyError,
    ReplySchema,
    TrainOrder,
    check_eval_reply,
    check_train_reply,
)

SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.filter_too_much]
)
DENSE_CHOICES = ({}, {"out": (3,)}, {"mlp": (2, 4), "out": (1,)})
EVAL_NAMES = ("val-hr@10", "val-ndcg@10", "test-hr@10", "test-ndcg@10")


@dataclass
class TrainCase:
    arrays: dict
    metrics: dict
    schema: ReplySchema
    order: TrainOrder

    def check(self):
        return check_train_reply(self.arrays, self.metrics, self.schema, self.order)


@dataclass
class EvalCase:
    arrays: dict
    metrics: dict
    schema: ReplySchema
    node_users: int

    def check(self):
        check_eval_reply(self.arrays, self.metrics, self.schema, EVAL_NAMES, self.node_users)


def _floats(draw, shape, dtype=np.float64):
    values = st.floats(-1e3, 1e3, allow_nan=False, width=32)
    return draw(np_arrays(dtype, shape, elements=values))


def _ids(values) -> np.ndarray:
    return np.array(sorted(values), dtype=np.int64)


@st.composite
def train_cases(draw) -> TrainCase:
    """A valid train reply and what the server sent: item id ``num_items - 1`` is never
    uploaded (some corruptions use it as a row the server did not send)."""
    num_items = draw(st.integers(3, 60))
    row_dim = draw(st.integers(1, 5))
    dense = draw(st.sampled_from(DENSE_CHOICES))
    schema = ReplySchema(num_items, row_dim, dense)
    users = _ids(draw(st.sets(st.integers(0, 999), min_size=1, max_size=8)))
    num_users = len(users)  # a node trains every user it is sent
    uploaded = draw(st.lists(st.integers(0, num_items - 2), min_size=1, unique=True))
    uploaded = draw(st.permutations(uploaded))
    split = draw(st.integers(1, len(uploaded)))  # item-ids: uploaded[:split]; zero: the rest
    if draw(st.booleans()):
        sent = None  # the full table
    else:
        extra = draw(st.sets(st.integers(0, num_items - 2)))
        sent = _ids(set(uploaded) | extra)
    item_ids = np.array(uploaded[:split], dtype=np.int64)
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    counts = st.integers(1, num_users)
    arrays = {
        "item-ids": item_ids,
        "row-sums": _floats(draw, (split, row_dim), dtype),
        "row-counts": draw(np_arrays(np.int64, split, elements=counts)),
    }
    zero = uploaded[split:]
    if zero or draw(st.booleans()):
        arrays["zero-ids"] = np.array(zero, dtype=np.int64)
        arrays["zero-counts"] = draw(np_arrays(np.int64, len(zero), elements=counts))
    for name, shape in dense.items():
        arrays[f"dense.{name}"] = _floats(draw, shape)
    metrics = {
        "num-users": num_users,
        "num-samples": draw(st.integers(0, 10_000)),
        "loss-sum": draw(st.floats(0, 1e6)),
    }
    if draw(st.booleans()):
        arrays["next-items"] = _ids(draw(st.sets(st.integers(0, num_items - 1))))
        metrics["next-round"] = draw(st.integers(0, 100))
    return TrainCase(arrays, metrics, schema, TrainOrder(users=users, item_ids=sent))


@given(case=train_cases())
@SETTINGS
def test_valid_train_replies_pass_and_give_their_upload(case):
    upload = case.check()
    assert upload.item_ids is case.arrays["item-ids"]
    assert upload.row_sums is case.arrays["row-sums"]
    assert upload.row_counts is case.arrays["row-counts"]
    assert upload.num_users == case.metrics["num-users"]
    assert set(upload.dense_sums) == set(case.schema.dense_shapes)
    if "zero-ids" in case.arrays:
        assert upload.zero_counts is case.arrays["zero-counts"]
    else:
        assert len(upload.zero_ids) == len(upload.zero_counts) == 0


# -------------------------------------------------------------- corruptions
# Each takes (case, data) and returns the message expected (a regex); it changes the case.


def _set(case, key, value):
    case.arrays[key] = value


def _first_dense(case):
    assume(case.schema.dense_shapes)
    return next(iter(case.schema.dense_shapes))


def _poison(case, data, key):
    array = case.arrays[key].copy()
    flat = array.reshape(-1)
    assume(len(flat))
    flat[data.draw(st.integers(0, len(flat) - 1))] = data.draw(
        st.sampled_from([np.nan, np.inf, -np.inf])
    )
    case.arrays[key] = array
    return f"'{re.escape(key)}' holds 1 NaN or inf values"


def missing_required(case, data):
    key = data.draw(st.sampled_from(["item-ids", "row-sums", "row-counts"]))
    del case.arrays[key]
    return f"missing arrays in train replies: {key}"


def handshake_key(case, data):
    case.arrays["users"] = np.arange(3, dtype=np.int64)
    return "arrays not allowed in train replies of this method: users"


def unknown_dense(case, data):
    case.arrays["dense.ghost"] = np.zeros(2)
    return r"not allowed in train replies of this method: dense\.ghost"


def missing_dense(case, data):
    case.schema = replace(case.schema, dense_shapes={**case.schema.dense_shapes, "new": (2,)})
    return r"missing array 'dense\.new'"


def dense_shape(case, data):
    name = _first_dense(case)
    shape = case.schema.dense_shapes[name]
    case.arrays[f"dense.{name}"] = np.zeros((shape[0] + 1, *shape[1:]))
    return rf"'dense\.{name}' has shape"


def dense_nan(case, data):
    return _poison(case, data, f"dense.{_first_dense(case)}")


def ids_dtype(case, data):
    dtype = data.draw(st.sampled_from([np.int32, np.float64, np.uint64]))
    key = data.draw(st.sampled_from(["item-ids", "row-counts"]))
    case.arrays[key] = case.arrays[key].astype(dtype)
    return f"'{key}' has dtype {np.dtype(dtype)}, expected int64"


def rows_dtype(case, data):
    dtype = data.draw(st.sampled_from([np.float16, np.int64, np.complex64]))
    case.arrays["row-sums"] = case.arrays["row-sums"].astype(dtype)
    return f"'row-sums' has dtype {np.dtype(dtype)}, expected float32 or float64"


def row_width(case, data):
    k, d = case.arrays["row-sums"].shape
    width = data.draw(st.integers(0, 8).filter(lambda w: w != d))
    case.arrays["row-sums"] = np.zeros((k, width), case.arrays["row-sums"].dtype)
    return re.escape(f"'row-sums' has shape ({k}, {width}), expected ({k}, {d})")


def rows_flat(case, data):
    case.arrays["row-sums"] = case.arrays["row-sums"].reshape(-1)
    return "'row-sums' has 1 dimensions"


def fewer_counts(case, data):
    k = len(case.arrays["item-ids"])
    case.arrays["row-counts"] = case.arrays["row-counts"][:-1]
    return f"'row-counts' has {k - 1} entries for {k} ids"


def more_rows(case, data):
    k, d = case.arrays["row-sums"].shape
    case.arrays["row-sums"] = np.zeros((k + 1, d), case.arrays["row-sums"].dtype)
    return re.escape(f"has shape ({k + 1}, {d}), expected ({k}, {d})")


def zero_counts_length(case, data):
    zero = case.arrays.get("zero-ids", np.empty(0, np.int64))
    case.arrays["zero-ids"] = zero
    case.arrays["zero-counts"] = np.ones(len(zero) + 1, dtype=np.int64)
    return f"'zero-counts' has {len(zero) + 1} entries for {len(zero)} ids"


def rows_nan(case, data):
    return _poison(case, data, "row-sums")


def id_out_of_range(case, data):
    n = case.schema.num_items
    bad = data.draw(st.sampled_from([-1, n, n + 7, -(2**40)]))
    key = data.draw(st.sampled_from(["item-ids", "zero-ids", "next-items"]))
    ids = case.arrays.get(key, np.empty(0, np.int64)).copy()
    assume(len(ids))
    ids[0] = bad
    case.arrays[key] = ids
    return re.escape(f"'{key}' holds ids outside [0, {n}): {bad}")


def duplicated_id(case, data):
    ids = case.arrays["item-ids"]
    dup = int(ids[data.draw(st.integers(0, len(ids) - 1))])
    case.arrays["item-ids"] = np.append(ids, dup)
    rows = case.arrays["row-sums"]
    case.arrays["row-sums"] = np.concatenate([rows, rows[:1]])
    case.arrays["row-counts"] = np.append(case.arrays["row-counts"], 1)
    return f"'item-ids' holds duplicated ids: {dup}"


def duplicated_across(case, data):
    dup = int(case.arrays["item-ids"][0])
    zero = case.arrays.get("zero-ids", np.empty(0, np.int64))
    case.arrays["zero-ids"] = np.append(zero, dup)
    case.arrays["zero-counts"] = np.append(case.arrays.get("zero-counts", zero), 1)
    return f"ids both in 'item-ids' and 'zero-ids': {dup}"


def half_zero(case, data):
    key = data.draw(st.sampled_from(["zero-ids", "zero-counts"]))
    case.arrays.pop("zero-ids", None)
    case.arrays.pop("zero-counts", None)
    case.arrays[key] = np.empty(0, np.int64)
    return "'zero-ids' and 'zero-counts' must come together"


def unsent_row(case, data):
    uploaded = np.concatenate([case.arrays["item-ids"], case.arrays.get("zero-ids", [])])
    case.order = TrainOrder(case.order.users, _ids(uploaded.astype(np.int64)))
    unsent = case.schema.num_items - 1  # never uploaded by train_cases
    key = data.draw(st.sampled_from(["item-ids", "zero-ids"]))
    ids = case.arrays.get(key, np.empty(0, np.int64)).copy()
    assume(len(ids))
    ids[-1] = unsent
    case.arrays[key] = ids
    return f"1 rows the server did not send this node this round: {unsent}"


def count_below_one(case, data):
    key = data.draw(st.sampled_from(["row-counts", "zero-counts"]))
    counts = case.arrays.get(key, np.empty(0, np.int64)).copy()
    assume(len(counts))
    counts[0] = data.draw(st.integers(-5, 0))
    case.arrays[key] = counts
    return f"'{key}' holds counts below 1: {counts[0]}"


def count_above_users(case, data):
    counts = case.arrays["row-counts"].copy()
    counts[-1] = case.metrics["num-users"] + data.draw(st.integers(1, 5))
    case.arrays["row-counts"] = counts
    return f"'row-counts' holds counts above num-users={case.metrics['num-users']}"


def other_user_count(case, data):
    shift = data.draw(st.sampled_from([-1, 1, 2, 3]))
    if len(case.order.users) + shift < 0:
        shift = 1
    case.metrics["num-users"] = len(case.order.users) + shift
    return (
        f"num-users={case.metrics['num-users']} but the server selected "
        f"{len(case.order.users)} users on this node"
    )


def negative_users(case, data):
    case.metrics["num-users"] = -data.draw(st.integers(1, 3))
    return f"metric 'num-users'={case.metrics['num-users']} is negative"


def fractional_users(case, data):
    case.metrics["num-users"] = 0.5
    return "metric 'num-users'=0.5 is not an integer"


def metric_not_finite(case, data):
    name = data.draw(st.sampled_from(["loss-sum", "num-samples", "num-users"]))
    case.metrics[name] = data.draw(st.sampled_from([float("nan"), float("inf"), -float("inf")]))
    return rf"metric '{name}' is not finite \((nan|inf|-inf)\)"


def metric_missing(case, data):
    name = data.draw(st.sampled_from(["loss-sum", "num-samples", "num-users"]))
    del case.metrics[name]
    return f"missing metric '{name}'"


def metric_not_a_number(case, data):
    case.metrics["loss-sum"] = [1.0, 2.0]
    return "metric 'loss-sum' is list, expected a number"


def request_without_round(case, data):
    case.arrays["next-items"] = np.arange(2, dtype=np.int64)
    case.metrics.pop("next-round", None)
    return "missing metric 'next-round'"


TRAIN_CORRUPTIONS = [
    missing_required,
    handshake_key,
    unknown_dense,
    missing_dense,
    dense_shape,
    dense_nan,
    ids_dtype,
    rows_dtype,
    row_width,
    rows_flat,
    fewer_counts,
    more_rows,
    zero_counts_length,
    rows_nan,
    id_out_of_range,
    duplicated_id,
    duplicated_across,
    half_zero,
    unsent_row,
    count_below_one,
    count_above_users,
    other_user_count,
    negative_users,
    fractional_users,
    metric_not_finite,
    metric_missing,
    metric_not_a_number,
    request_without_round,
]


@pytest.mark.parametrize("corrupt", TRAIN_CORRUPTIONS, ids=lambda f: f.__name__)
@given(case=train_cases(), data=st.data())
@SETTINGS
def test_each_train_corruption_is_rejected_with_its_message(corrupt, case, data):
    case = copy.deepcopy(case)
    expected = corrupt(case, data)
    with pytest.raises(ReplyError, match=expected):
        case.check()


def test_rows_of_the_full_table_may_be_any_in_range_id():
    schema = ReplySchema(5, 2, {})
    arrays = {
        "item-ids": np.array([4, 0], dtype=np.int64),
        "row-sums": np.zeros((2, 2)),
        "row-counts": np.ones(2, dtype=np.int64),
    }
    metrics = {"num-users": 1, "num-samples": 3, "loss-sum": 0.5}
    users = np.array([7])
    check_train_reply(arrays, metrics, schema, TrainOrder(users, None))
    with pytest.raises(ReplyError, match="did not send this node this round: 4"):
        check_train_reply(arrays, metrics, schema, TrainOrder(users, np.array([0, 1])))


# --------------------------------------------------------------- evaluate
@st.composite
def eval_cases(draw) -> EvalCase:
    node_users = draw(st.integers(1, 50))
    num_users = draw(st.integers(0, node_users))
    metrics = {"num-users": float(num_users)}
    for name in EVAL_NAMES:
        metrics[name] = draw(st.floats(0, num_users))
    if draw(st.booleans()):
        metrics["erank-personal-users"] = float(draw(st.integers(0, num_users)))
        metrics["erank-personal-sum"] = draw(st.floats(0, 1e4))
    arrays = {}
    if draw(st.booleans()):
        arrays["next-items"] = _ids(draw(st.sets(st.integers(0, 29))))
        metrics["next-round"] = draw(st.integers(0, 100))
    return EvalCase(arrays, metrics, ReplySchema(30, 4, {}), node_users)


@given(case=eval_cases())
@SETTINGS
def test_valid_eval_replies_pass(case):
    case.check()


def eval_not_finite(case, data):
    name = data.draw(st.sampled_from([*EVAL_NAMES, "erank-personal-sum"]))
    case.metrics["erank-personal-users"] = 0.0
    case.metrics[name] = data.draw(st.sampled_from([float("nan"), float("inf")]))
    return f"metric '{name}' is not finite"


def eval_negative(case, data):
    name = data.draw(st.sampled_from(EVAL_NAMES))
    case.metrics[name] = -data.draw(st.floats(1e-6, 10))
    return f"metric '{name}'=.* is negative"


def eval_above_users(case, data):
    name = data.draw(st.sampled_from(EVAL_NAMES))
    case.metrics[name] = case.metrics["num-users"] + 1
    return f"metric '{name}'=.* exceeds num-users"


def eval_too_many_users(case, data):
    case.metrics["num-users"] = float(case.node_users + data.draw(st.integers(1, 5)))
    return f"num-users=.* but the node holds {case.node_users} users"


def eval_missing_metric(case, data):
    name = data.draw(st.sampled_from(["num-users", *EVAL_NAMES]))
    del case.metrics[name]
    return f"missing metric '{name}'"


def eval_extra_array(case, data):
    case.arrays["row-sums"] = np.zeros((1, 4))
    return "arrays not allowed in evaluate replies of this method: row-sums"


def eval_erank_half(case, data):
    case.metrics.pop("erank-personal-users", None)
    case.metrics["erank-personal-sum"] = 1.0
    return "'erank-personal-sum' and 'erank-personal-users' must come together"


def eval_erank_users(case, data):
    case.metrics["erank-personal-users"] = case.metrics["num-users"] + 1
    case.metrics["erank-personal-sum"] = 1.0
    return "erank-personal-users exceeds num-users"


def eval_bad_request(case, data):
    case.arrays["next-items"] = np.array([3, 3], dtype=np.int64)
    case.metrics["next-round"] = 2
    return "'next-items' holds duplicated ids: 3"


EVAL_CORRUPTIONS = [
    eval_not_finite,
    eval_negative,
    eval_above_users,
    eval_too_many_users,
    eval_missing_metric,
    eval_extra_array,
    eval_erank_half,
    eval_erank_users,
    eval_bad_request,
]


@pytest.mark.parametrize("corrupt", EVAL_CORRUPTIONS, ids=lambda f: f.__name__)
@given(case=eval_cases(), data=st.data())
@SETTINGS
def test_each_eval_corruption_is_rejected_with_its_message(corrupt, case, data):
    case = copy.deepcopy(case)
    expected = corrupt(case, data)
    with pytest.raises(ReplyError, match=expected):
        case.check()
