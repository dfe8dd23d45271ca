"""dataset_folder: user data folders, and offline-testable downloads into the cache."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import http.server
import socket
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.data import download, registry
from fedrec_flwr.data.download import DATASETS, dataset_folder, required_files
from fedrec_flwr.data.interactions import DataError
from fedrec_flwr.data.loaders import load_lastfm2k, load_ml100k
from fedrec_lab.launch import PROJECT

ML100K_ROWS = "1\t10\t5\t100\n2\t10\t3\t200\n1\t20\t4\t300\n"  # 2 users x 2 items, 3 rows
LASTFM_ROWS = "userID\tartistID\ttagID\tday\tmonth\tyear\n" + "".join(
    f"4\t{artist}\t1\t1\t4\t2009\n" for artist in (8, 9, 8, 9, 8)
)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_zip(path: Path, members: dict[str, bytes]) -> bytes:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path.read_bytes()


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[Path, str, list[str]]]:
    """A folder served over HTTP on 127.0.0.1: (folder, base URL, paths requested)."""
    root = tmp_path / "served"
    root.mkdir()
    requests: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            requests.append(self.path)

    handler = functools.partial(Handler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()


def use_source(monkeypatch: pytest.MonkeyPatch, dataset: str, **changes: object) -> None:
    monkeypatch.setitem(DATASETS, dataset, dataclasses.replace(DATASETS[dataset], **changes))


def test_download_zip_over_http(
    tmp_path: Path, served: tuple[Path, str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, base, requests = served
    archive = make_zip(root / "ml-100k.zip", {"ml-100k/u.data": ML100K_ROWS.encode()})
    use_source(
        monkeypatch,
        "ml-100k",
        url=f"{base}/ml-100k.zip",
        archive_sha256=sha256(archive),
        file_sha256=sha256(ML100K_ROWS.encode()),
        shape=(2, 2, 3),
    )
    cache = tmp_path / "cache"
    folder = dataset_folder("ml-100k", None, cache_dir=cache)
    assert folder == cache / "datasets" / "ml-100k"
    assert files_under(cache) == [folder / "u.data"]  # no temporary files left
    assert len(load_ml100k(folder)) == 3
    assert dataset_folder("ml-100k", "", cache_dir=cache) == folder  # cached: no new request
    assert requests == ["/ml-100k.zip"]


def test_download_plain_file_over_file_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "ratings_Amazon_Instant_Video.csv"
    source.write_bytes(b"A,B,5.0,1\n")
    use_source(monkeypatch, "amazon-video", url=source.as_uri(), archive_sha256=None)
    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path / "env-cache"))
    folder = dataset_folder("amazon-video", None)
    assert folder == tmp_path / "env-cache" / "datasets" / "amazon-video"
    assert (folder / source.name).read_bytes() == b"A,B,5.0,1\n"
    assert sha256(b"A,B,5.0,1\n") in capsys.readouterr().err  # printed so users can pin it


def test_crlf_file_is_checked_after_normalising(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crlf = LASTFM_ROWS.replace("\n", "\r\n").encode()
    archive = make_zip(tmp_path / "hetrec.zip", {"user_taggedartists.dat": crlf})
    use_source(
        monkeypatch,
        "lastfm-2k",
        url=(tmp_path / "hetrec.zip").as_uri(),
        archive_sha256=sha256(archive),
        file_sha256=sha256(LASTFM_ROWS.encode()),
        shape=(1, 2, 5),
    )
    folder = dataset_folder("lastfm-2k", None, cache_dir=tmp_path / "cache")
    assert len(load_lastfm2k(folder)) == 5


@pytest.mark.parametrize("which", ["archive", "file"])
def test_checksum_mismatch_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    archive = make_zip(tmp_path / "ml-100k.zip", {"ml-100k/u.data": ML100K_ROWS.encode()})
    good = {"archive_sha256": sha256(archive), "file_sha256": sha256(ML100K_ROWS.encode())}
    good[f"{which}_sha256"] = "0" * 64
    use_source(monkeypatch, "ml-100k", url=(tmp_path / "ml-100k.zip").as_uri(), **good)
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match="sha256 mismatch") as error:
        dataset_folder("ml-100k", None, cache_dir=cache)
    assert f"expected {'0' * 64}" in str(error.value)
    got = sha256(archive) if which == "archive" else sha256(ML100K_ROWS.encode())
    assert f"got {got}" in str(error.value)
    assert files_under(cache) == []
    assert not (cache / "datasets" / "ml-100k").exists()


def test_real_checksums_reject_a_fake_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_zip(tmp_path / "ml-100k.zip", {"ml-100k/u.data": ML100K_ROWS.encode()})
    use_source(monkeypatch, "ml-100k", url=(tmp_path / "ml-100k.zip").as_uri())
    with pytest.raises(DataError, match=f"expected {DATASETS['ml-100k'].archive_sha256}"):
        dataset_folder("ml-100k", None, cache_dir=tmp_path / "cache")
    assert files_under(tmp_path / "cache") == []


def test_wrong_shape_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_zip(tmp_path / "ml-100k.zip", {"ml-100k/u.data": ML100K_ROWS.encode()})
    url = (tmp_path / "ml-100k.zip").as_uri()
    use_source(monkeypatch, "ml-100k", url=url, archive_sha256=None, file_sha256=None)
    with pytest.raises(DataError, match=r"\(2, 2, 3\), expected \(943, 1682, 100000\)"):
        dataset_folder("ml-100k", None, cache_dir=tmp_path / "cache")
    assert files_under(tmp_path / "cache") == []


def test_archive_without_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_zip(tmp_path / "ml-100k.zip", {"ml-100k/u.item": b"x"})
    url = (tmp_path / "ml-100k.zip").as_uri()
    use_source(monkeypatch, "ml-100k", url=url, archive_sha256=None)
    with pytest.raises(DataError, match=r"expected one u\.data in the archive"):
        dataset_folder("ml-100k", None, cache_dir=tmp_path / "cache")


def test_unreachable_host_says_to_set_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    use_source(monkeypatch, "ml-1m", url=f"http://127.0.0.1:{port}/ml-1m.zip")
    with pytest.raises(DataError, match="cannot download") as error:
        dataset_folder("ml-1m", None, cache_dir=tmp_path / "cache")
    message = str(error.value)
    assert "data-dir" in message and "FEDREC_DATA_DIR" in message
    assert "ratings.dat in <data-dir>/ml-1m/" in message
    assert files_under(tmp_path / "cache") == []


def test_http_error(
    tmp_path: Path, served: tuple[Path, str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, base, _ = served
    use_source(monkeypatch, "filmtrust", url=f"{base}/missing.zip")
    with pytest.raises(DataError, match=r"HTTP 404.*data-dir"):
        dataset_folder("filmtrust", None, cache_dir=tmp_path / "cache")


def test_no_download_when_disabled(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not in the cache and downloading is off"):
        dataset_folder("ml-1m", None, cache_dir=tmp_path, download=False)


def test_data_dir_is_used_as_given(tmp_path: Path) -> None:
    (tmp_path / "ml-100k").mkdir()
    (tmp_path / "ml-100k" / "u.data").write_text(ML100K_ROWS)
    assert dataset_folder("ml-100k", tmp_path) == tmp_path / "ml-100k"
    assert dataset_folder("ml-100k", str(tmp_path)) == tmp_path / "ml-100k"


def test_data_dir_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError) as error:
        dataset_folder("ml-1m", tmp_path, cache_dir=tmp_path / "cache")
    message = str(error.value)
    assert str(tmp_path / "ml-1m" / "ratings.dat") in message
    assert "<data-dir>/ml-1m/ratings.dat" in message
    assert "https://files.grouplens.org/datasets/movielens/ml-1m.zip" in message
    assert "leave data-dir empty" in message
    assert files_under(tmp_path) == []  # nothing downloaded


def test_required_files_follow_the_loader(tmp_path: Path) -> None:
    assert required_files("lastfm-2k", tmp_path) == ["user_taggedartists.dat"]
    (tmp_path / "user_taggedartists-timestamps.dat").write_text("")
    assert required_files("lastfm-2k", tmp_path) == ["user_taggedartists-timestamps.dat"]
    assert required_files("ml-1m", tmp_path) == ["ratings.dat"]


def test_unknown_dataset() -> None:
    with pytest.raises(DataError, match="unknown dataset 'nope'"):
        dataset_folder("nope", None)


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path))
    assert download.default_cache_dir() == tmp_path
    monkeypatch.delenv("FEDREC_CACHE_DIR")
    assert download.default_cache_dir() == Path.home() / ".cache" / "fedrec_flwr"


def test_real_files_match_the_pinned_checksums(real_data_dir: Path) -> None:
    for dataset in ("ml-100k", "lastfm-2k"):
        source = DATASETS[dataset]
        data = (real_data_dir / source.folder / source.file).read_bytes()
        assert sha256(data.replace(b"\r\n", b"\n")) == source.file_sha256


# --- the registry -----------------------------------------------------------------------------


def readme_dataset_table() -> dict[str, str]:
    """The README's dataset table: dataset name -> its 'file read' cell."""
    lines = (PROJECT / "README.md").read_text().splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("| `dataset` | file read |"))
    rows: dict[str, str] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[1]
    return rows


