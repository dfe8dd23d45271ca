"""dataset = "file" end to end: run config, prepared split, first rounds, export, the launcher."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.data.device import DeviceData
from fedrec_flwr.data.loaders import _LASTFM_DATES, _local_midnight_ms, _read_table
from fedrec_flwr.data.prepared import PreparedData, prepare
from fedrec_flwr.data.user_file import file_sha256
from fedrec_flwr.results import TIMING_COLUMNS
from fedrec_flwr.server_app import run_federation
from fedrec_lab.export import export_devices
from fedrec_lab.export import main as export_main
from fedrec_lab.launch import PROJECT, check_run_config, run
from fedrec_lab.launch import ConfigError as LaunchConfigError
from fedrec_lab.local_grid import LocalGrid

pytestmark = pytest.mark.usefixtures("private_cache")
INTER_HEADER = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"


def ml100k_files(data_dir: Path, out: Path) -> list[dict]:
    """ML-100K's u.data as CSV and as .inter: the run-config keys that read each."""
    raw = pd.read_csv(data_dir / "ml-100k" / "u.data", sep="\t", header=None)
    raw.columns = ["user_id", "item_id", "rating", "timestamp"]
    raw.to_csv(out / "ml-100k.csv", index=False)
    with open(out / "ml-100k.inter", "w") as f:
        f.write(INTER_HEADER)
        raw.to_csv(f, sep="\t", index=False, header=False)
    names = ("ml-100k.csv", "ml-100k.inter")
    return [{"dataset": "file", "data-file": str(out / name)} for name in names]


def lastfm_files(data_dir: Path, out: Path) -> list[dict]:
    """Last.fm-2K's tag assignments, every user, dates as epoch milliseconds (the loader's)."""
    path = data_dir / "lastfm-2k" / "user_taggedartists.dat"
    raw = _read_table(path, _LASTFM_DATES)
    table = pd.DataFrame({"userID": raw["userID"], "artistID": raw["artistID"]})
    table["ms"] = _local_midnight_ms(raw, path)
    table.to_csv(out / "lastfm.csv", index=False)
    with open(out / "lastfm.inter", "w") as f:
        f.write("userID:token\tartistID:token\tms:float\n")
        table.to_csv(f, sep="\t", index=False, header=False)
    keys = {
        "dataset": "file",
        "user-column": "userID",
        "item-column": "artistID",
        "timestamp-column": "ms",
        "min-user-interactions": 5,  # the named loader's filter
    }
    return [{**keys, "data-file": str(out / name)} for name in ("lastfm.csv", "lastfm.inter")]


def assert_same_arrays(a: PreparedData, b: PreparedData) -> None:
    assert (a.num_users, a.num_items) == (b.num_users, b.num_items)
    for name in PreparedData.ARRAYS:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert np.array_equal(a.eval_negatives(0), b.eval_negatives(0))


@pytest.mark.parametrize("protocol", ["strict", "paper"])
def test_named_datasets_written_out_prepare_bit_identically(real_data_dir, tmp_path, protocol):
    for dataset, files in (
        ("ml-100k", ml100k_files(real_data_dir, tmp_path)),
        ("lastfm-2k", lastfm_files(real_data_dir, tmp_path)),
    ):
        named = {"dataset": dataset, "data-dir": str(real_data_dir), "protocol": protocol}
        expected = prepare(RunConfig.from_mapping(named))
        for keys in files:
            got = prepare(RunConfig.from_mapping({**keys, "protocol": protocol}))
            assert_same_arrays(expected, got)
            assert got.meta["card"]["sha256"] == file_sha256(Path(keys["data-file"]))


