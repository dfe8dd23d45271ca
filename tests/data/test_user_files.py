"""A user's own interaction file: formats, filters, ids, the card, and every bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedrec_flwr.data.card import card_lines, card_of
from fedrec_flwr.data.interactions import DataError, Interactions
from fedrec_flwr.data.loaders import (
    _LASTFM_DATES,
    _local_midnight_ms,
    _read_table,
    load_lastfm2k,
    load_ml100k,
)
from fedrec_flwr.data.prepared import PreparedData, leave_one_out
from fedrec_flwr.data.user_file import UserFile, read_columns
from fedrec_flwr.data.user_filters import load_user_file

ROWS = [  # user, item, timestamp, rating
    ("u1", "a", 5, 4.0),
    ("u1", "b", 6, 2.0),
    ("u1", "c", 7, 5.0),
    ("u2", "a", 1, 5.0),
    ("u2", "c", 3, 4.0),
    ("u2", "d", 2, 4.0),
    ("u3", "b", 9, 1.0),
]


def frame(rows=ROWS) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp", "rating"])


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def load(path: Path, **options) -> Interactions:
    return load_user_file(UserFile(path, **options))


def read(path: Path, **options) -> list[tuple]:
    """The (user, item, time) rows a file is read as, before any filter (one user is
    enough)."""
    columns = read_columns(UserFile(path, **options))
    rows = zip(
        columns.user.tolist(), columns.item.tolist(), columns.timestamp.tolist(), strict=True
    )
    return list(rows)


def rows_of(data: Interactions) -> list[tuple]:
    users = data.raw_user_ids[data.user].tolist()
    items = data.raw_item_ids[data.item].tolist()
    return list(zip(users, items, data.timestamp.tolist(), strict=True))


def assert_same_split(a: Interactions, b: Interactions) -> None:
    """Bit-identical leave-one-out arrays under both protocols."""
    for dedupe in (True, False):
        x, y = leave_one_out(a, dedupe), leave_one_out(b, dedupe)
        assert (x.num_users, x.num_items) == (y.num_users, y.num_items)
        for name in PreparedData.ARRAYS:
            expected, got = getattr(x, name), getattr(y, name)
            assert expected.dtype == got.dtype and np.array_equal(expected, got), name


# --- formats ------------------------------------------------------------------------------


def test_csv_tsv_inter_and_parquet_give_the_same_rows(tmp_path: Path) -> None:
    df = frame()
    df.to_csv(tmp_path / "x.csv", index=False)
    df.to_csv(tmp_path / "x.tsv", index=False, sep="\t")
    inter = "user_id:token\titem_id:token\ttimestamp:float\trating:float\n"
    inter += "".join(f"{u}\t{i}\t{t}\t{r}\n" for u, i, t, r in ROWS)
    write(tmp_path, "x.inter", inter)
    expected = rows_of(load(tmp_path / "x.csv"))
    assert expected[0] == ("u1", "a", 5)
    for name in ("x.tsv", "x.inter"):
        assert rows_of(load(tmp_path / name)) == expected
    pytest.importorskip("pyarrow")
    df.to_parquet(tmp_path / "x.parquet")
    assert rows_of(load(tmp_path / "x.parquet")) == expected


def test_any_suffix_reads_as_delimited_text(tmp_path: Path) -> None:
    text = "user_id\titem_id\ttimestamp\n1\t2\t3\n2\t2\t4\n"
    for name in ("ratings.txt", "ratings.dat", "ratings", "ratings.tsv", "ratings.csv"):
        assert rows_of(load(write(tmp_path, name, text))) == [(1, 2, 3), (2, 2, 4)]
    assert rows_of(load(write(tmp_path, "x.txt", text), format="tsv")) == [(1, 2, 3), (2, 2, 4)]


def test_column_mapping_and_quoted_fields(tmp_path: Path) -> None:
    text = 'who,what,"when, unix"\n"Smith, J",x,3\n"Lee, K",y,1\n'
    data = load(write(tmp_path, "x.csv", text), user_column="who", item_column="what",
                timestamp_column="when, unix")  # fmt: skip
    assert rows_of(data) == [("Smith, J", "x", 3), ("Lee, K", "y", 1)]


# --- any delimited file: separator, header and columns sniffed --------------------------------

SHAPES = {  # name: (file text, the rows it holds as (user, item, time))
    "whitespace, no header, no times": (
        "196  242 3\n186 302\t3\n\n196 377 1\n",
        [(196, 242, 0), (186, 302, 1), (196, 377, 2)],
    ),
    "tabs, no header, times in column 4": (
        "196\t242\t3\t881250949\n186\t302\t3\t891717742\n",
        [(196, 242, 0), (186, 302, 1)],  # no header: the time column is not guessed
    ),
    "semicolons, header, decimal commas, times": (
        "userId;movieId;rating;timestamp\n1;31;2,5;1260759144\n1;10;4,0;1260759100\n",
        [(1, 31, 1260759144), (1, 10, 1260759100)],
    ),
    "semicolons, header, no times": (
        "user;item;rating\nu1;a;5\nu1;b;4\n",
        [("u1", "a", 0), ("u1", "b", 1)],
    ),
    "tabs, header, times": (
        "user_id\titem_id\ttimestamp\nu1\ta\t9\nu2\tb\t8\n",
        [("u1", "a", 9), ("u2", "b", 8)],
    ),
    "whitespace, header, aligned": (
        "  user   item  rating\n  u1     a     5\n  u10    b     4\n",
        [("u1", "a", 0), ("u10", "b", 1)],
    ),
    "commas, no header": ("1,5\n2,6\n1,6\n", [(1, 5, 0), (2, 6, 1), (1, 6, 2)]),
    "pipes, header": ("User ID|Item ID\n7|8\n", [(7, 8, 0)]),
    "double colons, no header (MovieLens .dat)": (
        "1::1193::5::978300760\n1::661::3::978302109\n",
        [(1, 1193, 0), (1, 661, 1)],
    ),
    "commas, text header of unusual names": (
        "visitor,article\nalice,x\nbob,x\nalice,y\n",
        [("alice", "x", 0), ("bob", "x", 1), ("alice", "y", 2)],
    ),
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_a_delimited_file_of_any_shape_reads_with_no_key(tmp_path: Path, shape: str) -> None:
    text, rows = SHAPES[shape]
    for suffix in (".txt", ".dat", ".csv"):
        assert read(write(tmp_path, f"ratings{suffix}", text)) == rows, suffix


def test_the_card_says_how_the_file_was_read(tmp_path: Path) -> None:
    text = "userId;movieId;rating\n" + "".join(f"u{u};i{i};4\n" for u in range(3) for i in range(4))
    data = load(write(tmp_path, "x.csv", text))
    card = "\n".join(card_lines(card_of(data, leave_one_out(data, dedupe=True), "strict")))
    assert "read semicolon-separated (sniffed), header line 1 (sniffed)" in card
    assert "columns: user column 'userId', item column 'movieId'; time: the line order" in card
    text = "".join(f"{u} {i} 5 99\n" for u in range(3) for i in range(4))
    headless = load(write(tmp_path, "y.txt", text))
    card = "\n".join(card_lines(card_of(headless, leave_one_out(headless, True), "strict")))
    assert "whitespace-separated (sniffed), no header line: columns by position" in card
    assert "columns: user column 1, item column 2; time: the line order" in card


def test_separator_header_and_positions_override_the_sniffing(tmp_path: Path) -> None:
    path = write(tmp_path, "x.txt", "196\t242\t3\t881250949\n186\t302\t3\t891717742\n")
    assert read(path, timestamp_column="4") == [(196, 242, 881250949), (186, 302, 891717742)]
    assert read(path, user_column="2", item_column="1") == [(242, 196, 0), (302, 186, 1)]
    words = write(tmp_path, "w.txt", "alice x\nbob y\n")  # no name, no repeat: no header
    assert read(words) == [("alice", "x", 0), ("bob", "y", 1)]
    assert read(words, header="true") == [("bob", "y", 0)]
    sniffed = write(tmp_path, "s.txt", "u1;a,b\nu2;c,d\n")  # 2 fields either way: comma
    assert read(sniffed)[0] == ("u1;a", "b", 0)
    assert read(sniffed, separator="semicolon")[0] == ("u1", "a,b", 0)
    assert read(sniffed, separator=";")[0] == ("u1", "a,b", 0)
    with pytest.raises(ValueError, match="separator='abc' is no separator"):
        UserFile(sniffed, separator="abc")
    spaced = write(tmp_path, "sp.txt", "1 2 5\n2 3 4\n")
    with pytest.raises(DataError, match=r"line 1 is one field when split by comma \(set; sniff"):
        read(spaced, separator="comma")


@pytest.mark.parametrize("missing", ["nan", "NaN", "null", "NULL", "None", "NA", "", "\\N"])
def test_a_missing_id_is_refused_with_its_line(tmp_path: Path, missing: str) -> None:
    text = f"user_id,item_id\n1,2\n1,3\n2,{missing}\n"
    with pytest.raises(DataError) as error:
        load(write(tmp_path, "x.csv", text))
    assert f"line 4: item_id {missing!r} " in str(error.value)
    assert "Give every row an item id" in str(error.value)


# --- ids ----------------------------------------------------------------------------------


def test_ids_are_numbered_in_sorted_order_whatever_the_row_order(tmp_path: Path) -> None:
    rows = [(10, 7, 1), (2, 7, 2), (10, 3, 3), (2, 30, 4), (1, 3, 5)]
    numbered = []
    for order in ([0, 1, 2, 3, 4], [4, 2, 0, 3, 1]):
        df = pd.DataFrame([rows[k] for k in order], columns=["user_id", "item_id", "timestamp"])
        df.to_csv(tmp_path / "x.csv", index=False)
        data = load(tmp_path / "x.csv")
        assert data.raw_user_ids.tolist() == [1, 2, 10]  # numerically, not as text
        assert data.raw_item_ids.tolist() == [3, 7, 30]
        numbered.append(sorted(zip(data.user.tolist(), data.item.tolist(), strict=True)))
    assert numbered[0] == numbered[1]


def test_text_ids_are_numbered_in_text_order(tmp_path: Path) -> None:
    path = write(tmp_path, "x.csv", "user_id,item_id,timestamp\n10,b,1\n9,a,2\nx,a,3\n")
    data = load(path)
    assert data.raw_user_ids.tolist() == ["10", "9", "x"]  # one id is text: all are
    assert load(path, id_type="string").raw_user_ids.tolist() == ["10", "9", "x"]
    leading_zero = write(tmp_path, "z.csv", "user_id,item_id,timestamp\n1,007,1\n2,7,2\n")
    assert load(leading_zero).num_items == 2  # '007' and '7' stay distinct under 'auto'
    assert load(leading_zero, id_type="integer").num_items == 1


# --- timestamps ---------------------------------------------------------------------------


def test_timestamps_keep_their_order_in_every_form(tmp_path: Path) -> None:
    header = "user_id,item_id,timestamp\n"
    floats = write(tmp_path, "f.csv", header + "1,1,2.5\n1,2,0.25\n2,3,2.5\n")
    assert load(floats).timestamp.tolist() == [1, 0, 1]  # ranked, ties kept
    whole = write(tmp_path, "w.csv", header + "1,1,881250949.0\n2,2,3\n")
    assert load(whole).timestamp.tolist() == [881250949, 3]
    dates = header + "1,1,2020-01-02\n2,2,2020-01-01T23:00:00Z\n"
    stamps = load(write(tmp_path, "d.csv", dates)).timestamp
    assert stamps[0] > stamps[1]
    none = write(tmp_path, "n.csv", "user_id,item_id\n1,1\n1,2\n2,1\n")
    assert load(none, timestamp_column="").timestamp.tolist() == [0, 1, 2]  # the line order


# --- filters ------------------------------------------------------------------------------


def test_rating_threshold_keeps_rows_rated_at_or_above_it(tmp_path: Path) -> None:
    frame().to_csv(tmp_path / "x.csv", index=False)
    data = load(tmp_path / "x.csv", rating_column="rating", rating_threshold=4.0)
    assert sorted(rows_of(data)) == sorted((u, i, t) for u, i, t, r in ROWS if r >= 4.0)
    (step,) = data.notes["filters"]
    assert step == {"name": "rating >= 4", "rows": 2, "users": 1, "items": 1}


def test_keep_newest_keeps_each_pairs_newest_row_and_the_earlier_line_on_ties(
    tmp_path: Path,
) -> None:
    text = "user_id,item_id,timestamp,tag\n1,5,3,a\n1,5,9,b\n1,6,4,c\n1,6,4,d\n2,5,1,e\n"
    path = write(tmp_path, "x.csv", text)
    assert len(load(path)) == 5
    data = load(path, repeated_pairs="keep-newest")
    assert rows_of(data) == [(1, 5, 9), (1, 6, 4), (2, 5, 1)]
    assert data.notes["filters"][0]["rows"] == 2


def test_min_user_interactions_is_one_pass_and_k_core_repeats(tmp_path: Path) -> None:
    # u3 has 1 row; once it is gone, item z has 1 row left (u2's), which a 2-core drops too.
    rows = [("u1", i, k) for k, i in enumerate("abc")]
    rows += [("u2", "a", 5), ("u2", "b", 6), ("u2", "z", 7), ("u3", "z", 8)]
    rows += [("u4", i, 10 + k) for k, i in enumerate("abc")]
    pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"]).to_csv(
        tmp_path / "x.csv", index=False
    )
    once = load(tmp_path / "x.csv", min_user_interactions=2)
    assert once.raw_user_ids.tolist() == ["u1", "u2", "u4"]
    assert once.raw_item_ids.tolist() == ["a", "b", "c", "z"]
    assert once.notes["filters"] == [
        {"name": "min-user-interactions 2", "rows": 1, "users": 1, "items": 0}
    ]
    core = load(tmp_path / "x.csv", k_core=2)
    assert core.raw_user_ids.tolist() == ["u1", "u2", "u4"]
    assert core.raw_item_ids.tolist() == ["a", "b", "c"]
    assert core.notes["filters"] == [{"name": "2-core", "rows": 2, "users": 1, "items": 1}]


# --- the card -----------------------------------------------------------------------------


def test_the_card_counts_the_split_and_what_each_filter_removed(tmp_path: Path) -> None:
    rows = [(u, i, 10 * u + i) for u in range(1, 5) for i in range(u + 2)]  # 3..6 rows each
    rows += [(9, 1, 1), (9, 2, 2)]  # too few rows for a split
    rows += [(8, 1, 1)]  # removed by min-user-interactions
    df = pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"])
    df.to_csv(tmp_path / "x.csv", index=False)
    data = load(tmp_path / "x.csv", min_user_interactions=2)
    card = card_of(data, leave_one_out(data, dedupe=True), "strict")
    assert (card["users"], card["items"], card["interactions"]) == (4, 6, 18)
    assert card["density"] == pytest.approx(18 / 24)
    assert (card["per-user-median"], card["per-user-p90"]) == (4.5, 5.7)
    assert [(s["name"], s["users"], s["rows"]) for s in card["removed"]] == [
        ("min-user-interactions 2", 1, 1),
        ("leave-one-out split (users with < 3 rows)", 1, 2),
    ]
    text = "\n".join(card_lines(card))
    assert "users 4  items 6  interactions 18  density 75.000%" in text
    assert "median 4.5, p90 5.7" in text and data.notes["sha256"][:16] in text


# --- bad input: one message naming the file, the line and the fix -------------------------


def test_a_missing_column_names_the_header_and_the_key_to_set(tmp_path: Path) -> None:
    path = write(tmp_path, "x.csv", "user,item_id,timestamp\n1,2,3\n")
    with pytest.raises(DataError) as error:
        load(path, user_column="user_id")
    message = str(error.value)
    assert f"{path}: line 1 (the header) has no column 'user_id'" in message
    assert "e.g. user-column=user" in message


def test_the_suggestion_is_the_closest_name_and_never_another_roles_column(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, "x.csv", "user,item,time_s\nu1,a,1\n")
    with pytest.raises(DataError) as error:
        load(path, timestamp_column="ts")
    message = str(error.value)
    assert "e.g. timestamp-column=time_s, or timestamp-column=''" in message
    with pytest.raises(DataError) as error:  # nothing like it: no column is claimed to fit
        load(path, timestamp_column="when")
    assert "timestamp-column=user" not in str(error.value)
    assert "timestamp-column='' to let the line order stand in" in str(error.value)
    with pytest.raises(DataError) as error:  # the user's column is taken: never suggested
        load(write(tmp_path, "y.csv", "user,time_s\nu1,1\n"), item_column="item_id")
    assert "item-column=user" not in str(error.value)
    assert "e.g. item-column=time_s if that column holds them" in str(error.value)
    headless = write(tmp_path, "z.txt", "1 2 3\n1 3 4\n2 2 5\n")
    with pytest.raises(DataError, match=r"no header line .* columns are 1 to 3: set item-column"):
        load(headless, item_column="article")


def test_non_integer_ids_where_integers_are_required_name_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "x.csv", "user_id,item_id,timestamp\n1,2,3\n\n2,2,4\nu3,2,5\n")
    with pytest.raises(DataError) as error:
        load(path, id_type="integer")
    assert f"{path}: line 5: user_id 'u3' is not an integer id" in str(error.value)
    assert "id-type='string'" in str(error.value)


def test_a_file_empty_after_filtering_names_the_filters_to_lower(tmp_path: Path) -> None:
    frame().to_csv(tmp_path / "x.csv", index=False)
    with pytest.raises(DataError) as error:
        load(tmp_path / "x.csv", k_core=3)
    message = str(error.value)
    assert f"{tmp_path / 'x.csv'}: no row is left after filtering" in message
    assert "3-core removed 7 rows (3 users)" in message and "Lower k-core" in message
    header_only = write(tmp_path, "h.csv", "user_id,item_id,timestamp\n")
    with pytest.raises(DataError, match="has a header but no data rows"):
        load(header_only)


def test_a_single_user_is_refused(tmp_path: Path) -> None:
    text = "user_id,item_id,timestamp,stars\nu1,a,1,5\nu1,b,2,4\nu2,a,3,1\n"
    with pytest.raises(DataError) as error:
        load(write(tmp_path, "x.csv", text), rating_column="stars", rating_threshold=3.0)
    message = str(error.value)
    assert "one user is left after filtering (user 'u1'" in message
    assert "a federation needs at least 2 users" in message and "rating-threshold" in message


def test_a_duplicated_header_is_refused(tmp_path: Path) -> None:
    twice = write(tmp_path, "x.csv", "user_id,item_id,user_id\n1,2,3\n")
    with pytest.raises(DataError, match=r"line 1 \(the header\) names column 'user_id' twice"):
        load(twice, timestamp_column="")
    joined = "user_id,item_id,timestamp\n1,2,3\n2,2,3\nuser_id,item_id,timestamp\n3,3,3\n"
    with pytest.raises(DataError, match=r"x.csv: line 4 repeats the header.*Delete"):
        load(write(tmp_path, "x.csv", joined))
    inter = "user_id:token\titem_id:token\n1\t2\nuser_id:token\titem_id:token\n"
    with pytest.raises(DataError, match=r"x.inter: line 3 repeats the header"):
        load(write(tmp_path, "x.inter", inter), timestamp_column="")


def test_an_encoding_error_names_the_line_and_how_to_convert(tmp_path: Path) -> None:
    path = write(tmp_path, "x.csv", b"user_id,item_id,timestamp\n1,2,3\n1,caf\xe9,4\n")
    with pytest.raises(DataError) as error:
        load(path)
    message = str(error.value)
    assert f"{path}: line 3, byte 6: b'\\xe9' is not UTF-8" in message
    assert "iconv -f latin1 -t utf-8" in message


def test_other_malformed_lines_name_their_line(tmp_path: Path) -> None:
    fields = write(tmp_path, "a.csv", "user_id,item_id,timestamp\n1,2,3\n1,2,3,4\n")
    with pytest.raises(DataError, match=r"line 3 has 4 field\(s\) \(comma-separated\)"):
        load(fields)
    stamp = write(tmp_path, "b.csv", "user_id,item_id,timestamp\n1,2,3\n1,2,soon\n")
    with pytest.raises(DataError, match=r"line 3: timestamp 'soon' is not a number or an ISO"):
        load(stamp)
    rating = write(tmp_path, "c.csv", "user_id,item_id,timestamp,r\n1,2,3,x\n")
    with pytest.raises(DataError, match=r"line 2: r 'x' is not a number"):
        load(rating, rating_column="r")
    empty = write(tmp_path, "d.csv", "user_id,item_id,timestamp\n1,,3\n")
    with pytest.raises(DataError, match=r"line 2: item_id '' is empty"):
        load(empty)
    typed = write(tmp_path, "e.inter", "user_id\titem_id:token\n1\t2\n")
    with pytest.raises(DataError, match=r"line 1: header field 'user_id' is not 'name:type'"):
        load(typed, timestamp_column="")
    with pytest.raises(DataError, match=r"no such file.*data-file"):
        load(tmp_path / "missing.csv")


# --- the named datasets written out and read back -----------------------------------------


def test_ml100k_as_csv_and_inter_splits_bit_identically(real_data_dir, tmp_path) -> None:
    named = load_ml100k(real_data_dir / "ml-100k")
    raw = pd.read_csv(real_data_dir / "ml-100k" / "u.data", sep="\t", header=None)
    raw.columns = ["user_id", "item_id", "rating", "timestamp"]
    raw.to_csv(tmp_path / "ml-100k.csv", index=False)
    with open(tmp_path / "ml-100k.inter", "w") as f:
        f.write("user_id:token\titem_id:token\trating:float\ttimestamp:float\n")
        raw.to_csv(f, sep="\t", index=False, header=False)
    for name in ("ml-100k.csv", "ml-100k.inter"):
        assert_same_split(named, load(tmp_path / name))


def test_lastfm2k_as_csv_and_inter_splits_bit_identically(real_data_dir, tmp_path) -> None:
    named = load_lastfm2k(real_data_dir / "lastfm-2k")
    path = real_data_dir / "lastfm-2k" / "user_taggedartists.dat"
    raw = _read_table(path, _LASTFM_DATES)  # every user: the file's min-user filter does it
    out = pd.DataFrame({"userID": raw["userID"], "artistID": raw["artistID"]})
    out["tagID"] = raw["tagID"]
    out["ms"] = _local_midnight_ms(raw, path)
    out.to_csv(tmp_path / "lastfm.csv", index=False)
    with open(tmp_path / "lastfm.inter", "w") as f:
        f.write("userID:token\tartistID:token\ttagID:token\tms:float\n")
        out.to_csv(f, sep="\t", index=False, header=False)
    mapping = {"user_column": "userID", "item_column": "artistID", "timestamp_column": "ms"}
    for name in ("lastfm.csv", "lastfm.inter"):
        data = load(tmp_path / name, min_user_interactions=5, **mapping)
        assert data.notes["filters"][0]["users"] == 292
        assert_same_split(named, data)