def run_config_accepts(dataset: str) -> bool:
    try:
        own_file = {"data-file": "interactions.csv"} if dataset == "file" else {}
        RunConfig.from_mapping({"dataset": dataset, **own_file})
    except ConfigError:
        return False
    return True


def test_registry_readme_and_run_config_agree() -> None:
    names = registry.dataset_names()
    assert names == list(registry.DATASETS)
    table = readme_dataset_table()
    assert set(table) == set(names)
    candidates = {*names, *table, "nope", "ml100k"}
    assert {name for name in candidates if run_config_accepts(name)} == set(names)
    (dataset_key,) = [key for key in registry.DataKeys.keys if key.name == "dataset"]
    assert dataset_key.choice_values() == tuple(names)
    # the configuration reference lists them in order (python -m fedrec_lab.configref)
    reference = (PROJECT / "docs" / "reference" / "configuration.md").read_text()
    row = f'| `dataset` | str | `"{RunConfig().data.dataset}"` | ' + ", ".join(
        f"`{n}`" for n in names
    )
    assert row + " |" in reference
    for name, spec in registry.DATASETS.items():
        assert spec.name == name and spec.description
        if spec.file is None:
            assert table[name].startswith("none")
        else:
            assert table[name].startswith(f"`{spec.file}`")


def test_download_table_is_the_registry() -> None:
    assert DATASETS is registry.SOURCES
    assert list(DATASETS) == [n for n, s in registry.DATASETS.items() if s.source is not None]
    assert all(DATASETS[name] is registry.DATASETS[name].source for name in DATASETS)
    assert download.DatasetSource is registry.DatasetSource


def test_registry_import_is_light() -> None:
    """config imports the registry: neither imports pandas or the loaders."""
    code = (
        "import sys, fedrec_flwr.config; "
        "assert 'pandas' not in sys.modules and 'fedrec_flwr.data.loaders' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
