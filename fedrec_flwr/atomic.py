"""Atomic file writes: a temporary file in the same folder, fsync, rename, fsync of the folder.

A reader (or a run resumed after a kill) sees the old file or the new one, never a part.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np


def savez(path: Path, arrays: Mapping[str, np.ndarray]) -> int:
    """Write ``arrays`` as the npz file ``path``; the bytes written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path.stat().st_size


def write_text(path: Path, text: str) -> None:
    """Write ``text`` as the file ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (where the platform allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


TAG = "__tag__"  # the JSON tag inside a tagged npz file


def savez_tagged(path: Path, tag: Mapping, arrays: Mapping[str, np.ndarray]) -> int:
    """:func:`savez` with a JSON ``tag`` saying what the arrays belong to."""
    return savez(path, {TAG: np.array(json.dumps(tag, default=_plain)), **arrays})


def load_tagged(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(tag, arrays) of a file written by :func:`savez_tagged`; ValueError if unreadable."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
        return json.loads(str(arrays.pop(TAG))), arrays
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"cannot read {path}: {error}") from error


def _plain(value):
    """JSON for numpy scalars."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
