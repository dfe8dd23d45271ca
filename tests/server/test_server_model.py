"""The server's model without Flower: the update of hand-made uploads, and its state dict."""

from __future__ import annotations

import io

import numpy as np
import pytest

from fedrec_flwr.aggregation import RowUpload
from fedrec_flwr.config import RunConfig
from fedrec_flwr.methods import build_method
from fedrec_flwr.methods.capabilities import zero_threshold
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.privacy.ldp import LdpKeys
from fedrec_flwr.server.model import ServerModel, initial_item_table
from fedrec_flwr.server.optimizer import ServerOptimizer
from fedrec_flwr.stages import SecureSum


def ids(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def model(rule: str = "none", aggregation: str = "round-mean", **options) -> ServerModel:
    """4 items x 2 columns, all ones; a shared-dense ``w`` of zeros."""
    table = np.ones((4, 2), dtype=np.float32)
    dense = {"w": np.zeros(3, dtype=np.float32)}
    return ServerModel(table, dense, ServerOptimizer(rule, 0.1, 0.9), aggregation, **options)


def uploads() -> list[RowUpload]:
    """Node A: 2 users, both trained row 0 (sum 2 x [3, 3]), one trained row 1 ([5, 1]).
    Node B: 1 user, trained rows 0 ([0, 0]) and 2 (a zero row, sent as its id)."""
    a = RowUpload(
        item_ids=ids(0, 1),
        row_sums=np.array([[6.0, 6.0], [5.0, 1.0]], dtype=np.float32),
        row_counts=ids(2, 1),
        num_users=2,
        dense_sums={"w": np.array([2.0, 4.0, 6.0])},
    )
    b = RowUpload(
        item_ids=ids(0),
        row_sums=np.zeros((1, 2), dtype=np.float32),
        row_counts=ids(1),
        num_users=1,
        dense_sums={"w": np.array([1.0, 1.0, 1.0])},
        zero_ids=ids(2),
        zero_counts=ids(1),
    )
    return [a, b]


def test_round_mean_moves_each_touched_row_by_its_users_changes_over_the_round_users():
    server = model()
    start = server.table
    server.start_round()
    touched = server.apply(uploads())
    np.testing.assert_array_equal(touched, ids(0, 1, 2))
    # row 0: changes (2, 2) + (2, 2) + (-1, -1) over 3 users; row 1: (4, 0) / 3; row 2: -1 / 3
    expected = np.array(
        [[1 + 3 / 3, 1 + 3 / 3], [1 + 4 / 3, 1.0], [1 - 1 / 3, 1 - 1 / 3], [1.0, 1.0]]
    ).astype(np.float32)
    np.testing.assert_array_equal(server.table, expected)
    np.testing.assert_array_equal(server.dense["w"], np.array([1.0, 5 / 3, 7 / 3], np.float32))
    assert server.table is not start and np.all(start == 1.0)  # a new table, the old one kept
    assert server.round_start_table is start and server.evaluation_table() is server.table
    np.testing.assert_array_equal(server.touched_ever, [True, True, True, False])


def test_toucher_mean_divides_by_the_users_that_trained_the_row():
    server = model(aggregation="toucher-mean")
    server.apply(uploads())
    # row 0: (2, 2) + (2, 2) + (-1, -1) over its 3 users; rows 1 and 2: their one user's change
    np.testing.assert_array_equal(server.table[:3], [[2.0, 2.0], [5.0, 1.0], [0.0, 0.0]])


def test_rows_at_or_below_the_zero_threshold_become_zeros():
    server = model(aggregation="toucher-mean", zero_threshold=1.0)
    server.apply(uploads())
    # row 2 reached zero, row 3 was never touched but sits at the threshold: both are zeros
    np.testing.assert_array_equal(server.table[2:], np.zeros((2, 2)))
    assert server.density() == 0.5


def test_the_denoising_hook_gets_the_change_before_the_optimiser():
    seen = []

    def halve(touched, change, given):
        seen.append((touched.copy(), change.copy(), given))
        return change / 2

    server = model(denoise=halve)
    batch = uploads()
    server.apply(batch)
    (touched, change, given) = seen[0]
    np.testing.assert_array_equal(touched, ids(0, 1, 2))
    np.testing.assert_allclose(change[0], [1.0, 1.0])
    assert len(given) == 2 and all(g is b for g, b in zip(given, batch, strict=True))
    np.testing.assert_array_equal(server.table[0], np.float32([1.5, 1.5]))
    np.testing.assert_array_equal(server.dense["w"], np.float32([1.0, 5 / 3, 7 / 3]))  # not rows


def test_evaluation_reads_the_round_start_table_when_asked():
    server = model(evaluate_round_start=True)
    start = server.table
    server.start_round()
    server.apply(uploads())
    assert server.evaluation_table() is start


def test_a_round_without_uploads_is_refused():
    with pytest.raises(ValueError, match="no uploads to apply"):
        model().apply([])


def test_an_upload_not_decoded_into_rows_is_refused():
    """A secure sum reaches the update only through its stage's decoding."""
    encoded = SecureSum(1, np.zeros(10, dtype=np.uint64), 1, 1)
    with pytest.raises(TypeError, match="SecureSum where RowUpload"):
        model().apply([encoded])
    with pytest.raises(TypeError, match="decode"):
        model().refusals([*uploads(), encoded])


def test_adam_state_round_trips_through_the_state_dict():
    """A model restored from a saved state dict continues bit for bit as the original."""
    first = model("adam")
    for _ in range(2):
        first.apply(uploads())
    buffer = io.BytesIO()
    np.savez(buffer, **first.state_dict())  # as a checkpoint stores it
    buffer.seek(0)
    with np.load(buffer) as data:
        saved = {name: data[name] for name in data.files}
    assert {"item-table", "touched-ever", "dense/w", "optim/rows/m", "optim/w/t"} <= set(saved)

    second = model("adam")
    second.load_state_dict({**saved, "best-val": None})  # other parts' keys are ignored
    assert second.round_start_table is second.table
    for server in (first, second):
        server.apply(uploads()[:1])
    assert first.table.tobytes() == second.table.tobytes()
    assert first.dense["w"].tobytes() == second.dense["w"].tobytes()
    np.testing.assert_array_equal(first.touched_ever, second.touched_ever)
    saved["touched-ever"][:] = False  # the loaded model holds copies
    assert second.touched_ever.any()


def test_a_state_dict_of_another_shape_or_method_is_refused():
    state = model().state_dict()
    with pytest.raises(ValueError, match="lacks dense/w"):
        model().load_state_dict({k: v for k, v in state.items() if k != "dense/w"})
    wide = {**state, "item-table": np.zeros((4, 3), dtype=np.float32)}
    with pytest.raises(ValueError, match=r"item-table is \(4, 3\), this run's \(4, 2\)"):
        model().load_state_dict(wide)


def test_initial_arrays_are_checked():
    server = model()
    with pytest.raises(ValueError, match="item-table has shape"):
        server.load_initial(np.zeros((5, 2)), server.dense)
    with pytest.raises(ValueError, match="expected \\['w'\\]"):
        server.load_initial(server.table, {})


@pytest.mark.parametrize(
    "keys",
    [{"method": "fedncf"}, {"method": "fedrap", "ldp-mechanism": "laplace", "ldp-denoise": True}],
)
def test_the_initial_model_of_a_run(keys):
    config = RunConfig.from_mapping({"server-optimizer": "adam", **keys})
    method = build_method(config, 30)
    server = ServerModel.initial(config, method, 30)
    np.testing.assert_array_equal(server.table, initial_item_table(config, 30, method.row_dim))
    assert set(server.dense) == set(layout(method).shared_dense)
    assert server.optimizer.rule == "adam"
    assert server.zero_threshold == zero_threshold(method)
    assert server.evaluate_round_start == (layout(method).eval_table == "round-start")
    assert ("ldp-denoise" in server.stages.names()) == config.group(LdpKeys).ldp_denoise
