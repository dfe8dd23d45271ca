"""Find a dataset's raw file: in a user-given data folder, or downloaded once into the cache.

The licences of MovieLens and HetRec forbid redistribution, so the project ships no data: the
user either points ``data-dir`` at a folder laid out as ``<data-dir>/<dataset folder>/<file>``
(``FEDREC_DATA_DIR`` is resolved by the caller), or leaves it empty and the file is downloaded
from its public source into ``$FEDREC_CACHE_DIR/datasets`` (default
``~/.cache/fedrec_flwr/datasets``), checked against its checksum, and moved into place
atomically.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from fedrec_flwr.data import registry
from fedrec_flwr.data.interactions import DataError
from fedrec_flwr.data.registry import DatasetSource

CACHE_ENV = "FEDREC_CACHE_DIR"
#: Seconds without a byte (connecting included) before a download is given up: a machine
#: that cannot reach the source is told so in seconds, before anything starts.
DOWNLOAD_TIMEOUT_S = 15.0


# The datasets read from a file, by name, with their sources (the registry's SOURCES, this very
# dict: tests swap entries in it).
DATASETS: dict[str, DatasetSource] = registry.SOURCES


def default_cache_dir() -> Path:
    """``$FEDREC_CACHE_DIR`` or ``~/.cache/fedrec_flwr``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "fedrec_flwr")


def required_files(dataset: str, folder: Path) -> list[str]:
    """Names (relative to ``folder``) of the files the dataset's loader reads there."""
    source = _source(dataset)
    present = [name for name in source.alternatives if (Path(folder) / name).is_file()]
    return present[:1] or [source.file]


def dataset_folder(
    dataset: str,
    data_dir: str | Path | None,
    cache_dir: Path | None = None,
    download: bool = True,
) -> Path:
    """The folder holding ``dataset``'s raw file, downloading it into the cache if needed.

    With ``data_dir``, returns ``data_dir/<dataset folder>`` once the file is there (else
    raises :class:`DataError` saying how to fix it); nothing is downloaded. Without it, uses
    ``<cache_dir>/datasets/<dataset folder>``, downloading the file first if it is missing
    and ``download`` is true.
    """
    source = _source(dataset)
    if data_dir is not None and str(data_dir).strip():
        folder = Path(data_dir).expanduser() / source.folder
        if not _has_file(folder, source):
            raise DataError(
                f"{dataset}: {folder / source.file} not found (data-dir = {data_dir}). Expected "
                f"layout: <data-dir>/{source.folder}/{source.file}. Download "
                f"{source.url or source.homepage} and put {source.file} there, or leave "
                f"data-dir empty (and FEDREC_DATA_DIR unset) to download it into the cache."
            )
        return folder
    folder = Path(cache_dir or default_cache_dir()).expanduser() / "datasets" / source.folder
    if _has_file(folder, source):
        return folder
    if not download:
        raise DataError(
            f"{dataset}: {folder / source.file} is not in the cache and downloading is off. "
            f"Download {source.url or source.homepage} yourself and set data-dir (or "
            f"FEDREC_DATA_DIR) to a folder laid out as <data-dir>/{source.folder}/{source.file}."
        )
    _download(dataset, source, folder)
    return folder


def _source(dataset: str) -> DatasetSource:
    if dataset not in DATASETS:
        raise DataError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    return DATASETS[dataset]


def _has_file(folder: Path, source: DatasetSource) -> bool:
    return any((folder / name).is_file() for name in source.accepted)


def _manual_hint(source: DatasetSource) -> str:
    return (
        f"Download it by hand ({source.url or source.homepage}), put {source.file} in "
        f"<data-dir>/{source.folder}/, and set FEDREC_DATA_DIR (or data-dir) to <data-dir>."
    )


def _download(dataset: str, source: DatasetSource, folder: Path) -> None:
    """Fetch into a temporary folder beside ``folder``, check, then move into place."""
    if source.url is None:
        raise DataError(f"{dataset}: no download URL is known. {_manual_hint(source)}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{source.folder}-", dir=folder.parent) as tmp:
        fetched = Path(tmp) / "download"
        _fetch(dataset, source, source.url, fetched)
        _check_sha256(fetched, source.archive_sha256, source.url, source, normalise=False)
        target = Path(tmp) / source.file
        if source.url.lower().endswith(".zip"):
            _extract(fetched, source, target)
        else:
            fetched.replace(target)
        digest = _check_sha256(target, source.file_sha256, source.file, source, normalise=True)
        if source.shape is not None:
            _check_shape(dataset, source, Path(tmp))
        if source.file_sha256 is None:
            print(
                f"fedrec_flwr: {dataset} {source.file} sha256 (CRLF->LF) = {digest}; no "
                "published checksum to compare, pin this one in DATASETS",
                file=sys.stderr,
            )
        folder.mkdir(exist_ok=True)
        os.replace(target, folder / source.file)


def _fetch(dataset: str, source: DatasetSource, url: str, destination: Path) -> None:
    try:
        with (
            urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response,
            destination.open("wb") as out,
        ):
            print(f"fedrec_flwr: downloading {dataset} from {url}", file=sys.stderr)
            shutil.copyfileobj(response, out, length=1 << 20)
    except urllib.error.HTTPError as error:
        raise DataError(
            f"{dataset}: downloading {url} failed: HTTP {error.code} {error.reason}. "
            f"{_manual_hint(source)}"
        ) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        reason = getattr(error, "reason", error)
        raise DataError(
            f"{dataset}: cannot download {url} ({reason}); is the network reachable? "
            f"{_manual_hint(source)}"
        ) from None


def _sha256(path: Path, normalise: bool) -> str:
    data = path.read_bytes()
    return hashlib.sha256(data.replace(b"\r\n", b"\n") if normalise else data).hexdigest()


def _check_sha256(
    path: Path, expected: str | None, what: str, source: DatasetSource, normalise: bool
) -> str:
    """Return the file's sha256; raise DataError if it differs from ``expected``."""
    digest = _sha256(path, normalise)
    if expected is not None and digest != expected:
        raise DataError(
            f"{what}: sha256 mismatch: expected {expected}, got {digest}. The download is "
            f"corrupt or changed upstream and was deleted. Retry, or {_manual_hint(source)}"
        )
    return digest


def _extract(archive: Path, source: DatasetSource, target: Path) -> None:
    """Copy the one member named ``source.file`` (in any folder) out of the zip."""
    if not zipfile.is_zipfile(archive):
        raise DataError(f"{source.url} is not a zip archive. {_manual_hint(source)}")
    with zipfile.ZipFile(archive) as zf:
        members = [
            name
            for name in zf.namelist()
            if name.rsplit("/", 1)[-1] == source.file and not name.startswith("__MACOSX/")
        ]
        if len(members) != 1:
            raise DataError(
                f"{source.url}: expected one {source.file} in the archive, found {members}. "
                f"{_manual_hint(source)}"
            )
        with zf.open(members[0]) as src, target.open("wb") as out:
            shutil.copyfileobj(src, out, length=1 << 20)


def _check_shape(dataset: str, source: DatasetSource, folder: Path) -> None:
    try:
        data = registry.DATASETS[dataset].load(folder)
    except DataError as error:
        raise DataError(f"{dataset}: the downloaded file is malformed: {error}") from None
    shape = (data.num_users, data.num_items, len(data))
    if shape != source.shape:
        raise DataError(
            f"{dataset}: the downloaded {source.file} gives users x items x rows = {shape}, "
            f"expected {source.shape}; it was deleted. {_manual_hint(source)}"
        )
