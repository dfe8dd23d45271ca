"""Read a user's own interaction file: CSV, TSV, Parquet or RecBole's atomic ``.inter``.

:class:`UserFile` says where the file is and which columns hold what; :func:`read_columns`
returns the mapped columns, parsed and checked, in file order. Every problem raises one
:class:`~fedrec_flwr.data.interactions.DataError` naming the file, the line (``row`` in a
Parquet file) and the fix. The filters and the id numbering live in
:mod:`fedrec_flwr.data.user_filters`; ``docs/own-data.md`` describes both for users.
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from fedrec_flwr.data.interactions import DataError
from fedrec_flwr.data.user_keys import DataFormat, IdType, RepeatedPairs
from fedrec_flwr.data.user_values import Failure, ids, ratings, timestamps

FORMATS = tuple(member.value for member in DataFormat)
ID_TYPES = tuple(member.value for member in IdType)
REPEATED_PAIRS = tuple(member.value for member in RepeatedPairs)
SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".parquet": "parquet", ".pq": "parquet"}
SUFFIXES[".inter"] = "inter"
SEPARATORS = {"csv": ",", "tsv": "\t", "inter": "\t"}
INTER_TYPES = ("token", "token_seq", "float", "float_seq")  # RecBole's atomic field types


@dataclass(frozen=True)
class UserFile:
    """A user's interaction file and how to read it (each field is a run-config key).

    A column left empty ('') is absent: no timestamp column means the line order stands in for
    time (a later line is newer); no rating column means every row is a positive.
    """

    path: Path  # data-file
    format: str = "auto"  # data-format: from the suffix when 'auto'
    user_column: str = "user_id"
    item_column: str = "item_id"
    timestamp_column: str = "timestamp"
    rating_column: str = ""
    rating_threshold: float = 0.0  # rows rated below it are dropped (with a rating column)
    id_type: str = "auto"  # 'integer': ids must be integers; 'string': any text
    repeated_pairs: str = "keep-all"  # or 'keep-newest': one row per (user, item)
    min_user_interactions: int = 0  # one pass: users with fewer rows are dropped
    k_core: int = 0  # repeatedly drop users and items with fewer rows, until none is left

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))
        for key, value, choices in (
            ("data-format", self.format, FORMATS),
            ("id-type", self.id_type, ID_TYPES),
            ("repeated-pairs", self.repeated_pairs, REPEATED_PAIRS),
        ):
            if value not in choices:
                raise ValueError(f"{key}={value!r} is not one of {', '.join(choices)}")
        counts = (("min-user-interactions", self.min_user_interactions), ("k-core", self.k_core))
        for key, count in counts:
            if count < 0:
                raise ValueError(f"{key}={count} must be >= 0 (0 = no such filter)")
        for key, name in (("user-column", self.user_column), ("item-column", self.item_column)):
            if not name:
                raise ValueError(f"{key} is empty: name the file's column that holds the ids")

    @property
    def resolved_format(self) -> str:
        """The format read: ``format``, or the one the file's suffix names."""
        if self.format != "auto":
            return self.format
        found = SUFFIXES.get(self.path.suffix.lower())
        if found is None:
            raise DataError(
                f"{self.path}: cannot tell the format from the suffix '{self.path.suffix}'. "
                f"Set data-format to one of {', '.join(FORMATS[1:])}, or rename the file "
                f"to end in one of {', '.join(SUFFIXES)}."
            )
        return found

    def mapped(self) -> dict[str, str]:
        """Role -> column name, for the roles this file maps (user, item, ...)."""
        roles = {
            "user": self.user_column,
            "item": self.item_column,
            "timestamp": self.timestamp_column,
            "rating": self.rating_column,
        }
        return {role: name for role, name in roles.items() if name}


@dataclass(frozen=True)
class FileColumns:
    """The mapped columns of a file, parsed, in file order."""

    user: np.ndarray  # int64 when the ids are integers, else str
    item: np.ndarray
    timestamp: np.ndarray  # int64; only its order matters (the line index if no column)
    rating: np.ndarray | None  # float64
    sha256: str  # of the file's bytes
    where: Callable[[int], str]  # 'line 7' (or 'row 7') of a 0-based data row


def read_columns(spec: UserFile) -> FileColumns:
    """Read and check the columns that ``spec`` maps; raise DataError on bad input."""
    path = spec.path
    if not path.is_file():
        raise DataError(
            f"{path}: no such file. Set data-file to your interaction file (absolute, or "
            f"relative to the folder you run from)."
        )
    fmt = spec.resolved_format
    raw = path.read_bytes()
    if fmt == "parquet":
        table, names, where = _read_parquet(path), None, _row_of
    else:
        table, names, where = _read_text(path, raw, fmt)
    header = [str(c) for c in table.columns] if names is None else names
    _check_header(path, header, fmt, where is _row_of)
    mapped = spec.mapped()
    for role, name in mapped.items():
        if name not in header:
            raise _missing_column(path, role, name, header, where is _row_of)
    columns = {role: table.iloc[:, header.index(name)] for role, name in mapped.items()}
    _check_repeated_header(path, columns, [mapped["user"], mapped["item"]], table, fmt, where)
    if table.empty:
        raise DataError(f"{path}: the file has a header but no data rows. Add the rows.")
    fail = Failure(path, where)
    user = ids(columns["user"], spec.id_type, "user", spec.user_column, fail)
    item = ids(columns["item"], spec.id_type, "item", spec.item_column, fail)
    if "timestamp" in columns:
        timestamp = timestamps(columns["timestamp"], spec.timestamp_column, fail)
    else:
        timestamp = np.arange(len(table), dtype=np.int64)
    rating = ratings(columns["rating"], spec.rating_column, fail) if "rating" in columns else None
    return FileColumns(user, item, timestamp, rating, hashlib.sha256(raw).hexdigest(), where)


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


