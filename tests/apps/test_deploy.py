"""``fedrec deploy-local N``: a real local deployment, each SuperNode reading only its own
folder; everything it started is stopped; ``--secure`` refuses an unregistered SuperNode.

The ``slow`` tests start a SuperLink and SuperNodes (each message runs in a fresh process:
tens of seconds per round on two cores). Which files each process opens is recorded by an
audit hook that a ``sitecustomize`` module on ``PYTHONPATH`` installs in every Python
process the launcher starts (SuperLink, SuperNodes, and the app processes they start).
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flwr.app import RecordDict

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.results import TIMING_COLUMNS
from fedrec_flwr.server_app import run_federation
from fedrec_lab import processes
from fedrec_lab.export import export_devices
from fedrec_lab.launch import COMPLETED, PROJECT, follow
from fedrec_lab.local_grid import LocalGrid
from fedrec_lab.secure import write_node_key
from fedrec_lab.supernodes import LocalDeployment

SYNTHETIC = {
    "dataset": "synthetic",
    "synthetic-users": 45,
    "synthetic-items": 300,
    "synthetic-mean-degree": 10,
}
SITECUSTOMIZE = """
import os, sys
_root, _logs = os.environ.get("FEDREC_TEST_ROOT"), os.environ.get("FEDREC_TEST_OPEN_LOG")
if _root and _logs:
    _out = open(os.path.join(_logs, f"{os.getpid()}.log"), "a", buffering=1)
    _who = os.environ.get("FEDREC_CACHE_DIR", "launcher")

    def _hook(event, args):
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.abspath(os.fsdecode(args[0]))
            if path.startswith(_root):
                _out.write(_who + "\\t" + path + "\\n")

    sys.addaudithook(_hook)
"""
linux = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


def deploy_command(nodes: int, *items: str) -> list[str]:
    args = [f"{key}={value!r}" for key, value in SYNTHETIC.items()]
    deploy = [sys.executable, "-m", "fedrec_lab.deploy", "--project", str(PROJECT)]
    return [*deploy, str(nodes), *args, *items]


def audited_env(tmp_path: Path, root: Path) -> dict[str, str]:
    site, logs = tmp_path / "site", tmp_path / "opened"
    site.mkdir()
    logs.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return {
        **os.environ,
        "PYTHONPATH": path,
        "FEDREC_TEST_ROOT": str(root),
        "FEDREC_TEST_OPEN_LOG": str(logs),
    }


def opened(tmp_path: Path) -> list[tuple[str, str]]:
    """(who, path) of every file opened under the root: who is the process's cache dir."""
    records = []
    for log in (tmp_path / "opened").iterdir():
        records += [tuple(line.split("\t")) for line in log.read_text().splitlines()]
    return records


