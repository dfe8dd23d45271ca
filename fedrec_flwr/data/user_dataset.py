"""The dataset ``file``: a user's own interaction file, configured by run-config keys.

``dataset = "file"`` reads ``data-file`` (:mod:`fedrec_flwr.data.user_file`), filters it
(:mod:`fedrec_flwr.data.user_filters`) and from then on is split, cached and served like any
named dataset. Its run-config keys are declared in :mod:`fedrec_flwr.data.user_keys`; the
split's cache key holds the file's size and modification time and every one of these settings.
:func:`fedrec_flwr.data.prepared.check_prepared` prepares the split before a run starts (the
``fedrec`` command calls it), so that a bad file is refused before a run folder exists, and
returns the dataset card.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedrec_flwr.data.interactions import DataError
from fedrec_flwr.data.settings import DataSettings
from fedrec_flwr.data.user_keys import FILE_DATASET, FileKeys
from fedrec_flwr.run_keys import RunGroups

if TYPE_CHECKING:  # the reader imports pandas: only where a file is read
    from fedrec_flwr.data.interactions import Interactions
    from fedrec_flwr.data.user_file import UserFile

# run-config key -> UserFile field, where they differ (else the key in snake_case).
_FIELDS = {"data-file": "path", "data-format": "format"}
KEYS: dict[str, tuple[str, Any]] = {  # run-config key -> (UserFile field, default)
    key.name: (_FIELDS.get(key.name, key.field), key.default) for key in FileKeys.keys
}
_SHA256: dict[tuple[str, int, int], str] = {}


def settings(keys: FileKeys) -> dict[str, Any]:
    """The values of :data:`KEYS`, by run-config key."""
    return {key: getattr(keys, key.replace("-", "_")) for key in KEYS}


def user_file(keys: FileKeys) -> UserFile:
    """The :class:`UserFile` that ``keys`` describe; ValueError naming the key if bad."""
    from fedrec_flwr.data.user_file import UserFile

    values = settings(keys)
    if not values["data-file"]:
        raise ValueError(
            "dataset='file' reads data-file, which is empty: set data-file to your "
            "interaction file (delimited text, Parquet or RecBole .inter; docs/own-data.md)."
        )
    fields = {KEYS[key][0]: value for key, value in values.items()}
    return UserFile(**{**fields, "path": Path(values["data-file"])})


def fingerprint(keys: FileKeys) -> dict[str, Any]:
    """What identifies the split of the configured file: its path, size and modification
    time, and the settings (a change of any re-splits)."""
    spec = user_file(keys)
    path = spec.path.resolve()
    if not path.is_file():
        raise DataError(f"{path}: no such file. Set data-file to your interaction file.")
    stat = path.stat()
    values = settings(keys)
    values["data-file"] = str(path)
    return {"file": [stat.st_size, stat.st_mtime_ns], "settings": values}


def load(keys: FileKeys) -> Interactions:
    """Read and filter the configured file (:func:`~fedrec_flwr.data.user_filters.
    load_user_file`)."""
    from fedrec_flwr.data.user_filters import load_user_file  # pandas: only when read

    return load_user_file(user_file(keys))


def source_record(config: RunGroups | DataSettings) -> dict[str, str]:
    """``config.json``'s record of the file read: ``{'data-file-sha256': ...}`` (nothing
    for a named dataset, or where this machine cannot read the file)."""
    data = DataSettings.of(config)
    if data.dataset != FILE_DATASET or not data.file.data_file:
        return {}
    path = Path(data.file.data_file).expanduser()
    try:
        stat = path.stat()
    except OSError:
        return {}
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _SHA256:
        from fedrec_flwr.data.user_file import file_sha256  # pandas: only for a user's file

        _SHA256[key] = file_sha256(path)
    return {"data-file-sha256": _SHA256[key]}