def _read_text(
    path: Path, raw: bytes, fmt: str
) -> tuple[pd.DataFrame, list[str], Callable[[int], str]]:
    """(table of strings, header names, line of a data row) of a CSV, TSV or .inter file."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        column = error.start - raw.rfind(b"\n", 0, error.start)
        bad = raw[error.start : error.end]
        raise DataError(
            f"{path}: line {line}, byte {column}: {bad!r} is not UTF-8. Re-save the file as "
            f"UTF-8, e.g. iconv -f latin1 -t utf-8 {path.name} > utf8-{path.name}, and point "
            f"data-file at the new file."
        ) from None
    sep = SEPARATORS[fmt]
    header = next(csv.reader(io.StringIO(text, newline=""), delimiter=sep), [])
    if not header or not any(name.strip() for name in header):
        raise DataError(
            f"{path}: line 1 is empty: the file must start with a header line naming the "
            f"columns ({'user_id:token' if fmt == 'inter' else 'user_id'}, ...)."
        )
    names = [_column_name(path, field, fmt) for field in header]

    def where(row: int) -> str:
        return f"line {_line_of_row(text, sep, row)}"

    try:
        table = pd.read_csv(
            io.StringIO(text),
            sep=sep,
            header=None,
            skiprows=1,
            dtype=str,
            keep_default_na=False,
            na_filter=False,
            engine="c",
        )
    except pd.errors.EmptyDataError:
        table = pd.DataFrame(columns=range(len(names)), dtype=str)
    except pd.errors.ParserError as error:
        raise _field_count_error(path, text, sep, len(names), error) from None
    if table.shape[1] != len(names):
        raise _field_count_error(path, text, sep, len(names), None)
    return table, names, where


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


def _check_header(path: Path, header: list[str], fmt: str, parquet: bool) -> None:
    seen: dict[str, int] = {}
    for position, name in enumerate(header, start=1):
        if name in seen:
            where = "the header" if parquet else "line 1 (the header)"
            raise DataError(
                f"{path}: {where} names column {name!r} twice (columns {seen[name]} and "
                f"{position}): rename one, so that each column mapping is unambiguous."
            )
        seen[name] = position


def _missing_column(
    path: Path, role: str, name: str, header: list[str], parquet: bool
) -> DataError:
    close = difflib.get_close_matches(name, header, n=1)
    suggestion = close[0] if close else header[0]
    fix = f"set {role}-column to the column that holds them, e.g. {role}-column='{suggestion}'"
    if role == "timestamp":
        fix += ", or timestamp-column='' to let the line order stand in for time"
    if role == "rating":
        fix += ", or rating-column='' to take every row as a positive"
    where = "the file's columns" if parquet else "line 1 (the header)"
    return DataError(
        f"{path}: {where} has no column {name!r} ({role}-column); it has {header}: {fix}."
    )


def _check_repeated_header(
    path: Path,
    columns: dict[str, pd.Series],
    names: list[str],
    table: pd.DataFrame,
    fmt: str,
    where: Callable[[int], str],
) -> None:
    """A data row equal to the header in the id columns: files concatenated with headers."""
    if where is _row_of or table.empty:
        return
    tokens = [f"{n}:token" for n in names] if fmt == "inter" else names
    user, item = (columns[r].astype(str).str.strip() for r in ("user", "item"))
    repeats = np.flatnonzero(
        ((user == tokens[0]) | (user == names[0])).to_numpy()
        & ((item == tokens[1]) | (item == names[1])).to_numpy()
    )
    if len(repeats):
        raise DataError(
            f"{path}: {where(int(repeats[0]))} repeats the header ({len(repeats)} such "
            f"line(s)): were files joined with their headers? Delete the repeated header "
            f"lines, e.g. keep the first line and drop the others that equal it."
        )


def _row_of(row: int) -> str:
    return f"row {row + 1}"


def _records(text: str, sep: str):
    """(first line, fields) of each data record after the header; blank lines skipped, as
    pandas skips them."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep)
    next(reader, None)
    end = reader.line_num
    for record in reader:
        start, end = end + 1, reader.line_num
        if not record or (len(record) == 1 and not record[0].strip()):
            continue
        yield start, record


def _line_of_row(text: str, sep: str, row: int) -> int:
    """The line on which data row ``row`` (0-based, as pandas counts) starts."""
    for index, (line, _) in enumerate(_records(text, sep)):
        if index == row:
            return line
    return -1


def _field_count_error(
    path: Path, text: str, sep: str, expected: int, error: Exception | None
) -> DataError:
    name = {",": "commas", "\t": "tabs"}[sep]
    for line, record in _records(text, sep):
        if len(record) != expected:
            shown = sep.join(record)[:80]
            return DataError(
                f"{path}: line {line} has {len(record)} field(s) separated by {name}, the "
                f"header has {expected}: {shown!r}. Fix the line (quote fields that contain "
                f"the separator), or set data-format if the file is not separated by {name}."
            )
    return DataError(f"{path}: the file could not be parsed ({error}). Check its format.")
