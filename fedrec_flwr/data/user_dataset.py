"""The dataset ``file``: a user's own interaction file, configured by run-config keys.

``dataset = "file"`` reads ``data-file`` (:mod:`fedrec_flwr.data.user_file`), filters it
(:mod:`fedrec_flwr.data.user_filters`) and from then on is split, cached and served like any
named dataset. :data:`KEYS` lists its run-config keys with their defaults; the split's cache
key holds the file's size and modification time and every one of these settings.
:func:`fedrec_flwr.data.prepared.check_user_file` prepares the split before a run starts (the
``fedrec`` command calls it), so that a bad file is refused before a run folder exists, and
returns the dataset card.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedrec_flwr.data.interactions import DataError

if TYPE_CHECKING:  # the reader imports pandas: only where a file is read
    from fedrec_flwr.data.interactions import Interactions
    from fedrec_flwr.data.user_file import UserFile

FILE_DATASET = "file"

# run-config key -> (UserFile field, default): the keys of the dataset 'file'.
KEYS: dict[str, tuple[str, Any]] = {
    "data-file": ("path", ""),
    "data-format": ("format", "auto"),
    "user-column": ("user_column", "user_id"),
    "item-column": ("item_column", "item_id"),
    "timestamp-column": ("timestamp_column", "timestamp"),
    "rating-column": ("rating_column", ""),
    "rating-threshold": ("rating_threshold", 0.0),
    "id-type": ("id_type", "auto"),
    "repeated-pairs": ("repeated_pairs", "keep-all"),
    "min-user-interactions": ("min_user_interactions", 0),
    "k-core": ("k_core", 0),
}
_SHA256: dict[tuple[str, int, int], str] = {}


def settings(config: Any) -> dict[str, Any]:
    """The values of :data:`KEYS` in ``config`` (attributes named as the keys, snake_case)."""
    return {key: getattr(config, key.replace("-", "_")) for key in KEYS}


def user_file(config: Any) -> UserFile:
    """The :class:`UserFile` that ``config`` describes; ValueError naming the key if bad."""
    from fedrec_flwr.data.user_file import UserFile

    values = settings(config)
    if not values["data-file"]:
        raise ValueError(
            "dataset='file' reads data-file, which is empty: set data-file to your "
            "interaction file (CSV, TSV, Parquet or RecBole .inter; docs/own-data.md)."
        )
    return UserFile(**{KEYS[key][0]: value for key, value in values.items()})


def unused_settings(config: Any) -> list[str]:
    """The keys of :data:`KEYS` set away from their defaults although dataset is not 'file'."""
    if config.dataset == FILE_DATASET:
        return []
    values = settings(config)
    return [key for key, (_, default) in KEYS.items() if values[key] != default]


def fingerprint(config: Any) -> dict[str, Any]:
    """What identifies the split of the configured file: its path, size and modification
    time, and the settings (a change of any re-splits)."""
    spec = user_file(config)
    path = spec.path.resolve()
    if not path.is_file():
        raise DataError(f"{path}: no such file. Set data-file to your interaction file.")
    stat = path.stat()
    values = settings(config)
    values["data-file"] = str(path)
    return {"file": [stat.st_size, stat.st_mtime_ns], "settings": values}


def load(config: Any) -> Interactions:
    """Read and filter the configured file (:func:`~fedrec_flwr.data.user_filters.
    load_user_file`)."""
    from fedrec_flwr.data.user_filters import load_user_file  # pandas: only when read

    return load_user_file(user_file(config))


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def source_record(config: Any) -> dict[str, str]:
    """``config.json``'s record of the file read: ``{'data-file-sha256': ...}`` (nothing
    for a named dataset, or where this machine cannot read the file)."""
    if config.dataset != FILE_DATASET or not config.data_file:
        return {}
    path = Path(config.data_file).expanduser()
    try:
        stat = path.stat()
    except OSError:
        return {}
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _SHA256:
        _SHA256[key] = file_sha256(path)
    return {"data-file-sha256": _SHA256[key]}