def left_running(folder: Path) -> list[int]:
    """PIDs of living processes whose command line or folder names ``folder``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and processes.start_time(int(entry.name)) is not None:
            pid = int(entry.name)
            where = f"{processes.command_line(pid)} {processes.working_dir(pid)}"
            if str(folder) in where:
                found.append(pid)
    return found


@linux
@pytest.mark.slow
def test_three_supernodes_each_read_only_their_own_folder(tmp_path: Path) -> None:
    work, results = tmp_path / "work", tmp_path / "results"
    done = subprocess.run(
        deploy_command(3, f"results-dir='{results}'", "run-name='e2e'", "--keep", str(work)),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=audited_env(tmp_path, work),
        timeout=900,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "run status: finished:completed" in done.stdout
    assert re.search(r"^\s+3\s+\d", done.stdout, re.MULTILINE), out  # the rounds table
    assert "best validation round" in done.stdout
    summary = json.loads((results / "e2e" / "summary.json").read_text())
    assert summary["num_nodes"] == 3 and summary["rounds"] == 3
    config = json.loads((results / "e2e" / "config.json").read_text())
    assert config["node_data"] == ["device device-0", "device device-1", "device device-2"]

    records = opened(tmp_path)
    for i in range(3):
        node = str(work / f"node-{i}" / "cache")
        paths = [path for who, path in records if who == node]
        data = [p for p in paths if p.startswith(str(work / "devices"))]
        assert str(work / "devices" / f"device-{i}" / "manifest.json") in data, paths
        assert all(p.startswith(str(work / "devices" / f"device-{i}") + "/") for p in data), data
        assert not (work / f"node-{i}" / "cache" / "prepared").exists()  # no shared split
    server = str(work / "server-cache")
    assert [p for who, p in records if who == server and "/devices/" in p] == []
    assert not (work / "server-cache" / "prepared").exists()

    stopped = re.search(r"their processes: PIDs \[([\d, ]+)\]", done.stderr)
    assert stopped, done.stderr
    pids = [int(pid) for pid in stopped.group(1).split(", ")]
    assert len(pids) >= 1 + 3  # the SuperLink, the SuperNodes (and what still ran of theirs)
    assert left_running(work) == []


@linux
@pytest.mark.slow
def test_ctrl_c_stops_the_run_and_every_process_started(tmp_path: Path) -> None:
    work = tmp_path / "work"
    command = deploy_command(2, "num-server-rounds=1000", f"results-dir='{tmp_path}'")
    launcher = subprocess.Popen(
        [*command, "--keep", str(work)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    deadline = time.monotonic() + 600
    assert launcher.stdout is not None
    for line in launcher.stdout:
        lines.append(line)
        if "[round 1/" in line:
            break
        assert time.monotonic() < deadline, "".join(lines)
    launcher.send_signal(signal.SIGINT)
    rest, _ = launcher.communicate(timeout=300)
    out = "".join(lines) + rest
    assert launcher.returncode == 128 + signal.SIGINT, out
    assert re.search(r"interrupted by SIGINT; run \d+: finished:stopped", out), out
    assert "stopped the SuperNodes, the SuperLink and their processes" in out
    assert left_running(work) == []


def test_an_unknown_key_is_refused_before_anything_starts(tmp_path: Path) -> None:
    done = subprocess.run(
        deploy_command(2, "num-server-round=3"),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "unknown run-config key 'num-server-round'" in done.stderr
    assert "did you mean 'num-server-rounds'" in done.stderr
    assert "SuperLink" not in done.stderr and list(tmp_path.iterdir()) == []


def test_a_failure_while_starting_stops_the_superlink(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError), LocalDeployment(tmp_path / "work") as deployment:
        link = deployment.link
        assert link is not None and processes.start_time(link.process.pid) is not None
        deployment.add_supernode(tmp_path / "no-such-device")
    assert link.process.poll() is not None
    assert left_running(tmp_path / "work") == []


@linux
@pytest.mark.slow
def test_secure_mode_refuses_an_unregistered_supernode_and_trains(tmp_path: Path) -> None:
    config = RunConfig.from_mapping(SYNTHETIC)
    devices = export_devices(config, 2, tmp_path / "devices")
    with LocalDeployment(tmp_path / "work", secure=True) as deployment:
        for device in devices:
            deployment.add_supernode(device)  # keys registered with `flwr supernode register`
        deployment.wait_online(2)
        intruder = deployment.add_supernode(
            devices[0],
            key=write_node_key(tmp_path / "keys", "intruder"),  # never registered
        )
        assert intruder.wait(timeout=120) != 0
        log = (tmp_path / "work" / "node-2" / "supernode.log").read_text()
        assert "Failed to activate SuperNode" in log, log
        listed = json.loads(deployment.flwr("supernode", "ls", "deploy"))["nodes"]
        assert len(listed) == 2
        run_config = {
            **SYNTHETIC,
            "num-server-rounds": 1,
            "results-dir": str(tmp_path / "results"),
            "run-name": "secure",
        }
        run_id = deployment.submit(run_config, PROJECT)
        status, _ = follow(deployment.link, run_id, False, 600)
    assert status == COMPLETED
    assert json.loads((tmp_path / "results" / "secure" / "summary.json").read_text())["rounds"] == 1
    assert left_running(tmp_path / "work") == []


@linux
@pytest.mark.slow
def test_secure_aggregation_signs_with_the_supernodes_authentication_keys(tmp_path: Path) -> None:
    """Three authenticated SuperNodes: each signs its secure-aggregation key with its
    authentication key, and checks the others' against the roster deploy-local writes."""
    config = RunConfig.from_mapping(SYNTHETIC)
    devices = export_devices(config, 3, tmp_path / "devices")
    with LocalDeployment(tmp_path / "work", secure=True) as deployment:
        for device in devices:
            deployment.add_supernode(device)
        deployment.wait_online(3)
        assert sorted(p.name for p in (tmp_path / "work" / "roster").iterdir()) == [
            "0.pub",
            "1.pub",
            "2.pub",
        ]
        run_config = {
            **SYNTHETIC,
            "num-server-rounds": 2,
            "secure-aggregation": True,
            "results-dir": str(tmp_path / "results"),
            "run-name": "secagg",
        }
        run_id = deployment.submit(run_config, PROJECT)
        status, _ = follow(deployment.link, run_id, False, 600)
    assert status == COMPLETED
    summary = json.loads((tmp_path / "results" / "secagg" / "summary.json").read_text())
    assert summary["rounds"] == 2 and summary["void_rounds"] == []
    assert left_running(tmp_path / "work") == []


