"""Atomic file writes: a temporary file in the same folder, fsync, rename, fsync of the folder.

A reader (or a run resumed after a kill) sees the old file or the new one, never a part.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

import numpy as np


def savez(path: Path, arrays: Mapping[str, np.ndarray]) -> int:
    """Write ``arrays`` as the npz file ``path``; the bytes written."""
    # numpy's stub types savez's keyword arrays as its allow_pickle flag
    _replace(path, "wb", lambda f: np.savez(f, **arrays))  # type: ignore[arg-type]
    return path.stat().st_size


def save_npy(path: Path, array: np.ndarray) -> None:
    """Write ``array`` as the npy file ``path``."""
    _replace(path, "wb", lambda f: np.save(f, array))


def write_text(path: Path, text: str) -> None:
    """Write ``text`` as the file ``path``."""
    _replace(path, "w", lambda f: f.write(text))


def _replace(path: Path, mode: str, write: Callable[[IO], object]) -> None:
    """Write ``path`` atomically (module docstring) through ``write``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, newline=None if "b" in mode else "") as f:
            write(f)
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
