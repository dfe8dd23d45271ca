"""Read a user's own interaction file: delimited text, Parquet or RecBole's atomic ``.inter``.

:class:`UserFile` says where the file is and which columns hold what; :func:`read_columns`
returns the mapped columns, parsed and checked, in file order. A text file's separator and
header are sniffed unless set (:mod:`fedrec_flwr.data.user_layout`); it is read by pandas
from the path, so that a large file is held once, as columns. Every problem raises one
:class:`~fedrec_flwr.data.interactions.DataError` naming the file, the line (``row`` in a
Parquet file) and the fix. The filters and the id numbering live in
:mod:`fedrec_flwr.data.user_filters`; ``docs/own-data.md`` describes both for users.
"""

from __future__ import annotations

import csv
import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from fedrec_flwr.data.interactions import DataError
from fedrec_flwr.data.user_keys import (
    AUTO,
    WHITESPACE,
    DataFormat,
    Header,
    IdType,
    RepeatedPairs,
    check_separator,
)
from fedrec_flwr.data.user_layout import NAMES, Layout, mapped_columns, sniff
from fedrec_flwr.data.user_values import Failure, ids, ratings, timestamps

FORMATS = tuple(member.value for member in DataFormat)
ID_TYPES = tuple(member.value for member in IdType)
REPEATED_PAIRS = tuple(member.value for member in RepeatedPairs)
HEADERS = tuple(member.value for member in Header)
SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".inter": "inter"}
SEPARATORS = {"csv": ",", "tsv": "\t", "inter": "\t"}
INTER_TYPES = ("token", "token_seq", "float", "float_seq")  # RecBole's atomic field types


@dataclass(frozen=True)
class UserFile:
    """A user's interaction file and how to read it (each field is a run-config key).

    A column is named, or given by its position (``1``, ``2``, ...); ``auto`` finds it by its
    usual names (:data:`~fedrec_flwr.data.user_layout.USUAL_NAMES`), else (user and item) by
    position. A column left empty ('') is absent: no timestamp column means the line order
    stands in for time (a later line is newer), as when ``auto`` finds none; no rating
    column means every row is a positive.
    """

    path: Path  # data-file
    format: str = "auto"  # data-format: Parquet or .inter by the suffix, else text
    separator: str = AUTO  # text: sniffed, or a name (comma, tab, ...) or the character(s)
    header: str = AUTO  # text: sniffed, or 'true' / 'false' (columns by position)
    user_column: str = AUTO
    item_column: str = AUTO
    timestamp_column: str = AUTO
    rating_column: str = ""
    rating_threshold: float = 0.0  # rows rated below it are dropped (with a rating column)
    id_type: str = "auto"  # 'integer': ids must be integers; 'string': any text
    repeated_pairs: str = "keep-all"  # or 'keep-newest': one row per (user, item)
    min_user_interactions: int = 0  # one pass: users with fewer rows are dropped
    k_core: int = 0  # repeatedly drop users and items with fewer rows, until none is left

    def __post_init__(self) -> None:
        if not isinstance(self.path, Path):
            raise TypeError(f"UserFile.path is a pathlib.Path, got {self.path!r}: Path(...) it")
        for key, value, choices in (
            ("data-format", self.format, FORMATS),
            ("header", self.header, HEADERS),
            ("id-type", self.id_type, ID_TYPES),
            ("repeated-pairs", self.repeated_pairs, REPEATED_PAIRS),
        ):
            if value not in choices:
                raise ValueError(f"{key}={value!r} is not one of {', '.join(choices)}")
        check_separator(self.separator)
        counts = (("min-user-interactions", self.min_user_interactions), ("k-core", self.k_core))
        for key, count in counts:
            if count < 0:
                raise ValueError(f"{key}={count} must be >= 0 (0 = no such filter)")
        for key, name in (("user-column", self.user_column), ("item-column", self.item_column)):
            if not name:
                raise ValueError(f"{key} is empty: name the file's column that holds the ids")

    @property
    def resolved_format(self) -> str:
        """The format read: ``format``, else Parquet or ``.inter`` by the suffix, else text."""
        if self.format != "auto":
            return self.format
        return SUFFIXES.get(self.path.suffix.lower(), "text")

    def columns(self) -> dict[str, str]:
        """Role -> column key (a name, a position, ``auto`` or '' for none)."""
        return {
            "user": self.user_column,
            "item": self.item_column,
            "timestamp": self.timestamp_column,
            "rating": self.rating_column,
        }