def rounds(results: Path) -> list[dict[str, str]]:
    (run_dir,) = results.iterdir()
    with open(run_dir / "rounds.csv") as f:
        rows = list(csv.DictReader(f))
    return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in rows]


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["ml-100k", "lastfm-2k"])
def test_first_rounds_are_bit_identical_to_the_named_loaders(real_data_dir, tmp_path, dataset):
    """5 rounds in-process (LocalGrid, 2 nodes): every figure of rounds.csv is the same."""
    writer = ml100k_files if dataset == "ml-100k" else lastfm_files
    common = {"num-server-rounds": 5, "fraction-train": 0.2, "eval-users": 200}
    named = {"dataset": dataset, "data-dir": str(real_data_dir)}
    figures = []
    for k, keys in enumerate([named, *writer(real_data_dir, tmp_path)]):
        mapping = {**common, **keys, "results-dir": str(tmp_path / f"results{k}")}
        grid = LocalGrid(client_app, mapping, num_nodes=2)
        run_federation(grid, RunConfig.from_mapping(mapping))
        figures.append(rounds(tmp_path / f"results{k}"))
        if k:
            (run_dir,) = (tmp_path / f"results{k}").iterdir()
            recorded = json.loads((run_dir / "config.json").read_text())
            assert recorded["data-file-sha256"] == file_sha256(Path(keys["data-file"]))
    assert len(figures[0]) == 5 and float(figures[0][-1]["val-hr@10"]) > 0
    assert figures[1] == figures[0] and figures[2] == figures[0]


def small_file(tmp_path: Path, users: int = 12, items: int = 40) -> Path:
    rng = np.random.default_rng(0)
    rows = [
        (f"user-{u}", f"item-{i}", int(t))
        for u in range(users)
        for t, i in enumerate(rng.choice(items, size=8, replace=False))
    ]
    path = tmp_path / "clicks.csv"
    pd.DataFrame(rows, columns=["visitor", "article", "ts"]).to_csv(path, index=False)
    return path


def file_keys(path: Path) -> dict:
    return {
        "dataset": "file",
        "data-file": str(path),
        "user-column": "visitor",
        "item-column": "article",
        "timestamp-column": "ts",
    }


def test_the_device_export_reads_a_user_file(tmp_path):
    path = small_file(tmp_path)
    config = RunConfig.from_mapping(file_keys(path))
    folders = export_devices(config, 3, tmp_path / "devices")
    prepared = prepare(config)
    devices = [DeviceData(folder) for folder in folders]
    assert sum(len(device.users) for device in devices) == prepared.num_users == 12
    summary = json.loads((tmp_path / "devices" / "export.json").read_text())
    assert summary["dataset"] == "file" and summary["source"]["user-column"] == "visitor"
    assert summary["source"]["data-file-sha256"] == file_sha256(path)
    argv = ["--dataset", "file", "--data-file", str(path), "--user-column", "visitor"]
    argv += ["--item-column", "article", "--timestamp-column", "ts"]
    assert export_main([*argv, "--num-partitions", "2", "--out", str(tmp_path / "cli")]) == 0
    assert json.loads((tmp_path / "cli" / "export.json").read_text())["num-users"] == 12


def test_the_run_config_checks_the_file_keys():
    with pytest.raises(ConfigError, match="data-file, which is empty"):
        RunConfig.from_mapping({"dataset": "file"})
    with pytest.raises(ConfigError, match=r"rating-threshold=4\.0 needs a rating column"):
        RunConfig.from_mapping({"dataset": "file", "data-file": "x.csv", "rating-threshold": 4})
    with pytest.raises(ConfigError, match="k-core=-1 must be >= 0"):
        RunConfig.from_mapping({"dataset": "file", "data-file": "x.csv", "k-core": -1})
    with pytest.raises(ConfigError, match="data-format='xlsx' is not known"):
        RunConfig.from_mapping({"dataset": "file", "data-file": "x.csv", "data-format": "xlsx"})
    RunConfig.from_mapping({"dataset": "ml-100k", "k-core": -1})  # not the run's dataset


