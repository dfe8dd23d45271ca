"""End to end through Flower's simulation engine: ``flwr run`` on MovieLens-100K.

Uses :mod:`fedrec_lab.launch`: a private local SuperLink (own FLWR_HOME and ports), two
rounds of the PFedRec paper preset on two SuperNodes, the run's final status and its
results files.
"""

from __future__ import annotations

import json

import pytest

from fedrec_lab.launch import PROJECT, merged_run_config, run

pytestmark = pytest.mark.slow


def test_flwr_run_trains_pfedrec_on_ml100k(real_data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path / "cache"))
    results = tmp_path / "results"
    config = merged_run_config(
        PROJECT / "conf" / "pfedrec-ml100k-paper.toml",
        [
            "num-server-rounds=2",
            f"data-dir='{real_data_dir}'",
            f"results-dir='{results}'",
            "run-name='e2e'",
        ],
    )
    status, output = run(config, nodes=2, stream=False, timeout=900)
    assert status == "finished:completed", output
    assert "[round 2/2]" in output, output  # progress is streamed
    assert "results written to" in output, output
    run_dir = results / "e2e"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["method"] == "pfedrec" and summary["protocol"] == "paper"
    assert summary["num_users"] == 943 and summary["num_items"] == 1682
    assert summary["num_nodes"] == 2
    # Two rounds of the reference setting reach ~0.48 test HR@10 (random ranking: 0.10).
    assert summary["test"]["hr@10"] > 0.3, summary
    assert (run_dir / "curves.png").stat().st_size > 1000
    assert len((run_dir / "rounds.csv").read_text().splitlines()) == 3


def test_a_failing_run_reports_failure_not_success(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path / "cache"))
    config = {"dataset": "ml-100k", "data-dir": str(tmp_path / "nowhere"), "num-server-rounds": 1}
    status, output = run(config, nodes=2, stream=False, timeout=600)
    assert status == "finished:failed", output
    assert "u.data not found" in output, output  # the error names the file and the fix


def test_preset_and_overrides_merge():
    config = merged_run_config(
        PROJECT / "conf" / "pfedrec-ml100k-paper.toml", ["num-server-rounds=3", "lr=0.5"]
    )
    assert config["method"] == "pfedrec" and config["protocol"] == "paper"
    assert config["num-server-rounds"] == 3 and config["lr"] == 0.5


def test_flwr_run_carries_shared_dense_parameters_sam_and_server_adam(tmp_path, monkeypatch):
    """FedRecGEL (NeuMF tower as shared-dense parameters, SAM, server Adam) through Ray."""
    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path / "cache"))
    results = tmp_path / "results"
    config = {
        "method": "fedrecgel",
        "dataset": "synthetic",
        "synthetic-users": 40,
        "synthetic-items": 300,
        "synthetic-mean-degree": 10,
        "protocol": "strict",
        "num-server-rounds": 2,
        "fraction-train": 0.5,
        "batch-size": 100000,
        "item-lr": 1.0,
        "item-lr-scaling": "none",
        "dense-lr": 1.0,
        "sam-rho-private": 0.01,
        "sam-rho-shared": 0.01,
        "server-optimizer": "adam",
        "server-lr": 0.01,
        "results-dir": str(results),
        "run-name": "gel",
    }
    status, output = run(config, nodes=2, stream=False, timeout=900)
    assert status == "finished:completed", output
    summary = json.loads((results / "gel" / "summary.json").read_text())
    assert summary["method"] == "fedrecgel" and summary["rounds"] == 2
    rows = (results / "gel" / "rounds.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert all(int(r.split(",")[header.index("train-users")]) == 20 for r in rows[1:])


def ray_and_local_rounds(tmp_path, config: dict, nodes: int, **options) -> tuple[list, list]:
    """The rounds (timings aside) of ``config`` through Ray (``fedrec_lab.launch.run`` with
    ``options``) and of the same run in-process on ``nodes`` nodes."""
    import csv

    from fedrec_flwr.client_app import app as client_app
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.server_app import run_federation
    from fedrec_lab.local_grid import LocalGrid

    ray = {**config, "results-dir": str(tmp_path / "ray")}
    status, output = run(ray, nodes=nodes, stream=False, timeout=900, **options)
    assert status == "finished:completed", output
    local = {**config, "results-dir": str(tmp_path / "local")}
    run_federation(LocalGrid(client_app, local, num_nodes=nodes), RunConfig.from_mapping(local))

    def rounds(folder: str) -> list[dict]:
        with open(tmp_path / folder / "run" / "rounds.csv") as lines:
            timing = ("seconds", "cpu-seconds")
            return [{k: v for k, v in r.items() if k not in timing} for r in csv.DictReader(lines)]

    return rounds("ray"), rounds("local")


def test_a_message_window_changes_nothing_but_the_sending(tmp_path, monkeypatch):
    """One SuperNode per user with 3 messages in flight at a time (``max-in-flight``) through
    Ray gives the rounds of the same run in-process, bit for bit."""
    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path / "cache"))
    config = {
        "method": "pfedrec",
        "dataset": "synthetic",
        "synthetic-users": 10,
        "synthetic-items": 120,
        "synthetic-mean-degree": 12,
        "protocol": "strict",
        "num-server-rounds": 2,
        "max-in-flight": 3,
        "checkpoint-every": 0,
        "run-name": "run",
    }
    ray, local = ray_and_local_rounds(tmp_path, config, nodes=10)
    assert ray == local
    summary = json.loads((tmp_path / "ray" / "run" / "summary.json").read_text())
    assert summary["num_nodes"] == 10


def test_a_fraction_per_round_through_ray_gives_the_rounds_of_the_same_run_in_process(
    tmp_path, monkeypatch
):
    """Rounds in which a fraction of the users trains (the nodes' personal-row stores then
    hold several segments, :mod:`fedrec_flwr.node.layered`) on two Ray workers, whose
    context.state may reach either worker, equal the same run in-process, bit for bit."""
    from fedrec_lab.launch import worker_entries

    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path / "cache"))
    config = {
        "method": "pfedrec",
        "dataset": "synthetic",
        "synthetic-users": 40,
        "synthetic-items": 120,
        "synthetic-mean-degree": 12,
        "protocol": "strict",
        "num-server-rounds": 4,
        "fraction-train": 0.3,
        "checkpoint-every": 0,
        "run-name": "run",
    }
    ray, local = ray_and_local_rounds(tmp_path, config, nodes=2, federation=worker_entries(2, 2))
    assert ray == local and len(local) == 4
