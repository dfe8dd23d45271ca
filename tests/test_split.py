"""Leave-one-out split with the REFERENCE.md tie rule, on hand-made rows."""

import numpy as np

from fedrec_flwr.data.interactions import Interactions
from fedrec_flwr.data.prepared import leave_one_out


def rows(users, items, stamps):
    return Interactions.from_raw("toy", np.array(users), np.array(items), np.array(stamps))


def test_newest_is_test_second_newest_is_validation():
    data = rows([1, 1, 1, 1], [10, 11, 12, 13], [5, 9, 7, 1])
    split = leave_one_out(data, dedupe=False)
    assert split.test_item.tolist() == [1]  # item 11 (ts 9)
    assert split.valid_item.tolist() == [2]  # item 12 (ts 7)
    assert split.train_items.tolist() == [0, 3]  # file order


def test_ties_earlier_row_in_file_counts_as_newer():
    # Three rows share the newest timestamp: file order decides (first = test).
    data = rows([7, 7, 7, 7], [1, 2, 3, 4], [3, 5, 5, 5])
    split = leave_one_out(data, dedupe=False)
    assert split.test_item.tolist() == [1]  # item 2: first of the ts-5 rows
    assert split.valid_item.tolist() == [2]  # item 3
    assert split.train_items.tolist() == [0, 3]


def test_users_are_split_independently_and_grouped():
    data = rows([2, 1, 2, 1, 2, 1], [1, 1, 2, 2, 3, 3], [1, 1, 2, 2, 3, 3])
    split = leave_one_out(data, dedupe=False)
    assert split.num_users == 2
    assert split.train_indptr.tolist() == [0, 1, 2]
    assert split.test_item.tolist() == [2, 2]
    assert split.valid_item.tolist() == [1, 1]


def test_paper_keeps_repeats_strict_dedupes_keeping_the_newest_row():
    # item 5 repeated: rows at ts 1 and ts 9.
    data = rows([0, 0, 0, 0, 0], [5, 6, 7, 5, 8], [1, 2, 3, 9, 4])
    paper = leave_one_out(data, dedupe=False)
    assert paper.test_item.tolist() == [0]  # raw item 5 (ts 9)
    assert sorted(paper.train_items.tolist()) == [0, 1, 2]  # 5 (ts 1) is still a train row
    strict = leave_one_out(data, dedupe=True)
    assert strict.test_item.tolist() == [0]
    assert strict.valid_item.tolist() == [3]  # raw item 8 (ts 4)
    assert strict.train_items.tolist() == [1, 2]  # the older copy of item 5 is gone


def test_users_with_fewer_than_three_rows_are_dropped():
    data = rows([0, 0, 1, 1, 1], [1, 2, 1, 2, 3], [1, 2, 1, 2, 3])
    split = leave_one_out(data, dedupe=False)
    assert split.num_users == 1
    assert split.source_user.tolist() == [1]
    # After dedupe a user can fall below three rows too.
    dup = rows([0, 0, 0], [1, 1, 2], [1, 2, 3])
    assert leave_one_out(dup, dedupe=True).num_users == 0