def test_fedrec_refuses_a_bad_file_before_anything_starts(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("visitor,article,ts\nu1,a,1\nu1,b,2\nu1,c,3\n")  # one user
    results = tmp_path / "results"
    with pytest.raises(LaunchConfigError, match="one user is left after filtering"):
        run({**file_keys(bad), "results-dir": str(results)}, nodes=2)
    assert not results.exists()
    card = check_run_config(file_keys(small_file(tmp_path)))
    assert card[0].startswith("dataset card: file ") and "users 12  items" in card[1]


# --- a file of any shape, in one line typed in bash ------------------------------------------


def shaped_file(folder: Path, shape: str, users: int = 12, per_user: int = 6) -> Path:
    """A generated ratings file of ``shape``: its separator, whether it has a header line and
    a time column."""
    rows = [
        (u, (3 * u + k) % 20, 4, 1_000 + 10 * u + k) for u in range(users) for k in range(per_user)
    ]
    layouts = {  # separator, header, with times, suffix
        "whitespace": (" ", None, False, ".txt"),
        "whitespace-header-times": ("  ", "user item rating timestamp", True, ".dat"),
        "semicolon-header": (";", "userId;movieId;rating", False, ".csv"),
        "semicolon-times": (";", None, True, ".csv"),
        "tab-header-times": ("\t", "user_id\titem_id\trating\ttimestamp", True, ".tsv"),
        "tab": ("\t", None, False, ".data"),
    }
    sep, header, times, suffix = layouts[shape]
    lines = [header] if header else []
    lines += [sep.join(map(str, row if times else row[:3])) for row in rows]
    path = folder / f"ratings {shape}{suffix}"  # a space in the name: quoted once in bash
    path.write_text("\n".join(lines) + "\n")
    return path


def typed_in_bash(line: str, cwd: Path) -> list[str]:
    """The arguments bash gives ``fedrec`` for ``line`` (a shell function records them)."""
    record = cwd / "argv"
    script = f'fedrec() {{ printf "%s\\0" "$@" > "{record}"; }}\n{line}'
    subprocess.run(["bash", "-c", script], cwd=cwd, check=True, timeout=30)
    return record.read_bytes().decode().split("\0")[:-1]


SHAPES = ("whitespace", "whitespace-header-times", "semicolon-header", "semicolon-times",
          "tab-header-times", "tab")  # fmt: skip


@pytest.mark.parametrize("shape", SHAPES)
def test_a_file_of_any_shape_is_checked_from_one_line_in_bash(tmp_path, shape, capsys, monkeypatch):
    from fedrec_lab.launch.command import main as fedrec_run

    path = shaped_file(tmp_path, shape)
    argv = typed_in_bash(f'fedrec run --check dataset=file data-file="{path.name}"', tmp_path)
    assert argv[1:] == ["--check", "dataset=file", f"data-file={path.name}"]
    monkeypatch.chdir(tmp_path)  # outside the project: FEDREC_PROJECT names it
    monkeypatch.setenv("FEDREC_PROJECT", str(PROJECT))
    assert fedrec_run(argv[1:]) == 0, capsys.readouterr().err
    said = capsys.readouterr().err
    assert "users 12  items 20  interactions 72" in said
    assert ("time: column 'timestamp'" in said) == ("times" in shape and "header" in shape)
    assert "the run can start" in said


@pytest.mark.slow
def test_fedrec_runs_a_headerless_whitespace_file_from_one_line_in_bash(tmp_path):
    """A file with no header and no times, its name with a space, through the real entry
    point typed in bash: the run completes, its folder and summary.json name the file."""
    path = shaped_file(tmp_path, "whitespace")
    script = Path(sys.executable).with_name("fedrec")
    line = f'"{script}" run dataset=file data-file="{path.name}" num-server-rounds=2 eval-every=1'
    env = {
        **os.environ,
        "FEDREC_CACHE_DIR": str(tmp_path / "cache"),
        "FEDREC_PROJECT": str(PROJECT),
    }
    done = subprocess.run(
        ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    assert run_dir.name.startswith("pfedrec-file-ratings-whitespace-strict-seed0-")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["data-file"] == str(path) and summary["rounds"] == 2
    assert summary["data-file-sha256"] == file_sha256(path)
