"""What a run's folder tells a reader: incomplete or not, its real name, the data it read."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import data_dir_read
from fedrec_flwr.results import INCOMPLETE, RunRecorder, new_run_dir
from fedrec_flwr.server.strategy import FederationError
from fedrec_flwr.server_app import run_federation
from fedrec_lab.local_grid import LocalGrid

SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 20,
    "synthetic-items": 200,
    "synthetic-mean-degree": 10,
    "num-server-rounds": 2,
    "batch-size": 32,
    "item-lr": 0.5,
}


pytestmark = pytest.mark.usefixtures("private_cache")


@pytest.fixture(autouse=True)
def no_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDREC_DATA_DIR", raising=False)


def federate(run_config: dict, client=client_app) -> dict:
    grid = LocalGrid(client, run_config, num_nodes=2)
    return run_federation(grid, RunConfig.from_mapping(run_config))


def test_a_running_run_is_marked_and_the_mark_goes_when_it_finishes(tmp_path: Path) -> None:
    run_dir = tmp_path / "results" / "marked"
    seen = []

    def client(message, context):
        seen.append((run_dir / INCOMPLETE).exists())
        return client_app(message, context)

    config = {**SMALL, "results-dir": str(tmp_path / "results"), "run-name": "marked"}
    federate(config, client)
    assert seen and all(seen)  # marked from before the first message
    assert not (run_dir / INCOMPLETE).exists()
    assert (run_dir / "summary.json").exists()


def test_a_failed_run_stays_marked_with_its_reason(tmp_path: Path) -> None:
    def broken(message, context):
        raise RuntimeError("cannot read data on this device")

    config = {**SMALL, "results-dir": str(tmp_path / "results"), "run-name": "broken"}
    with pytest.raises(FederationError):
        federate(config, broken)
    marker = (tmp_path / "results" / "broken" / INCOMPLETE).read_text()
    assert "failed: FederationError" in marker and "cannot read data" in marker
    assert not (tmp_path / "results" / "broken" / "summary.json").exists()


def test_a_killed_run_keeps_its_marker(tmp_path: Path) -> None:
    config = RunConfig.from_mapping({**SMALL, "results-dir": str(tmp_path), "run-name": "x"})
    recorder = RunRecorder(new_run_dir(config), config, {})
    recorder.record_round({"round": 1})
    # The process dies here (flwr stop, kill -9): nothing removes the marker.
    text = (tmp_path / "x" / INCOMPLETE).read_text()
    assert "has not finished" in text and "summary.json not written yet" in text


def test_a_run_name_collision_says_the_new_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = RunConfig.from_mapping({**SMALL, "results-dir": str(tmp_path), "run-name": "demo"})
    with caplog.at_level(logging.WARNING, logger="flwr"):
        first = new_run_dir(config)
        assert "already exists" not in caplog.text
        second = new_run_dir(config)
    assert (first.name, second.name) == ("demo", "demo-2")
    (record,) = [r for r in caplog.records if "already exists" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert str(first) in record.getMessage() and str(second) in record.getMessage()
    assert "run-name 'demo-2'" in record.getMessage()


def write_ml100k(folder: Path, users: int = 12, items: int = 30) -> None:
    """A generated ``ml-100k/u.data`` (not MovieLens): 8 rows per user."""
    rng = np.random.default_rng(0)
    lines = []
    for user in range(1, users + 1):
        for k, item in enumerate(rng.choice(np.arange(1, items + 1), size=8, replace=False)):
            lines.append(f"{user}\t{item}\t{1 + k % 5}\t{880000000 + 1000 * user + k}\n")
    (folder / "ml-100k").mkdir(parents=True)
    (folder / "ml-100k" / "u.data").write_text("".join(lines))


def test_config_json_records_the_data_dir_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    write_ml100k(data)
    monkeypatch.setenv("FEDREC_DATA_DIR", str(data))
    config = {
        **SMALL,
        "dataset": "ml-100k",
        "data-dir": "",
        "results-dir": str(tmp_path / "results"),
        "run-name": "env",
    }
    federate(config)
    recorded = json.loads((tmp_path / "results" / "env" / "config.json").read_text())
    assert recorded["data-dir"] == str(data)


def test_data_dir_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def read(**keys: object) -> str:
        return data_dir_read(RunConfig.from_mapping({"dataset": "ml-100k", **keys}))

    assert read() == str(tmp_path / "cache" / "datasets")  # the download cache
    monkeypatch.setenv("FEDREC_DATA_DIR", str(tmp_path / "env"))
    assert read() == str(tmp_path / "env")
    assert read(**{"data-dir": str(tmp_path / "given")}) == str(tmp_path / "given")
    monkeypatch.chdir(tmp_path)
    assert read(**{"data-dir": "rel"}) == str(tmp_path / "rel")  # absolute
    assert data_dir_read(RunConfig.from_mapping({"dataset": "synthetic"})) == ""
