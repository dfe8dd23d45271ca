"""The run-config keys of the dataset ``file``: a user's own interaction file.

Declared here, next to the data registry that lists the dataset (:class:`FileKeys`), and
checked only when ``dataset = "file"``. ``docs/own-data.md`` describes them for users;
:mod:`fedrec_flwr.data.user_dataset` turns them into a
:class:`~fedrec_flwr.data.user_file.UserFile`. Imports nothing heavy (the registry imports it).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from fedrec_flwr.schema import NON_NEGATIVE, ConfigError, Group, RunValues, key

FILE_DATASET = "file"


class DataFormat(StrEnum):
    """``data-format``: how the file is read (``auto``: Parquet or ``.inter`` by the suffix,
    else delimited text, its separator and header sniffed)."""

    AUTO = "auto"
    TEXT = "text"  # delimited text: separator and header sniffed, or set by their keys
    CSV = "csv"  # text separated by commas
    TSV = "tsv"  # text separated by tabs
    PARQUET = "parquet"
    INTER = "inter"  # RecBole's atomic files


class Header(StrEnum):
    """``header``: does line 1 name the columns (``auto``: sniffed)?"""

    AUTO = "auto"
    TRUE = "true"
    FALSE = "false"  # the columns are named by position: 1, 2, ...


def header_from_boolean(value: Any) -> str | None:
    """``header = false`` (a TOML boolean) is ``"false"``."""
    return str(value).lower() if isinstance(value, bool) else None


#: ``separator`` by name; "whitespace" (or "space", or " ") is any run of spaces and tabs.
WHITESPACE = "whitespace"
SEPARATORS = {
    "comma": ",",
    "tab": "\t",
    "\\t": "\t",
    "semicolon": ";",
    "pipe": "|",
    "space": WHITESPACE,
    " ": WHITESPACE,
    WHITESPACE: WHITESPACE,
}
AUTO = "auto"


def separator_of(setting: str) -> str:
    """The separator that ``separator`` names: its character(s), :data:`WHITESPACE`, or
    ``auto`` (sniffed)."""
    return SEPARATORS.get(setting, setting)


def check_separator(setting: str) -> None:
    sep = separator_of(setting)
    if sep in (AUTO, WHITESPACE) or (0 < len(sep) <= 3 and not any(c.isalnum() for c in sep)):
        return
    raise ConfigError(
        f"separator={setting!r} is no separator: give auto (sniffed), comma, tab, semicolon, "
        "pipe, whitespace (any run of spaces and tabs) or the character(s) themselves, e.g. "
        "separator=';' or separator='::'."
    )


class IdType(StrEnum):
    """``id-type``: what the user and item ids must be, and so how they are sorted."""

    AUTO = "auto"  # integers if every id is one (sorted numerically), else text
    INTEGER = "integer"
    STRING = "string"


class RepeatedPairs(StrEnum):
    """``repeated-pairs``: the rows of a (user, item) pair that appears more than once."""

    KEEP_ALL = "keep-all"  # every row; the protocol decides (strict keeps the newest)
    KEEP_NEWEST = "keep-newest"


def check_file_settings(config: RunValues) -> None:
    """Checks across the keys of the dataset ``file``."""
    keys = config.group(FileKeys)
    if not keys.data_file:
        raise ConfigError(
            "dataset='file' reads data-file, which is empty: set data-file to your "
            "interaction file (delimited text, Parquet or RecBole .inter; docs/own-data.md)."
        )
    if keys.rating_threshold != 0.0 and not keys.rating_column:
        raise ConfigError(
            f"rating-threshold={keys.rating_threshold} needs a rating column: set "
            "rating-column to the file's column of ratings, or leave rating-threshold at 0."
        )
    if keys.user_column == keys.item_column != AUTO:
        raise ConfigError(
            f"user-column and item-column both name '{keys.user_column}': give the "
            "columns of the user ids and of the item ids."
        )


class FileKeys(Group):
    title = "Your own file (dataset `file`, docs/own-data.md)"

    data_file: str = key(
        default="",
        help="`file` dataset: the interaction file (delimited text, Parquet or RecBole "
        "`.inter`); relative to the folder `fedrec` runs in",
    )
    data_format: str = key(
        default="auto",
        help="`file` dataset: how to read it; `auto`: Parquet or `.inter` by the suffix, else "
        "delimited text (`text`), its separator and header sniffed",
        choices=DataFormat,
    )
    separator: str = key(
        default=AUTO,
        help="`file` dataset, text: `auto` (sniffed), `comma`, `tab`, `semicolon`, `pipe`, "
        "`whitespace` (any run of spaces and tabs) or the character(s), e.g. `::`",
        check=check_separator,
    )
    header: str = key(
        default="auto",
        help="`file` dataset, text: does line 1 name the columns; `auto`: sniffed; `false`: "
        "the columns are named by position, 1, 2, ...",
        choices=Header,
        parse=header_from_boolean,
    )
    user_column: str = key(
        default=AUTO,
        help="`file` dataset: the column of user ids, by name or position (1, 2, ...); `auto`: "
        "`user_id` or `user` (any case and punctuation: `userId`), else column 1",
    )
    item_column: str = key(
        default=AUTO,
        help="`file` dataset: the column of item ids, by name or position; `auto`: `item_id` or "
        "`item`, else the first column after the user's",
    )
    timestamp_column: str = key(
        default=AUTO,
        help="`file` dataset: the column of times (numbers or ISO 8601 dates), by name or "
        "position; `auto`: `timestamp`, `time` or `ts` if the file has one; empty, or none "
        "found: the line order stands in for time",
    )
    rating_column: str = key(
        default="",
        help="`file` dataset: a column of ratings (name or position), for `rating-threshold`; "
        "empty: every row is a positive",
    )
    rating_threshold: float = key(
        default=0.0,
        help="`file` dataset: rows rated below it are dropped (implicit feedback)",
    )
    id_type: str = key(
        default="auto",
        help="`file` dataset: `integer` ids are sorted numerically, `string` ids as text; "
        "`auto`: integer if every id is one",
        choices=IdType,
    )
    repeated_pairs: str = key(
        default="keep-all",
        help="`file` dataset: rows of a repeated (user, item) pair: all, or the newest only",
        choices=RepeatedPairs,
    )
    min_user_interactions: int = key(
        default=0,
        help="`file` dataset: users with fewer rows are dropped (one pass; 0: none)",
        range=NON_NEGATIVE,
    )
    k_core: int = key(
        default=0,
        help="`file` dataset: users and items with fewer rows are dropped until none is left "
        "(0: none)",
        range=NON_NEGATIVE,
    )

    check = check_file_settings
