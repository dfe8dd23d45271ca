"""Checkpoint and resume (``checkpoint-every``, ``resume``) and node state on disk
(``state-dir``): a run killed in round 8 and resumed ends with the metrics of an
uninterrupted run, bit for bit; a restarted SuperNode continues with its private state; a
state or configuration that does not fit is refused with the reason."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fedrec_flwr import atomic
from fedrec_flwr.client_app import STATE_KEY
from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.node.state_store import NodeStateStore, StateMismatchError
from fedrec_flwr.results import TIMING_COLUMNS
from fedrec_flwr.resume import CheckpointError, differing_keys
from fedrec_flwr.server_app import run_federation
from fedrec_lab import launch
from fedrec_lab.local_grid import LocalGrid

SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 30,
    "synthetic-items": 400,
    "synthetic-mean-degree": 12,
    "num-server-rounds": 10,
    "batch-size": 32,
    "item-lr": 0.5,
    "checkpoint-every": 3,
}
METHODS = {
    "pfedrec": {},
    "fedncf": {},  # shared-dense parameters
    "fedrecgel": {  # server Adam state, SAM, 30 % of the users per round, eval every 2
        "sam-rho-private": 0.01,
        "sam-rho-shared": 0.01,
        "server-optimizer": "adam",
        "server-lr": 0.01,
        "fraction-train": 0.3,
        "eval-every": 2,
        "batch-size": 100000,
        "item-lr": 1.0,
        "item-lr-scaling": "none",
        "dense-lr": 1.0,
    },
    "fedrap": {"fedrap-distance": "bounded", "init-std": 0.1},  # persistent private rows
}


class Killed(BaseException):
    """The ServerApp's process dies (not an error reply: nothing catches it)."""


pytestmark = pytest.mark.usefixtures("private_cache")


def settings(folder: Path, **overrides) -> dict:
    return {**SMALL, "results-dir": str(folder), "run-name": "run", **overrides}


def run(run_config: dict, nodes: int = 3, app=client_app, state_dirs: Path | None = None):
    grid = LocalGrid(app, run_config, num_nodes=nodes)
    if state_dirs is not None:  # each device its own disk
        for context in grid.contexts.values():
            partition = context.node_config["partition-id"]
            context.node_config["state-dir"] = str(state_dirs / f"device-{partition}")
    return run_federation(grid, RunConfig.from_mapping(run_config))


def dies_in(server_round: int, partition: int = 1):
    """A ClientApp whose node ``partition`` kills the run when sent round's train message
    (the nodes before it have trained that round already)."""

    def app(message, context):
        if (
            message.metadata.message_type == "train"
            and int(message.content["config"]["server-round"]) == server_round
            and context.node_config["partition-id"] == partition
        ):
            raise Killed
        return client_app(message, context)

    return app


def restarts_in(server_round: int, partition: int = 1):
    """A ClientApp whose node ``partition`` loses ``context.state`` (its SuperNode restarts)
    just before round's train message."""

    def app(message, context):
        if (
            message.metadata.message_type == "train"
            and int(message.content["config"]["server-round"]) == server_round
            and context.node_config["partition-id"] == partition
        ):
            del context.state[STATE_KEY]
        return client_app(message, context)

    return app


def without_seconds(run_dir: Path) -> list[str]:
    """rounds.csv as bytes, less its timing columns (``seconds``, ``cpu-seconds``)."""
    lines = (run_dir / "rounds.csv").read_bytes().split(b"\r\n")
    header = lines[0].split(b",")
    skip = {header.index(name.encode()) for name in TIMING_COLUMNS}
    return [b",".join(f for i, f in enumerate(line.split(b",")) if i not in skip) for line in lines]


