"""Parse the mapped columns of a user's file: ids, timestamps, ratings.

Each parser takes the column as read (strings from a text file, typed from Parquet) and
returns a numpy array, or raises the :class:`Failure` of the first bad value (its line).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from fedrec_flwr.data.interactions import DataError

INTEGER = re.compile(r"-?\d{1,18}")  # what id-type 'integer' accepts (fits in int64)
CANONICAL_INTEGER = re.compile(r"-?(0|[1-9]\d{0,17})")  # what 'auto' takes for an integer


class Failure:
    """Builds the DataError of one bad value: file, line, value and fix."""

    def __init__(self, path: Path, where: Callable[[int], str]) -> None:
        self.path, self.where = path, where

    def __call__(self, row: int, column: str, value: object, problem: str, fix: str) -> DataError:
        return DataError(f"{self.path}: {self.where(row)}: {column} {value!r} {problem}. {fix}")


#: Ids that stand for a missing value (compared without case): refused, not taken as ids.
MISSING = ("", "nan", "null", "none", "na", "n/a", "<na>", "\\n")


def ids(series: pd.Series, id_type: str, role: str, column: str, fail: Failure) -> np.ndarray:
    """Raw ids: int64 when ``id_type`` is 'integer' (or 'auto' and every id is one). An
    empty or missing id (``nan``, ``null``, ...: :data:`MISSING`) is refused with its line."""
    fix = f"Give every row {'an' if role[0] in 'aeiou' else 'a'} {role} id, or delete the line."
    if series.isna().any():
        row = int(np.flatnonzero(series.isna().to_numpy())[0])
        raise fail(row, column, None, "is empty", fix)
    if pd.api.types.is_integer_dtype(series.dtype):
        values = series.to_numpy(np.int64)
        return values.astype(str) if id_type == "string" else values
    text = series.astype(str).str.strip()
    missing = text.str.lower().isin(MISSING).to_numpy()
    if missing.any():
        row = int(np.flatnonzero(missing)[0])
        problem = "is empty" if text.iat[row] == "" else "stands for a missing value"
        raise fail(row, column, text.iat[row], problem, fix)
    if id_type == "string":
        return text.to_numpy(dtype=object).astype(str)
    pattern = INTEGER if id_type == "integer" else CANONICAL_INTEGER
    integer = text.str.fullmatch(pattern.pattern).to_numpy()
    if integer.all():
        return text.to_numpy(dtype=object).astype(np.int64)
    if id_type == "integer":
        row = int(np.flatnonzero(~integer)[0])
        raise fail(
            row,
            column,
            text.iat[row],
            "is not an integer id (id-type='integer')",
            "Fix the value, or set id-type='string' (or 'auto') to take ids as text, numbered "
            "in sorted text order.",
        )
    return text.to_numpy(dtype=object).astype(str)


def timestamps(series: pd.Series, column: str, fail: Failure) -> np.ndarray:
    """An int64 key in the order of the timestamps: integers as read, other numbers ranked,
    ISO 8601 dates as nanoseconds."""
    if pd.api.types.is_datetime64_any_dtype(series.dtype):
        if series.isna().any():
            row = int(np.flatnonzero(series.isna().to_numpy())[0])
            raise fail(row, column, None, "is empty", "Give every row a timestamp.")
        return series.dt.tz_localize(None).to_numpy("datetime64[ns]").view(np.int64).copy()
    if pd.api.types.is_integer_dtype(series.dtype):
        return series.to_numpy(np.int64)
    text = series.astype(str).str.strip()
    if text.str.fullmatch(INTEGER.pattern).all():
        return text.to_numpy(dtype=object).astype(np.int64)
    numbers = pd.to_numeric(text, errors="coerce").to_numpy(np.float64)
    numeric = np.isfinite(numbers)
    if numeric.all():
        if (numbers == np.round(numbers)).all() and np.abs(numbers).max() < 2.0**62:
            return numbers.astype(np.int64)
        return np.unique(numbers, return_inverse=True)[1].astype(np.int64).ravel()
    dates = pd.to_datetime(text.where(~numeric, ""), utc=True, format="ISO8601", errors="coerce")
    neither = dates.isna().to_numpy() & ~numeric
    if neither.any() or numeric.any():
        row = int(np.flatnonzero(neither if neither.any() else numeric)[0])
        raise fail(
            row,
            column,
            text.iat[row],
            "is not a number or an ISO 8601 date"
            if not numeric[row]
            else "is a number, but other rows hold dates",
            "Give every row's timestamp in one form (all numbers, or all ISO 8601 dates), or "
            "set timestamp-column='' to let the line order stand in for time.",
        )
    return dates.dt.tz_localize(None).to_numpy("datetime64[ns]").view(np.int64).copy()


def ratings(series: pd.Series, column: str, fail: Failure) -> np.ndarray:
    values = pd.to_numeric(series.astype(str).str.strip(), errors="coerce").to_numpy(np.float64)
    if not np.isfinite(values).all():
        row = int(np.flatnonzero(~np.isfinite(values))[0])
        raise fail(
            row,
            column,
            series.iat[row],
            "is not a number",
            "Fix the rating, or set rating-column='' to take every row as a positive.",
        )
    return values
