"""Readers for the raw dataset files: one function per dataset, each returning Interactions.

Every reader checks its input and fails with a :class:`DataError` that names the file, the
problem (with the line number where the parser can tell) and the expected format; no line is
skipped silently (blank lines carry no data and are ignored). Ratings are read only to check
the row's shape: every row is a positive.

Duplicates are kept as read and reported, the same way by every reader
(:func:`report_duplicates`): rows that repeat an earlier (user, item) pair, and among them
identical lines. The ``strict`` protocol then keeps each pair's newest row, ``paper`` keeps
them all (``docs/protocols.md``; :mod:`fedrec_flwr.data.prepared`).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pandas as pd

from fedrec_flwr.data.interactions import DataError, Interactions
from fedrec_flwr.data.registry import DATASETS

MIN_USER_ROWS = 5  # Last.fm-2K and Amazon: users with fewer rows are dropped (one pass)
LASTFM_TIMEZONE = "Europe/Madrid"

_DTYPES = {"int": np.int64, "float": np.float64, "str": str}
LOG = logging.getLogger("flwr")  # Flower's logger: what it logs reaches `flwr log`


@dataclass(frozen=True)
class _Format:
    """The layout of one raw file."""

    dataset: str
    description: str  # for error messages
    sep: str | None  # field separator; None = any run of whitespace
    columns: tuple[str, ...]
    kinds: tuple[str, ...]  # 'int', 'float' or 'str', one per column
    header: bool = False  # first line holds exactly `columns`
    homepage: str = ""
    repeats: str = ""  # why (user, item) pairs repeat in this file, if they do by design


_ML100K = _Format(
    "ml-100k",
    "tab-separated 'user item rating timestamp' lines, no header (MovieLens u.data)",
    "\t",
    ("user", "item", "rating", "timestamp"),
    ("int", "int", "float", "int"),
    homepage="https://grouplens.org/datasets/movielens/100k/ (ml-100k.zip)",
)
_ML1M = _Format(
    "ml-1m",
    "'UserID::MovieID::Rating::Timestamp' lines, no header (MovieLens ratings.dat)",
    "::",
    ("UserID", "MovieID", "Rating", "Timestamp"),
    ("int", "int", "float", "int"),
    homepage="https://grouplens.org/datasets/movielens/1m/ (ml-1m.zip)",
)
_LASTFM_HOME = "https://grouplens.org/datasets/hetrec-2011/ (hetrec2011-lastfm-2k.zip)"
_LASTFM_DATES = _Format(
    "lastfm-2k",
    "tab-separated 'userID artistID tagID day month year' lines after that header line "
    "(HetRec 2011 user_taggedartists.dat)",
    "\t",
    ("userID", "artistID", "tagID", "day", "month", "year"),
    ("int",) * 6,
    header=True,
    homepage=_LASTFM_HOME,
    repeats="one row per tag assignment",
)
_LASTFM_STAMPS = _Format(
    "lastfm-2k",
    "tab-separated 'userID artistID tagID timestamp' lines (milliseconds) after that header "
    "line (HetRec 2011 user_taggedartists-timestamps.dat)",
    "\t",
    ("userID", "artistID", "tagID", "timestamp"),
    ("int",) * 4,
    header=True,
    homepage=_LASTFM_HOME,
    repeats="one row per tag assignment",
)
_AMAZON = _Format(
    "amazon-video",
    "comma-separated 'reviewerID,asin,rating,unix_time' lines, no header "
    "(ratings_Amazon_Instant_Video.csv)",
    ",",
    ("reviewerID", "asin", "rating", "unix_time"),
    ("str", "str", "float", "int"),
    homepage="https://jmcauley.ucsd.edu/data/amazon/ ('ratings only', Amazon Instant Video)",
)
_FILMTRUST = _Format(
    "filmtrust",
    "space-separated 'user item rating' lines, no header (FilmTrust ratings.txt)",
    None,
    ("user", "item", "rating"),
    ("int", "int", "float"),
    homepage="https://guoguibing.github.io/librec/datasets.html (filmtrust.zip)",
)


def load_ml100k(folder: Path) -> Interactions:
    """MovieLens-100K from ``folder/u.data`` (943 users x 1,682 items, 100,000 rows)."""
    path = Path(folder) / "u.data"
    df = _read_table(path, _ML100K)
    report_duplicates(path, _ML100K, df)
    return Interactions.from_raw("ml-100k", df["user"], df["item"], df["timestamp"])


def load_ml1m(folder: Path) -> Interactions:
    """MovieLens-1M from ``folder/ratings.dat`` (6,040 users x 3,706 items, 1,000,209 rows)."""
    path = Path(folder) / "ratings.dat"
    df = _read_table(path, _ML1M)
    report_duplicates(path, _ML1M, df)
    return Interactions.from_raw("ml-1m", df["UserID"], df["MovieID"], df["Timestamp"])


def load_lastfm2k(folder: Path) -> Interactions:
    """Last.fm-2K (HetRec 2011) tag assignments as the papers use them.

    Reads ``user_taggedartists-timestamps.dat`` if present, else ``user_taggedartists.dat``,
    whose day/month/year become the epoch milliseconds of local midnight in Europe/Madrid
    (the timestamps file's convention; UTC midnight if the time-zone database is missing,
    which keeps the order). Keeps one row per tag assignment, so (user, artist) pairs repeat,
    and drops users with fewer than 5 rows: 1,600 users x 12,454 artists, 185,650 rows.
    """
    folder = Path(folder)
    path = folder / "user_taggedartists-timestamps.dat"
    if path.is_file():
        fmt = _LASTFM_STAMPS
        df = _read_table(path, fmt)
        timestamp = df["timestamp"].to_numpy()
    else:
        path, fmt = folder / "user_taggedartists.dat", _LASTFM_DATES
        df = _read_table(path, fmt)
        timestamp = _local_midnight_ms(df, path)
    keep = _users_with_min_rows(df["userID"].to_numpy(), MIN_USER_ROWS)
    if not keep.any():
        raise DataError(f"{folder}: no Last.fm-2K user has {MIN_USER_ROWS} or more rows.")
    report_duplicates(path, fmt, df[keep])
    return Interactions.from_raw(
        "lastfm-2k", df["userID"][keep], df["artistID"][keep], timestamp[keep]
    )


def load_amazon_video(folder: Path) -> Interactions:
    """Amazon Instant Video ratings, users with >= 5 ratings (one pass, not a k-core).

    Reads ``folder/ratings_Amazon_Instant_Video.csv``; ids are strings.
    """
    path = Path(folder) / "ratings_Amazon_Instant_Video.csv"
    df = _read_table(path, _AMAZON)
    keep = _users_with_min_rows(df["reviewerID"].to_numpy(), MIN_USER_ROWS)
    if not keep.any():
        raise DataError(f"{path}: no reviewer has {MIN_USER_ROWS} or more ratings.")
    report_duplicates(path, _AMAZON, df[keep])
    return Interactions.from_raw(
        "amazon-video", df["reviewerID"][keep], df["asin"][keep], df["unix_time"][keep]
    )


def load_filmtrust(folder: Path) -> Interactions:
    """FilmTrust from ``folder/ratings.txt``.

    The file has no timestamps: the 0-based data line index stands in for one, so a later line
    counts as newer (and the leave-one-out test item is each user's last line).
    """
    path = Path(folder) / "ratings.txt"
    df = _read_table(path, _FILMTRUST)
    report_duplicates(path, _FILMTRUST, df)
    order = np.arange(len(df), dtype=np.int64)
    return Interactions.from_raw("filmtrust", df["user"], df["item"], order)


# The loader of every dataset read from a file, as the registry names it.
LOADERS: dict[str, Callable[[Path], Interactions]] = {
    name: globals()[spec.loader] for name, spec in DATASETS.items() if spec.loader is not None
}


def report_duplicates(path: Path, fmt: _Format, df: pd.DataFrame) -> tuple[int, int]:
    """Log the rows of ``df`` that repeat an earlier (user, item) pair; (repeats, identical).

    ``identical`` counts the repeats whose every field equals an earlier row's. Nothing is
    dropped here: the rule applied is the protocol's, and the message says it. A WARNING,
    or INFO when the format repeats pairs by design and no line is identical.
    """
    pair = list(fmt.columns[:2])  # every format starts with user, item
    repeats = int(df.duplicated(subset=pair).sum())
    if not repeats:
        return 0, 0
    identical = int(df.duplicated().sum())
    why = f" ({fmt.repeats}: expected)" if fmt.repeats else ""
    LOG.log(
        logging.INFO if fmt.repeats and not identical else logging.WARNING,
        "%s: %d of %d rows repeat an earlier (user, item) pair%s, %d of them identical lines. "
        "Kept as read (every row is a positive); the strict protocol then keeps each pair's "
        "newest row (drops these %d), the paper protocol keeps them all.",
        path,
        repeats,
        len(df),
        why,
        identical,
        repeats,
    )
    return repeats, identical


def _users_with_min_rows(users: np.ndarray, min_rows: int) -> np.ndarray:
    """Boolean mask of the rows whose user has at least ``min_rows`` rows."""
    codes, _ = pd.factorize(users)
    return np.bincount(codes)[codes] >= min_rows


def _local_midnight_ms(df: pd.DataFrame, path: Path) -> np.ndarray:
    """Epoch milliseconds of local midnight (Europe/Madrid) of each row's day/month/year."""
    try:
        tz: tzinfo = ZoneInfo(LASTFM_TIMEZONE)
    except ZoneInfoNotFoundError:  # no time-zone database: UTC keeps the order
        tz = UTC
    dates = df[["year", "month", "day"]].to_numpy()
    unique, inverse = np.unique(dates, axis=0, return_inverse=True)
    millis = np.empty(len(unique), dtype=np.int64)
    for k, (year, month, day) in enumerate(unique):
        try:
            midnight = datetime(int(year), int(month), int(day), tzinfo=tz)
        except ValueError:
            row = int(np.flatnonzero(inverse.ravel() == k)[0])
            raise DataError(
                f"{path}: data row {row + 1} (userID {df['userID'].iat[row]}, artistID "
                f"{df['artistID'].iat[row]}) has day/month/year {day}/{month}/{year}, which is "
                f"not a date. Expected {_LASTFM_DATES.description}. {_hint(path, _LASTFM_DATES)}"
            ) from None
        millis[k] = round(midnight.timestamp() * 1000)
    return millis[inverse.ravel()]


def _hint(path: Path, fmt: _Format) -> str:
    return (
        f"Get the original file from {fmt.homepage} and put it at "
        f"<data-dir>/{fmt.dataset}/{path.name}, or leave data-dir empty to download it."
    )


def _fail(path: Path, fmt: _Format, problem: str) -> DataError:
    return DataError(f"{path}: {problem}. Expected {fmt.description}. {_hint(path, fmt)}")


def _read_table(path: Path, fmt: _Format) -> pd.DataFrame:
    """Parse a whole file with pandas (fast path); on any problem, find the bad line."""
    if not path.is_file():
        raise _fail(path, fmt, "file not found")
    raw = path.read_bytes()
    if fmt.header:
        first, _, body = raw.partition(b"\n")
        found = _split(first.decode("utf-8", "replace").rstrip("\r"), fmt.sep)
        if found != list(fmt.columns):
            raise _fail(path, fmt, f"line 1 should be the header {list(fmt.columns)}, not {found}")
        raw = body
    sep = fmt.sep
    if sep is not None and len(sep) > 1:  # pandas' fast parser takes one-character separators
        raw, sep = raw.replace(sep.encode(), b"\t"), "\t"
    try:
        df = pd.read_csv(
            io.BytesIO(raw),
            sep=r"\s+" if sep is None else sep,
            header=None,
            dtype={k: _DTYPES[kind] for k, kind in enumerate(fmt.kinds)},
            na_filter=False,
            engine="c",
        )
    except pd.errors.EmptyDataError:
        raise _fail(path, fmt, "the file has no data rows") from None
    except (ValueError, OverflowError) as error:
        raise _diagnose(path, fmt, error) from None
    if df.shape[1] != len(fmt.columns):
        raise _diagnose(path, fmt, None)
    df.columns = list(fmt.columns)
    for column, kind in zip(fmt.columns, fmt.kinds, strict=True):
        if kind == "str" and (df[column] == "").any():
            raise _diagnose(path, fmt, None)
    if df.empty:
        raise _fail(path, fmt, "the file has no data rows")
    return df


def _split(line: str, sep: str | None) -> list[str]:
    return line.split() if sep is None else line.split(sep)


def _diagnose(path: Path, fmt: _Format, error: Exception | None) -> DataError:
    """Scan the file line by line and describe the first malformed line."""
    sep_name = {None: "whitespace", "\t": "tabs", ",": "commas"}.get(fmt.sep, repr(fmt.sep))
    with path.open(encoding="utf-8", errors="replace", newline=None) as lines:
        for number, line in enumerate(lines, start=1):
            line = line.rstrip("\n")
            if (number == 1 and fmt.header) or not line.strip():
                continue
            fields = _split(line, fmt.sep)
            if len(fields) != len(fmt.columns):
                return _fail(
                    path,
                    fmt,
                    f"line {number} has {len(fields)} field(s) separated by {sep_name}, "
                    f"expected {len(fmt.columns)}: {line[:80]!r}",
                )
            for column, kind, value in zip(fmt.columns, fmt.kinds, fields, strict=True):
                problem = _field_problem(value, kind)
                if problem:
                    return _fail(path, fmt, f"line {number}: {column} {value!r} {problem}")
    return _fail(path, fmt, f"the file could not be parsed ({error})")


def _field_problem(value: str, kind: str) -> str:
    """Why ``value`` is not a valid field of this kind ('' if it is)."""
    if not value.strip():
        return "is empty"
    try:
        if kind == "int" and not -(2**63) <= int(value) < 2**63:
            return "is out of the 64-bit integer range"
        if kind == "float":
            float(value)
    except ValueError:
        return "is not an integer" if kind == "int" else "is not a number"
    return ""