@dataclass(frozen=True)
class FileColumns:
    """The mapped columns of a file, parsed, in file order, and how the file was read."""

    user: np.ndarray  # int64 when the ids are integers, else str
    item: np.ndarray
    timestamp: np.ndarray  # int64; only its order matters (the line index if no column)
    rating: np.ndarray | None  # float64
    sha256: str  # of the file's bytes
    where: Callable[[int], str]  # 'line 7' (or 'row 7') of a 0-based data row
    layout: str = ""  # 'comma-separated (sniffed), header line 1 (sniffed)'; '' for Parquet
    mapped: dict[str, str] | None = None  # role -> the column read ('user_id', '1', ...)


def read_columns(spec: UserFile) -> FileColumns:
    """Read and check the columns that ``spec`` maps; raise DataError on bad input."""
    path = spec.path
    if not path.is_file():
        raise DataError(
            f"{path}: no such file. Set data-file to your interaction file (absolute, or "
            f"relative to the folder you run from)."
        )
    fmt = spec.resolved_format
    layout: Layout | None = None
    if fmt == "parquet":
        table, where = _read_parquet(path), _row_of
        names = [str(c) for c in table.columns]
    else:
        layout = _layout(spec, fmt)
        names = layout.names
        table = _read_text(path, layout)

        def where(row: int) -> str:
            return f"line {_line_of_row(path, layout, row)}"

    if layout is None or layout.header:
        _check_header(path, names, layout is None)
    found = mapped_columns(path, spec.columns(), names, None if layout is None else layout.header)
    columns = {role: table.iloc[:, index] for role, index in found.items()}
    if layout is not None and layout.header:
        _check_repeated_header(path, columns, names, found, fmt, where)
    if table.empty:
        raise DataError(f"{path}: the file has a header but no data rows. Add the rows.")
    fail = Failure(path, where)
    name = {role: names[index] for role, index in found.items()}
    if layout is not None and not layout.header:
        name = {role: f"column {column}" for role, column in name.items()}
    user = ids(columns["user"], spec.id_type, "user", name["user"], fail)
    item = ids(columns["item"], spec.id_type, "item", name["item"], fail)
    if "timestamp" in columns:
        timestamp = timestamps(columns["timestamp"], name["timestamp"], fail)
    else:
        timestamp = np.arange(len(table), dtype=np.int64)
    rating = ratings(columns["rating"], name["rating"], fail) if "rating" in columns else None
    described = layout.describe() if layout is not None else ""
    return FileColumns(user, item, timestamp, rating, file_sha256(path), where, described, name)


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _layout(spec: UserFile, fmt: str) -> Layout:
    """The layout of a text file: ``.inter`` and csv/tsv by their format, else sniffed (the
    ``separator`` and ``header`` keys win over the sniffing)."""
    separator = spec.separator
    if fmt in SEPARATORS and separator == AUTO:
        separator = SEPARATORS[fmt]
    header = "true" if fmt == "inter" else spec.header
    try:
        layout = sniff(spec.path, separator, header, spec.columns())
    except UnicodeDecodeError:
        raise _encoding_error(spec.path) from None
    if fmt == "inter":
        names = [_column_name(spec.path, name, fmt) for name in layout.names]
        layout = Layout(layout.separator, True, names, layout.separator_how, "RecBole")
    return layout


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except ImportError:
        raise DataError(
            f"{path}: reading Parquet needs pyarrow: pip install 'fedrec-flwr[parquet]' "
            f"(or write the file as CSV)."
        ) from None
    except Exception as error:  # pyarrow's own errors: not a Parquet file, truncated...
        raise DataError(
            f"{path}: not a readable Parquet file ({error}). Check the file, or set "
            f"data-format if it is CSV, TSV or .inter."
        ) from None


def _pandas_separator(layout: Layout) -> tuple[str, str]:
    """(sep, engine) for pandas: one character or any whitespace by the C reader, a longer
    separator (``::``) by the Python reader."""
    if layout.separator == WHITESPACE:
        return r"\s+", "c"
    if len(layout.separator) == 1:
        return layout.separator, "c"
    return re.escape(layout.separator), "python"


def _read_text(path: Path, layout: Layout) -> pd.DataFrame:
    """The data rows of a text file as strings, one column per field (read from the path by
    pandas: the file is held once, as its columns)."""
    sep, engine = _pandas_separator(layout)
    try:
        table = pd.read_csv(
            path,
            sep=sep,
            header=None,
            skiprows=1 if layout.header else 0,
            dtype=str,
            keep_default_na=False,
            na_filter=False,
            engine=engine,
            encoding="utf-8-sig",
        )
    except UnicodeDecodeError:
        raise _encoding_error(path) from None
    except pd.errors.EmptyDataError:
        table = pd.DataFrame(columns=range(len(layout.names)), dtype=str)
    except pd.errors.ParserError as error:
        raise _field_count_error(path, layout, error) from None
    if table.shape[1] != len(layout.names):
        raise _field_count_error(path, layout, None)
    return table


