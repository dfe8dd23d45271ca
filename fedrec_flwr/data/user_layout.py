"""How a user's delimited text file is laid out: its separator, its header, which column is
which.

:func:`sniff` reads the first lines only: the separator is the one that splits every sampled
line into the same number of fields (two or more; tab, comma, semicolon, pipe, ``::``, the
most fields first, else any run of whitespace); line 1 is a header when it names a column the
keys ask for, or holds text where the lines below hold numbers. :func:`mapped_columns` then
finds each role's column: by name or position, and for ``auto`` by the usual names, else by
position. Every guess is printed on the dataset card, and each has its key to override it.
"""

from __future__ import annotations

import csv
import difflib
import io
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from fedrec_flwr.data.interactions import DataError
from fedrec_flwr.data.user_keys import AUTO, WHITESPACE, separator_of

#: Separators tried, in this order on a tie; whitespace only when none of them fits.
CANDIDATES = ("\t", ",", ";", "|", "::")
NAMES = {
    "\t": "tab",
    ",": "comma",
    ";": "semicolon",
    "|": "pipe",
    "::": "double-colon",
    WHITESPACE: "whitespace",
}
SAMPLE_BYTES = 1 << 18
SAMPLE_LINES = 200
#: The column names ``auto`` looks for, compared without case and punctuation.
USUAL_NAMES = {
    "user": ("userid", "user", "uid"),
    "item": ("itemid", "item", "iid"),
    "timestamp": ("timestamp", "time", "ts", "datetime", "date"),
}
ROLES = ("user", "item", "timestamp", "rating")
NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


@dataclass(frozen=True)
class Layout:
    """A text file's separator (:data:`WHITESPACE` for any run of blanks), whether line 1 is
    a header, its column names (``1``, ``2``, ... without a header) and how each was known
    (``sniffed`` or ``set``)."""

    separator: str
    header: bool
    names: list[str]
    separator_how: str = "set"
    header_how: str = "set"

    def describe(self) -> str:
        """``tab-separated (sniffed), header line 1 (sniffed)``, for the dataset card."""
        sep = NAMES.get(self.separator, repr(self.separator))
        header = "header line 1" if self.header else "no header line: columns by position"
        return f"{sep}-separated ({self.separator_how}), {header} ({self.header_how})"


def normalised(name: str) -> str:
    """``User ID``, ``user_id`` and ``userId`` alike: lower case, letters and digits only."""
    return re.sub(r"[^0-9a-z]", "", name.lower())


def sample_lines(path: Path) -> tuple[str, bool]:
    """The file's first :data:`SAMPLE_BYTES` as text (a last partial line dropped) and
    whether that is the whole file. UnicodeDecodeError as ``bytes.decode`` raises it."""
    with open(path, "rb") as handle:
        head = handle.read(SAMPLE_BYTES + 1)
    whole = len(head) <= SAMPLE_BYTES
    if not whole:
        head = head[: head.rfind(b"\n") + 1] or head[:SAMPLE_BYTES]
    try:
        return head.decode("utf-8-sig"), whole
    except UnicodeDecodeError as error:
        if whole or error.start < len(head) - 4:  # else a character cut at the sample's end
            raise
        return head[: error.start].decode("utf-8-sig"), whole


def split_records(text: str, separator: str) -> list[list[str]]:
    """The non-blank records of ``text`` split by ``separator`` (quotes respected for one
    character, as the reader respects them)."""
    if separator == WHITESPACE:
        return [line.split() for line in text.splitlines() if line.strip()]
    if len(separator) > 1:
        return [line.split(separator) for line in text.splitlines() if line.strip()]
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=separator)
    return [r for r in reader if r and not (len(r) == 1 and not r[0].strip())]


def sniff_separator(text: str) -> str:
    """The separator that splits every sampled record into the same number of fields (two or
    more), the most fields first, :data:`CANDIDATES` order on a tie; else any run of
    whitespace if that fits; else the one that fits the most records."""
    fits: list[tuple[int, int, str]] = []
    partial: list[tuple[int, int, str]] = []
    for rank, sep in enumerate((*CANDIDATES, WHITESPACE)):
        counts = Counter(len(r) for r in split_records(text, sep)[:SAMPLE_LINES])
        fields, lines = counts.most_common(1)[0] if counts else (1, 0)
        if fields < 2:
            continue
        if len(counts) == 1:
            fits.append((-fields if sep != WHITESPACE else 0, rank, sep))
        partial.append((-lines, rank, sep))
    if fits:
        return min(fits)[2]
    return min(partial)[2] if partial else ","


def numeric(value: str) -> bool:
    return bool(NUMBER.fullmatch(value.strip()))


def sniff_header(records: list[list[str]], wanted: set[str]) -> bool:
    """Is the first record a header? When it names a column the keys ask for (or a usual
    name), or a column holds numbers below it and text in it."""
    if not records:
        return False
    first = [normalised(field) for field in records[0]]
    if any(name and name in wanted for name in first):
        return True
    rows = records[1 : SAMPLE_LINES + 1]
    columns = [
        [row[column].strip() for row in rows if column < len(row) and row[column].strip()]
        for column in range(len(records[0]))
    ]
    for field, values in zip(records[0], columns, strict=True):
        if values and not numeric(field) and all(numeric(v) for v in values):
            return True
    # Text everywhere: ids recur (a user has several rows, an item several users), a name
    # does not. Line 1 names the columns if none of its fields recurs below it, while some
    # field below does.
    fields = [field.strip() for field in records[0]]
    recurs = any(len(set(values)) < len(values) for values in columns)
    named = all(
        field and field not in values for field, values in zip(fields, columns, strict=True)
    )
    return recurs and named and len(set(fields)) == len(fields)


