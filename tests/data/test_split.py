"""Leave-one-out split with the tie rule of docs/protocols.md, on hand-made rows."""

import numpy as np

from fedrec_flwr.data.interactions import Interactions
from fedrec_flwr.data.split import leave_one_out


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


def test_distinct_train_keeps_one_row_per_pair_and_the_held_out_items():
    # user 0: item 5 three times (the newest is the test item), item 6 twice in train;
    # user 1: no repeat.
    data = rows(
        [0, 0, 0, 0, 1, 0, 0, 1, 1, 0],
        [6, 5, 7, 6, 1, 5, 8, 2, 3, 5],
        [1, 2, 3, 4, 1, 5, 6, 2, 3, 9],
    )
    every = leave_one_out(data, dedupe=False)
    distinct = leave_one_out(data, dedupe=False, distinct_train=True)
    raw = data.raw_item_ids
    assert raw[every.test_item].tolist() == raw[distinct.test_item].tolist() == [5, 3]
    assert raw[every.valid_item].tolist() == raw[distinct.valid_item].tolist() == [8, 2]
    assert (every.source_user == distinct.source_user).all()
    assert raw[every.train_items].tolist() == [6, 5, 7, 6, 5, 1]
    # the first row of each pair, in file order, the test item's older copies included
    assert raw[distinct.train_items].tolist() == [6, 5, 7, 1]
    assert distinct.train_indptr.tolist() == [0, 3, 4]
    # strict has no repeated pair left: distinct_train changes nothing
    strict = leave_one_out(data, dedupe=True)
    again = leave_one_out(data, dedupe=True, distinct_train=True)
    for name in ("train_indptr", "train_items", "valid_item", "test_item", "source_user"):
        assert (getattr(strict, name) == getattr(again, name)).all()


def test_users_with_fewer_than_three_rows_are_dropped():
    data = rows([0, 0, 1, 1, 1], [1, 2, 1, 2, 3], [1, 2, 1, 2, 3])
    split = leave_one_out(data, dedupe=False)
    assert split.num_users == 1
    assert split.source_user.tolist() == [1]
    # After dedupe a user can fall below three rows too.
    dup = rows([0, 0, 0], [1, 1, 2], [1, 2, 3])
    assert leave_one_out(dup, dedupe=True).num_users == 0


def test_lastfm_split_matches_pandas_rank_first_on_the_papers_file(real_data_dir):
    """Our split of the raw HetRec file equals the reference code's rule applied to the
    papers' ratings.dat (pandas rank(method='first', ascending=False) per user)."""
    import pandas as pd

    from fedrec_flwr.data.loaders import load_lastfm2k

    data = load_lastfm2k(real_data_dir / "lastfm-2k")
    split = leave_one_out(data, dedupe=False)
    assert (split.num_users, split.num_items, int(split.train_indptr[-1])) == (
        1600,
        12454,
        185650 - 2 * 1600,
    )
    papers = pd.read_csv(
        real_data_dir / "lastfm-2k" / "pfedrec_format" / "ratings.dat",
        names=["user", "item", "tag", "ts"],
    )
    papers["rank"] = papers.groupby("user")["ts"].rank(method="first", ascending=False)
    expected_test = papers[papers["rank"] == 1].set_index("user")["item"]
    expected_valid = papers[papers["rank"] == 2].set_index("user")["item"]
    raw_user = data.raw_user_ids[split.source_user]
    assert (data.raw_item_ids[split.test_item] == expected_test.loc[raw_user].to_numpy()).all()
    assert (data.raw_item_ids[split.valid_item] == expected_valid.loc[raw_user].to_numpy()).all()


def test_ml100k_split_sizes(real_data_dir):
    from fedrec_flwr.data.loaders import load_ml100k

    data = load_ml100k(real_data_dir / "ml-100k")
    paper = leave_one_out(data, dedupe=False)
    strict = leave_one_out(data, dedupe=True)
    for split in (paper, strict):  # ML-100K has no repeated (user, item) pair
        assert (split.num_users, split.num_items) == (943, 1682)
        assert int(split.train_indptr[-1]) == 100_000 - 2 * 943
    assert (paper.test_item == strict.test_item).all()


def test_a_users_file_is_split_before_the_run_and_needs_two_users(tmp_path, monkeypatch):
    import pytest

    from fedrec_flwr.data import user_dataset
    from fedrec_flwr.data.interactions import DataError
    from fedrec_flwr.data.prepared import check_prepared
    from fedrec_flwr.data.registry import DataKeys, SyntheticKeys
    from fedrec_flwr.data.settings import DataSettings
    from fedrec_flwr.data.user_keys import FileKeys

    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path / "cache"))
    one_user = "user_id,item_id,timestamp\n" + "".join(f"u1,{i},{i}\n" for i in range(4))
    (tmp_path / "one.csv").write_text(one_user + "u2,0,1\n")
    (tmp_path / "two.csv").write_text(one_user + "".join(f"u2,{i},{i}\n" for i in range(3)))

    def settings(name: str) -> DataSettings:  # the data settings of dataset = "file"
        return DataSettings(
            data=DataKeys(dataset=user_dataset.FILE_DATASET),
            protocol="strict",
            synthetic=SyntheticKeys(),
            file=FileKeys(data_file=str(tmp_path / name)),
        )

    with pytest.raises(DataError, match="a federation needs at least 2"):
        check_prepared(settings("one.csv"))
    card = check_prepared(settings("two.csv"))
    assert any(line.split()[:2] == ["users", "2"] for line in card)