def _encoding_error(path: Path) -> DataError:
    """The first byte that is not UTF-8: its line and position, and how to convert."""
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                bad = line[error.start : error.end]
                hint = ""
                if number == 1 and line.startswith(b"PAR1"):
                    hint = " It looks like Parquet: set data-format=parquet, or name it .parquet."
                return DataError(
                    f"{path}: line {number}, byte {error.start + 1}: {bad!r} is not UTF-8.{hint} "
                    f"Re-save the file as UTF-8, e.g. iconv -f latin1 -t utf-8 {path.name} > "
                    f"utf8-{path.name}, and point data-file at the new file."
                )
    return DataError(f"{path}: the file is not UTF-8 text. Re-save it as UTF-8.")


def _column_name(path: Path, field: str, fmt: str) -> str:
    """A header field's column name (an .inter field is ``name:type``)."""
    field = field.strip()
    if fmt != "inter":
        return field
    name, sep, kind = field.rpartition(":")
    if not sep or kind not in INTER_TYPES:
        raise DataError(
            f"{path}: line 1: header field {field!r} is not 'name:type' with type one of "
            f"{', '.join(INTER_TYPES)} (RecBole's atomic files, e.g. user_id:token). Fix the "
            f"header, or set data-format='tsv' to read it as a plain TSV file."
        )
    return name


def _check_header(path: Path, header: list[str], parquet: bool) -> None:
    seen: dict[str, int] = {}
    for position, name in enumerate(header, start=1):
        if name in seen:
            where = "the header" if parquet else "line 1 (the header)"
            raise DataError(
                f"{path}: {where} names column {name!r} twice (columns {seen[name]} and "
                f"{position}): rename one, so that each column mapping is unambiguous."
            )
        seen[name] = position


def _check_repeated_header(
    path: Path,
    columns: dict[str, pd.Series],
    names: list[str],
    found: dict[str, int],
    fmt: str,
    where: Callable[[int], str],
) -> None:
    """A data row equal to the header in the id columns: files concatenated with headers."""
    if columns["user"].empty:
        return
    marks = {}
    for role in ("user", "item"):
        name = names[found[role]]
        marks[role] = {name, f"{name}:token"} if fmt == "inter" else {name}
    user, item = (columns[r].astype(str).str.strip() for r in ("user", "item"))
    repeats = np.flatnonzero((user.isin(marks["user"]) & item.isin(marks["item"])).to_numpy())
    if len(repeats):
        raise DataError(
            f"{path}: {where(int(repeats[0]))} repeats the header ({len(repeats)} such "
            f"line(s)): were files joined with their headers? Delete the repeated header "
            f"lines, e.g. keep the first line and drop the others that equal it."
        )


def _row_of(row: int) -> str:
    return f"row {row + 1}"


def _records(path: Path, layout: Layout) -> Iterator[tuple[int, list[str]]]:
    """(first line, fields) of each data record (after the header); blank lines skipped, as
    pandas skips them. Read from the file as it goes: only an error asks for it."""
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as handle:
        if len(layout.separator) == 1:
            reader = csv.reader(handle, delimiter=layout.separator)
            end = 0
            for record in reader:
                start, end = end + 1, reader.line_num
                if record and not (len(record) == 1 and not record[0].strip()):
                    yield start, record
            return
        for number, line in enumerate(handle, start=1):
            if line.strip():
                sep = None if layout.separator == WHITESPACE else layout.separator
                yield number, line.rstrip("\r\n").split(sep)


def _data_records(path: Path, layout: Layout) -> Iterator[tuple[int, list[str]]]:
    records = _records(path, layout)
    if layout.header:
        next(records, None)
    return records


def _line_of_row(path: Path, layout: Layout, row: int) -> int:
    """The line on which data row ``row`` (0-based, as pandas counts) starts."""
    for index, (line, _) in enumerate(_data_records(path, layout)):
        if index == row:
            return line
    return -1


def _field_count_error(path: Path, layout: Layout, error: Exception | None) -> DataError:
    expected = len(layout.names)
    name = NAMES.get(layout.separator, repr(layout.separator))
    what = "the header has" if layout.header else "line 1 has"
    for line, record in _data_records(path, layout):
        if len(record) != expected:
            joiner = " " if layout.separator == WHITESPACE else layout.separator
            shown = joiner.join(record)[:80]
            return DataError(
                f"{path}: line {line} has {len(record)} field(s) ({name}-separated), {what} "
                f"{expected}: {shown!r}. Fix the line (quote fields that contain the "
                f"separator), or set separator if the file is not {name}-separated."
            )
    return DataError(f"{path}: the file could not be parsed ({error}). Check its format.")
