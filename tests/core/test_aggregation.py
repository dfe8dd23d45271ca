"""Row-wise aggregation of sparse uploads, hand-computed."""

import numpy as np
import pytest

from fedrec_flwr.aggregation import RowUpload, aggregate_rows

TABLE = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]], dtype=np.float32)
# Node A: one user trained rows 0 and 1. Node B: two users, both trained row 1, one row 0...
A = RowUpload(np.array([0, 1]), np.array([[1.0, 0.0], [3.0, 1.0]]), np.array([1, 1]), 1)
B = RowUpload(np.array([1]), np.array([[4.0, 4.0]]), np.array([2]), 2)


def test_round_mean_divides_by_users_in_the_round():
    new = aggregate_rows(TABLE, [A, B], "round-mean")
    # row 0: change (1,0) from one user, / 3 users;
    # row 1: changes (2,0) + (4,4)-2*(1,1)=(2,2) -> (4,2)/3
    assert new[0] == pytest.approx([1 / 3, 0.0])
    assert new[1] == pytest.approx([1 + 4 / 3, 1 + 2 / 3])
    assert new[2].tolist() == [2.0, 2.0]  # untouched row unchanged
    assert TABLE[0].tolist() == [0.0, 0.0]  # input not modified


def test_toucher_mean_divides_by_users_that_trained_the_row():
    new = aggregate_rows(TABLE, [A, B], "toucher-mean")
    assert new[0] == pytest.approx([1.0, 0.0])
    assert new[1] == pytest.approx([1 + 4 / 3, 1 + 2 / 3])  # three users touched row 1


def test_order_of_uploads_does_not_matter():
    assert (
        aggregate_rows(TABLE, [A, B], "round-mean") == aggregate_rows(TABLE, [B, A], "round-mean")
    ).all()


def test_no_uploads_leaves_the_table():
    assert (aggregate_rows(TABLE, [], "round-mean") == TABLE).all()
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate_rows(TABLE, [A], "median")
