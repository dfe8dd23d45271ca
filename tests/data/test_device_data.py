"""A device holds only its own data: the export, the node reading its folder, the server
learning the federation from the handshake and refusing nodes that do not fit."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.device import DeviceData
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.messages import ARRAYS, array_record, record_arrays
from fedrec_flwr.results import TIMING_COLUMNS
from fedrec_flwr.server.strategy import FederationError
from fedrec_flwr.server_app import run_federation
from fedrec_lab.export import export_devices
from fedrec_lab.export import main as export_main
from fedrec_lab.local_grid import LocalGrid

SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 30,
    "synthetic-items": 400,
    "synthetic-mean-degree": 12,
    "num-server-rounds": 3,
    "batch-size": 32,
    "item-lr": 0.5,
}


pytestmark = pytest.mark.usefixtures("private_cache")


@pytest.fixture(autouse=True)
def no_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDREC_DATA_DIR", raising=False)


def export(tmp_path: Path, nodes: int, name: str = "devices", **overrides) -> list[Path]:
    config = RunConfig.from_mapping({**SMALL, **overrides})
    return export_devices(config, nodes, tmp_path / name)


def federate(tmp_path: Path, nodes: int, folders=None, client=client_app, **overrides):
    """Run in-process; the nodes read ``folders`` (device i: folders[i]) or the shared split."""
    run_config = {**SMALL, "results-dir": str(tmp_path / "results"), **overrides}
    node_configs = [{"data-path": str(f)} for f in folders] if folders else None
    grid = LocalGrid(client, run_config, num_nodes=nodes, node_configs=node_configs)
    return run_federation(grid, RunConfig.from_mapping(run_config))


def rounds(tmp_path: Path) -> list[dict[str, str]]:
    (run_dir,) = (tmp_path / "results").iterdir()
    with open(run_dir / "rounds.csv") as f:
        return [
            {k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in csv.DictReader(f)
        ]


def test_each_folder_holds_only_its_users_rows(tmp_path: Path) -> None:
    folders = export(tmp_path, 3, protocol="paper")
    prepared = prepare(RunConfig.from_mapping({**SMALL, "protocol": "paper"}))
    seen = []
    for p, folder in enumerate(folders):
        manifest = json.loads((folder / "manifest.json").read_text())
        assert manifest["partition-id"] == p and manifest["num-partitions"] == 3
        assert manifest["users"] == list(range(p, 30, 3))
        assert manifest["num-items"] == 400 and manifest["num-users"] == 30
        assert manifest["protocol"] == "paper" and manifest["seed"] == 0
        device = DeviceData(folder)
        assert device.num_train_rows == sum(
            len(prepared.train_positives(u)) for u in manifest["users"]
        )
        for u in manifest["users"]:
            assert np.array_equal(device.train_positives(u), prepared.train_positives(u))
            assert device.test_item[u] == prepared.test_item[u]
            assert np.array_equal(device.eval_negatives(0)[u], prepared.eval_negatives(0)[u])
        with pytest.raises(KeyError):
            device.train_positives((p + 1) % 3)  # another device's user
        seen += manifest["users"]
    assert sorted(seen) == list(range(30))
    shared = json.loads((tmp_path / "devices" / "export.json").read_text())
    assert shared["devices"] == ["device-0", "device-1", "device-2"]


@pytest.mark.parametrize(
    ("protocol", "keep", "sampler"),
    [
        ("strict", "tuned", "keyed-numpy"),
        ("paper", "tuned", "keyed-numpy"),
        ("strict", "positives", "keyed-numpy"),
        ("strict", "tuned", "counter"),
    ],
)
def test_exported_folders_give_the_shared_runs_metrics_exactly(
    tmp_path, monkeypatch, protocol, keep, sampler
):
    folders = export(tmp_path, 3, protocol=protocol)
    keys = {"keep-personal-rows": keep, "negative-sampler": sampler}
    federate(tmp_path / "shared", 3, protocol=protocol, **keys)
    # The device run starts from an empty cache: nothing may prepare the whole dataset.
    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path / "device-cache"))
    summary = federate(tmp_path / "device", 3, folders, protocol=protocol, **keys)
    assert rounds(tmp_path / "device") == rounds(tmp_path / "shared")
    assert summary["num_users"] == 30 and summary["num_items"] == 400
    assert not (tmp_path / "device-cache").exists()
    (run_dir,) = (tmp_path / "device" / "results").iterdir()
    config = json.loads((run_dir / "config.json").read_text())
    assert config["node_data"] == [f"device {f.name}" for f in folders]


def test_export_command_line(tmp_path: Path, capsys) -> None:
    argv = ["--dataset", "synthetic", "--synthetic-users", "20", "--synthetic-items", "100"]
    argv += ["--synthetic-mean-degree", "8", "--num-partitions", "2"]
    assert export_main([*argv, "--out", str(tmp_path / "out")]) == 0
    assert "20 users x 100 items -> 2 device folders" in capsys.readouterr().out
    assert DeviceData(tmp_path / "out" / "device-1").users.tolist() == list(range(1, 20, 2))


@pytest.mark.parametrize(
    ("other", "message"),
    [
        ({"synthetic-items": 300}, "differ \\(fingerprint"),  # another catalogue
        ({"synthetic-mean-degree": 10}, "differ \\(fingerprint"),  # same sizes, other rows
    ],
)
def test_nodes_with_different_data_are_refused(tmp_path, other, message) -> None:
    mine = export(tmp_path, 2)
    theirs = export(tmp_path, 2, "other", **other)
    with pytest.raises(FederationError, match=message):
        federate(tmp_path, 2, [mine[0], theirs[1]])


def test_data_that_does_not_fit_the_run_is_refused(tmp_path: Path) -> None:
    strict = export(tmp_path, 2, "strict")
    with pytest.raises(FederationError, match="cannot join this run: it holds synthetic under"):
        federate(tmp_path / "a", 2, strict, protocol="paper")
    paper = export(tmp_path, 2, "paper", protocol="paper", seed=0)
    with pytest.raises(FederationError, match="drawn with seed 0, the run's seed is 1"):
        federate(tmp_path / "b", 2, paper, protocol="paper", seed=1)
    # Under strict the seed draws no data: an export serves every seed.
    assert federate(tmp_path / "c", 2, strict, seed=1)["rounds"] == 3


def test_a_user_held_by_two_nodes_is_refused(tmp_path: Path) -> None:
    def claims_too_much(message, context):
        reply = client_app(message, context)
        if message.metadata.message_type == "query" and context.node_config["partition-id"] == 1:
            arrays = record_arrays(reply.content[ARRAYS])
            arrays["users"] = np.r_[arrays["users"], 0]  # user 0 lives on node 0
            reply.content[ARRAYS] = array_record(arrays)
        return reply

    with pytest.raises(FederationError, match=re.escape("both hold 1 users (e.g. [0])")):
        federate(tmp_path, 2, client=claims_too_much)


def test_a_folder_given_to_the_wrong_partition_is_refused(tmp_path: Path) -> None:
    folders = export(tmp_path, 2)
    run_config = {**SMALL, "results-dir": str(tmp_path / "results"), "node-wait-timeout": 0.1}
    grid = LocalGrid(client_app, run_config, 2, node_configs=[{"data-path": str(folders[1])}] * 2)
    with pytest.raises(FederationError, match="1 failed \\(ValueError: node config partition-id=0"):
        run_federation(grid, RunConfig.from_mapping(run_config))