def wanted_names(columns: dict[str, str]) -> set[str]:
    """The normalised names that mark line 1 as a header: the column keys' names (not
    positions) and, for ``auto``, the usual names."""
    wanted: set[str] = set()
    for role, setting in columns.items():
        if setting == AUTO:
            wanted.update(USUAL_NAMES.get(role, ()))
        elif setting and not setting.isdigit():
            wanted.add(normalised(setting))
    return wanted


def sniff(path: Path, separator: str, header: str, columns: dict[str, str]) -> Layout:
    """The layout of a text file; ``separator`` and ``header`` as the keys give them
    (``auto``: sniffed from the first lines), ``columns`` the column keys by role."""
    text, _ = sample_lines(path)
    sep = separator_of(separator)
    how = "set"
    if sep == AUTO:
        sep, how = sniff_separator(text), "sniffed"
    records = split_records(text, sep)
    if not records or not any(field.strip() for field in records[0]):
        raise DataError(f"{path}: the file holds no lines. Point data-file at the interactions.")
    if header == AUTO:
        has_header, header_how = sniff_header(records, wanted_names(columns)), "sniffed"
    else:
        has_header, header_how = header == "true", "set"
    width = len(records[0])
    if width < 2:
        name = NAMES.get(sep, repr(sep))
        found = (
            ""
            if how == "sniffed"
            else f"; sniffed, it would be {NAMES.get(sniff_separator(text), 'none')}"
        )
        raise DataError(
            f"{path}: line 1 is one field when split by {name} ({how}{found}): a line needs a "
            f"user id and an item id. Set separator to the one the file uses (comma, tab, "
            f"semicolon, pipe, whitespace, or the characters), or leave it auto."
        )
    names = [f.strip() for f in records[0]] if has_header else [str(k + 1) for k in range(width)]
    return Layout(sep, has_header, names, how, header_how)


def mapped_columns(
    path: Path, columns: dict[str, str], names: list[str], header: bool | None
) -> dict[str, int]:
    """Role -> index of its column: a name of the header, else a position (``1``...); for
    ``auto`` a usual name, else (user and item) the first columns no other role took.
    ``header`` None: the names are a Parquet file's own. DataError for a column not there."""
    found: dict[str, int] = {}
    by_name = {normalised(name): k for k, name in reversed(list(enumerate(names)))}
    for role, setting in columns.items():
        if setting == AUTO:
            usual = [by_name[n] for n in USUAL_NAMES.get(role, ()) if n in by_name]
            if usual and usual[0] not in found.values():
                found[role] = usual[0]
        elif setting:
            index = column_index(setting, names)
            if index is None:
                raise missing_column(path, role, setting, names, header, found)
            found[role] = index
    for role in ("user", "item"):
        if role not in found and columns.get(role) == AUTO:
            free = [k for k in range(len(names)) if k not in found.values()]
            if not free:
                raise missing_column(path, role, AUTO, names, header, found)
            found[role] = free[0]
    return found


def column_index(setting: str, names: list[str]) -> int | None:
    """The index of the column named ``setting``, else of position ``setting``; None."""
    if setting in names:
        return names.index(setting)
    if setting.isdigit() and 1 <= int(setting) <= len(names):
        return int(setting) - 1
    return None


def missing_column(
    path: Path,
    role: str,
    name: str,
    names: list[str],
    header: bool | None,
    taken: dict[str, int],
) -> DataError:
    """The error for a column not in the file, with the columns it has and, among those no
    other role took, the closest in name (never another role's column)."""
    free = [n for k, n in enumerate(names) if k not in taken.values()]
    similarity = {
        n: difflib.SequenceMatcher(None, normalised(name), normalised(n)).ratio() for n in free
    }
    close = sorted((n for n in free if similarity[n] >= 0.5), key=lambda n: -similarity[n])
    if header is False:
        example = f", e.g. {role}-column={free[0]}" if role in ("user", "item") and free else ""
        return DataError(
            f"{path}: no column {name!r} ({role}-column): the file has no header line (set "
            f"header=true if line 1 names the columns), its columns are 1 to {len(names)}: "
            f"set {role}-column to the position of the column that holds them{example}"
            + (", or timestamp-column='' for the line order" if role == "timestamp" else "")
            + "."
        )
    example = ""
    if close:
        example = f", e.g. {role}-column={quoted(close[0])}"
    elif role in ("user", "item") and free:
        example = f", e.g. {role}-column={quoted(free[0])} if that column holds them"
    other = {
        "timestamp": ", or timestamp-column='' to let the line order stand in for time",
        "rating": ", or rating-column='' to take every row as a positive",
    }.get(role, "")
    where = "the file's columns" if header is None else "line 1 (the header)"
    what = f"no column {name!r}" if name != AUTO else "no column left"
    return DataError(
        f"{path}: {where} has {what} ({role}-column); it has {names}: set {role}-column to "
        f"the column that holds them{example}{other}."
    )


def quoted(name: str) -> str:
    """A column name as a shell takes it: bare when it is one plain word, else quoted."""
    return name if re.fullmatch(r"[\w.-]+", name) else "'" + name.replace("'", "'\\''") + "'"