def summary_of(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in ("seconds", "seconds_per_round", "resumed_from_round"):
        summary.pop(key, None)
    return summary


def killed_then_resumed(tmp_path, kill_round=8, state_dirs=None, resume_app=client_app, **over):
    """Kill a run in ``kill_round``, resume it; its folder."""
    config = settings(tmp_path / "killed", **over)
    with pytest.raises(Killed):
        run(config, app=dies_in(kill_round), state_dirs=state_dirs)
    run_dir = tmp_path / "killed" / "run"
    assert (run_dir / "INCOMPLETE").exists() and not (run_dir / "summary.json").exists()
    resumed = run({**config, "resume": str(run_dir)}, app=resume_app, state_dirs=state_dirs)
    assert resumed["resumed_from_round"] == (kill_round - 1) // 3 * 3
    return run_dir


@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_run_killed_in_round_8_and_resumed_ends_as_an_uninterrupted_run(tmp_path, method):
    over = {"method": method, **METHODS[method]}
    run(settings(tmp_path / "full", **over))
    full = tmp_path / "full" / "run"
    run_dir = killed_then_resumed(tmp_path, **over)  # checkpoint of round 6, rounds 7-10 again
    assert without_seconds(run_dir) == without_seconds(full)  # bit for bit
    assert len(without_seconds(run_dir)) == 1 + 10 + 1  # header, 10 rounds, last newline
    assert summary_of(run_dir) == summary_of(full)
    assert (run_dir / "per-user.csv").read_bytes() == (full / "per-user.csv").read_bytes()
    assert not (run_dir / "INCOMPLETE").exists()
    assert not (run_dir / "checkpoint").exists()  # removed once the run completed


def test_a_resumed_run_keeps_the_per_user_metrics_of_a_best_round_before_its_checkpoint(
    tmp_path,
):
    """The best validation round lies before the checkpoint (round 6) and is not beaten
    after it: its per-user metrics come from the checkpoint, not from a round run again."""
    over = {"eval-users": 12, "seed": 0}  # a sample per round: the best round's users differ
    run(settings(tmp_path / "full", **over))
    full = tmp_path / "full" / "run"
    best = summary_of(full)["best_round"]
    assert best <= 6, f"this setting's best validation round is {best} now, pick another"
    run_dir = killed_then_resumed(tmp_path, **over)
    assert summary_of(run_dir) == summary_of(full)
    assert (run_dir / "per-user.csv").read_bytes() == (full / "per-user.csv").read_bytes()
    assert len((full / "per-user.csv").read_text().splitlines()) < 1 + 30  # a sample


def test_a_run_killed_before_its_first_checkpoint_starts_again(tmp_path):
    run(settings(tmp_path / "full"))
    run_dir = killed_then_resumed(tmp_path, kill_round=2)  # no checkpoint: from round 1
    assert without_seconds(run_dir) == without_seconds(tmp_path / "full" / "run")


def test_nodes_with_a_state_dir_resume_from_it_even_after_a_restart(tmp_path):
    """Deployment: every device keeps its state in its own state-dir; after the resume,
    node 0's SuperNode restarts before it trains again: it reloads the checkpoint's state."""
    over = {"method": "fedrap", **METHODS["fedrap"]}
    run(settings(tmp_path / "full", **over))
    devices = tmp_path / "devices"
    run_dir = killed_then_resumed(
        tmp_path, state_dirs=devices, resume_app=restarts_in(7, partition=0), **over
    )
    assert without_seconds(run_dir) == without_seconds(tmp_path / "full" / "run")
    (run_key,) = (devices / "device-0").iterdir()  # one run key, kept by the resume
    assert run_key.name.startswith("run-")
    files = sorted(p.relative_to(run_key).as_posix() for p in run_key.rglob("*.npz"))
    # the latest state; the last checkpoint's, and the one committed before it (kept until
    # the next checkpoint: the server might not have committed round 9)
    assert files == ["partition-0.npz", "round-6/partition-0.npz", "round-9/partition-0.npz"]


@pytest.mark.parametrize("method", ["pfedrec", "fedrap"])
def test_a_restarted_supernode_continues_with_its_private_state(tmp_path, method):
    over = {"method": method, **METHODS[method], "checkpoint-every": 0}
    run(settings(tmp_path / "full", **over))
    full = without_seconds(tmp_path / "full" / "run")
    run(settings(tmp_path / "kept", **over), app=restarts_in(5), state_dirs=tmp_path / "dev")
    assert without_seconds(tmp_path / "kept" / "run") == full
    # Without a state-dir the restarted node starts from scratch: other metrics.
    run(settings(tmp_path / "lost", **over), app=restarts_in(5))
    assert without_seconds(tmp_path / "lost" / "run") != full


# --- what is refused ---------------------------------------------------------------------------


@pytest.fixture
def killed(tmp_path) -> tuple[dict, Path]:
    """A run killed in round 8, with its checkpoint of round 6."""
    config = settings(tmp_path / "killed")
    with pytest.raises(Killed):
        run(config, app=dies_in(8))
    return config, tmp_path / "killed" / "run"


def test_resume_refuses_another_configuration_naming_the_keys(killed):
    config, run_dir = killed
    before = (run_dir / "rounds.csv").read_bytes()
    changed = {**config, "resume": str(run_dir), "lr": 0.2, "seed": 3, "round-timeout": 99.0}
    with pytest.raises(CheckpointError, match=r"differing keys.*lr: 0.1 -> 0.2; seed: 0 -> 3"):
        run(changed)
    assert (run_dir / "rounds.csv").read_bytes() == before  # nothing touched
    assert (run_dir / "INCOMPLETE").exists()


def test_resume_refuses_a_finished_run_and_another_number_of_nodes(tmp_path, killed):
    config, run_dir = killed
    with pytest.raises(CheckpointError, match="states of 3 partitions, 2 connected"):
        run({**config, "resume": str(run_dir)}, nodes=2)
    assert (run_dir / "INCOMPLETE").exists()  # and says why
    assert "states of 3 partitions" in (run_dir / "INCOMPLETE").read_text()
    run({**config, "resume": str(run_dir)})
    with pytest.raises(CheckpointError, match="that run finished"):
        run({**config, "resume": str(run_dir)})


def test_a_node_state_of_another_partition_or_a_later_round_is_refused(killed):
    config, run_dir = killed
    states = run_dir / "checkpoint" / "round-6"
    mine = states / "partition-0.npz"
    saved = mine.read_bytes()
    shutil.copy(states / "partition-1.npz", mine)
    with pytest.raises(CheckpointError, match=r"partition 0: .*written by partition 1 of 3"):
        run({**config, "resume": str(run_dir)})
    mine.write_bytes(saved)
    tag, arrays = atomic.load_tagged(mine)
    atomic.savez_tagged(mine, {**tag, "after-round": 7}, arrays)
    with pytest.raises(CheckpointError, match="written after round 7, the checkpoint is of"):
        run({**config, "resume": str(run_dir)})


# --- the store itself --------------------------------------------------------------------------


def store(folder: Path, session="s1", restore_round=0, **config) -> NodeStateStore:
    run_config = RunConfig.from_mapping({**SMALL, **config})
    runtime = NodeRuntime(run_config, prepare(run_config), 1, 3)
    message = {"run-key": "run-abc", "session": session, "restore-round": restore_round}
    return NodeStateStore(folder, runtime, message, keeps_latest=True)


def test_a_state_written_under_another_configuration_or_too_late_is_refused(tmp_path):
    written = store(tmp_path)
    state = written.runtime.initial_state()
    written.save_latest(state, after_round=4)
    assert store(tmp_path).load_latest(max_round=4) is not None
    with pytest.raises(StateMismatchError, match="newer than round 3"):
        store(tmp_path).load_latest(max_round=3)
    with pytest.raises(StateMismatchError, match=r"another run configuration \(lr: 0.1 -> 0.3"):
        store(tmp_path, lr=0.3).load_latest(max_round=9)
    assert store(tmp_path, **{"round-timeout": 5.0}).load_latest(max_round=9) is not None
    # A latest state of an earlier start of the run is not this start's: the checkpoint's is.
    assert store(tmp_path, session="s2").load_latest(max_round=9) is None
    with pytest.raises(StateMismatchError, match="no node state of round 3"):
        store(tmp_path, session="s2", restore_round=3).recover(max_round=5)


def test_state_files_are_replaced_atomically(tmp_path, monkeypatch):
    kept = store(tmp_path / "states")
    state = kept.runtime.initial_state()
    kept.save_latest(state, after_round=1)
    before = kept.latest_path().read_bytes()

    def dies(*args, **kwargs):
        raise Killed

    monkeypatch.setattr(np, "savez", dies)
    with pytest.raises(Killed):
        kept.save_latest(state, after_round=2)
    assert kept.latest_path().read_bytes() == before
    assert [p.name for p in (tmp_path / "states").iterdir()] == ["partition-1.npz"]  # no tmp


def test_checkpoint_every_is_checked():
    with pytest.raises(ConfigError, match="checkpoint-every=-1 must be >= 0"):
        RunConfig.from_mapping({"checkpoint-every": -1})


def test_fedrec_resume_takes_the_run_configuration_and_its_number_of_nodes(killed, capsys):
    _, run_dir = killed
    resumed, nodes = launch._resumed(str(run_dir), {"round-timeout": 50.0}, None)
    assert nodes == 3 and resumed["resume"] == str(run_dir.resolve())
    assert resumed["lr"] == 0.1 and resumed["round-timeout"] == 50.0
    assert launch.main(["--resume", str(run_dir), "lr=0.2"]) == 2  # nothing started
    assert "lr: 0.1 -> 0.2" in capsys.readouterr().err
    assert launch.main(["--resume", str(run_dir), "--nodes", "2"]) == 2
    assert "its checkpoint needs --nodes 3" in capsys.readouterr().err


# --- through flwr run ----------------------------------------------------------------------


@pytest.mark.slow
def test_fedrec_resume_continues_a_run_stopped_with_ctrl_c(tmp_path):
    """``fedrec`` (flwr run, Ray, 2 SuperNodes) stopped by SIGINT after round 5, then
    ``fedrec --resume``: the metrics of an uninterrupted in-process run, bit for bit."""
    import os
    import signal
    import subprocess
    import sys
    import time

    over = {
        "synthetic-users": 40,
        "synthetic-items": 300,
        "synthetic-mean-degree": 10,
        "num-server-rounds": 100,  # ~0.4 s each: SIGINT stops it long before the end
        "checkpoint-every": 2,
    }
    run(settings(tmp_path / "full", **over), nodes=2)
    results = tmp_path / "flwr"
    script = Path(sys.executable).with_name("fedrec")
    fedrec = [str(script)] if script.exists() else [sys.executable, "-m", "fedrec_lab.launch"]
    items = [f"{k}={json.dumps(v)}" for k, v in settings(results, **over).items()]
    # The launcher runs outside the project folder: FEDREC_PROJECT names it.
    env = {**os.environ, "FEDREC_CACHE_DIR": str(tmp_path / "cache")}
    env["FEDREC_PROJECT"] = str(launch.PROJECT)
    launcher = subprocess.Popen(
        [*fedrec, *items, "--nodes", "2"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    rounds_csv = results / "run" / "rounds.csv"
    deadline = time.monotonic() + 480
    while not (rounds_csv.exists() and len(rounds_csv.read_text().splitlines()) > 5):
        assert launcher.poll() is None and time.monotonic() < deadline, launcher.stderr.read()
        time.sleep(0.2)
    launcher.send_signal(signal.SIGINT)
    assert launcher.wait(timeout=180) == 128 + signal.SIGINT, launcher.stderr.read()
    assert (results / "run" / "INCOMPLETE").exists()
    assert (results / "run" / "checkpoint" / "latest.json").exists()

    resumed = subprocess.run(
        [*fedrec, "--resume", str(results / "run")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    summary = json.loads((results / "run" / "summary.json").read_text())
    assert summary["resumed_from_round"] >= 4
    assert summary["num_nodes"] == 2
    assert without_seconds(results / "run") == without_seconds(tmp_path / "full" / "run")


def test_a_key_declared_after_the_checkpoint_counts_only_away_from_its_default():
    """A checkpoint written before a key existed lacks it: given at its default, the run
    computes what it computed, so it may resume; at any other value it may not."""
    given = {k: v for k, v in RunConfig.from_mapping({}).to_mapping().items()}
    stored = {k: v for k, v in given.items() if k != "plgc-decorrelation"}
    assert differing_keys(stored, given) == []
    changed = {**given, "plgc-decorrelation": 0.5}
    assert differing_keys(stored, changed) == ["plgc-decorrelation: '(absent)' -> 0.5"]
    assert differing_keys(given, stored) == ["plgc-decorrelation: 0.0 -> '(absent)'"]