def _sent_evaluate_reply(log: Path) -> bool:
    """Whether the SuperNode's log shows an evaluate reply sent (round 1 is over for it)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    at = text.find("Sending: evaluate message")
    return at >= 0 and "Sent successfully" in text[at:]


def rounds_without_seconds(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "rounds.csv") as f:
        return [
            {k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in csv.DictReader(f)
        ]


def in_process(tmp_path: Path, run_config: dict, devices: list[Path], fails=(), restart=0):
    """The run in-process from the same folders; node 0 fails the (kind, round) messages in
    ``fails``; with ``restart`` its state is lost before that round's train (no state-dir)."""

    def node(message, context):
        server_round = int(message.content["config"].get("server-round", 0))
        if context.node_config["partition-id"] == 0:
            if (message.metadata.message_type, server_round) in fails:
                raise RuntimeError("SuperNode killed")
            if restart and message.metadata.message_type == "train" and server_round == restart:
                context.state = RecordDict()
        return client_app(message, context)

    config = {**run_config, "results-dir": str(tmp_path)}
    paths = [{"data-path": str(device)} for device in devices]
    run_federation(LocalGrid(node, config, 2, node_configs=paths), RunConfig.from_mapping(config))
    return rounds_without_seconds(tmp_path / "run")


@linux
@pytest.mark.slow
def test_a_supernode_killed_between_rounds_keeps_its_private_state(tmp_path: Path) -> None:
    """SuperNode 0 is killed (SIGKILL) once it has answered round 1, and restarted: its
    ``context.state`` is gone, its state-dir holds the state (fedrec_flwr/node/state_store.py).
    Secure mode: the restarted SuperNode signs with its registered key, so it is the same
    node to the SuperLink, which lets it in once it has marked it offline; the messages sent
    to it meanwhile fail if the server polls for their replies in that window (it may not).
    The run then ends exactly as an in-process run in which node 0 fails those same messages
    and keeps its state, and not as one where it loses it."""
    devices = export_devices(RunConfig.from_mapping(SYNTHETIC), 2, tmp_path / "devices")
    run_config = {**SYNTHETIC, "num-server-rounds": 5, "run-name": "run"}
    deployed = {**run_config, "results-dir": str(tmp_path / "deployed")}
    with LocalDeployment(tmp_path / "work", secure=True) as deployment:
        for device in devices:
            deployment.add_supernode(device)
        deployment.wait_online(2)
        run_id = deployment.submit(deployed, PROJECT)
        log = tmp_path / "work" / "node-0" / "supernode.log"
        deadline = time.monotonic() + 600
        while not _sent_evaluate_reply(log):
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        deployment.restart_supernode(0)
        status, _ = follow(deployment.link, run_id, False, 900)
    assert status == COMPLETED
    ids = re.findall(r"SuperNode ID: (\d+)", log.read_text())
    assert len(ids) == 2 and ids[0] == ids[1], log.read_text()  # the same node, restarted
    assert list((tmp_path / "work" / "node-0" / "state").rglob("partition-0.npz"))
    kept = rounds_without_seconds(tmp_path / "deployed" / "run")
    fails = {
        (kind, int(row["round"]))
        for row in kept
        for kind, column in (("train", "train-failures"), ("evaluate", "eval-failures"))
        if row[column] != "0"
    }
    assert not any(r == 5 for _, r in fails), kept  # back by round 5 at the latest
    assert kept == in_process(tmp_path / "kept", run_config, devices, fails)
    restart = max([r for kind, r in fails if kind == "train"], default=1) + 1
    assert kept != in_process(tmp_path / "lost", run_config, devices, fails, restart)
