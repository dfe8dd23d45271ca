"""The run-config keys of the dataset ``file``: a user's own interaction file.

Declared here, next to the data registry that lists the dataset (:data:`FILE_KEYS`), and
checked only when ``dataset = "file"``. ``docs/own-data.md`` describes them for users;
:mod:`fedrec_flwr.data.user_dataset` turns them into a
:class:`~fedrec_flwr.data.user_file.UserFile`. Imports nothing heavy (the registry imports it).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from fedrec_flwr.schema import NON_NEGATIVE, ConfigError, Key, KeyGroup

FILE_DATASET = "file"


class DataFormat(StrEnum):
    """``data-format``: how the file is read (``auto``: from its suffix)."""

    AUTO = "auto"
    CSV = "csv"
    TSV = "tsv"
    PARQUET = "parquet"
    INTER = "inter"  # RecBole's atomic files


class IdType(StrEnum):
    """``id-type``: what the user and item ids must be, and so how they are sorted."""

    AUTO = "auto"  # integers if every id is one (sorted numerically), else text
    INTEGER = "integer"
    STRING = "string"


class RepeatedPairs(StrEnum):
    """``repeated-pairs``: the rows of a (user, item) pair that appears more than once."""

    KEEP_ALL = "keep-all"  # every row; the protocol decides (strict keeps the newest)
    KEEP_NEWEST = "keep-newest"


def check_file_settings(config: Any) -> None:
    """Checks across the keys of the dataset ``file``."""
    if not config.data_file:
        raise ConfigError(
            "dataset='file' reads data-file, which is empty: set data-file to your "
            "interaction file (CSV, TSV, Parquet or RecBole .inter; docs/own-data.md)."
        )
    if config.rating_threshold != 0.0 and not config.rating_column:
        raise ConfigError(
            f"rating-threshold={config.rating_threshold} needs a rating column: set "
            "rating-column to the file's column of ratings, or leave rating-threshold at 0."
        )
    if config.user_column == config.item_column:
        raise ConfigError(
            f"user-column and item-column both name '{config.user_column}': give the "
            "columns of the user ids and of the item ids."
        )


FILE_KEYS = KeyGroup(
    title="Your own file (dataset `file`, docs/own-data.md)",
    owner=__name__,
    applies=lambda config: config.dataset == FILE_DATASET,
    check=check_file_settings,
    keys=(
        Key(
            "data-file",
            "",
            "`file` dataset: the interaction file (CSV, TSV, Parquet or RecBole `.inter`); "
            "relative to the folder `fedrec` runs in",
        ),
        Key(
            "data-format",
            "auto",
            "`file` dataset: how to read it; `auto`: from the suffix",
            choices=DataFormat,
        ),
        Key("user-column", "user_id", "`file` dataset: the column of user ids"),
        Key("item-column", "item_id", "`file` dataset: the column of item ids"),
        Key(
            "timestamp-column",
            "timestamp",
            "`file` dataset: the column of times (numbers or ISO 8601 dates); empty: the line "
            "order stands in for time",
        ),
        Key(
            "rating-column",
            "",
            "`file` dataset: a column of ratings, for `rating-threshold`; empty: every row is "
            "a positive",
        ),
        Key(
            "rating-threshold",
            0.0,
            "`file` dataset: rows rated below it are dropped (implicit feedback)",
        ),
        Key(
            "id-type",
            "auto",
            "`file` dataset: `integer` ids are sorted numerically, `string` ids as text; "
            "`auto`: integer if every id is one",
            choices=IdType,
        ),
        Key(
            "repeated-pairs",
            "keep-all",
            "`file` dataset: rows of a repeated (user, item) pair: all, or the newest only",
            choices=RepeatedPairs,
        ),
        Key(
            "min-user-interactions",
            0,
            "`file` dataset: users with fewer rows are dropped (one pass; 0: none)",
            range=NON_NEGATIVE,
        ),
        Key(
            "k-core",
            0,
            "`file` dataset: users and items with fewer rows are dropped until none is left "
            "(0: none)",
            range=NON_NEGATIVE,
        ),
    ),
)
