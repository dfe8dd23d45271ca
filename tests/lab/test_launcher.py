"""``fedrec``, the command line: keys checked before submitting, a real exit status, Ctrl-C
stops the run and every process it started, a SuperLink on Flower's default port is named.

The ``slow`` tests start a real private SuperLink through the entry point (no dataset
needed: a missing data-dir, or the synthetic dataset).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest

from fedrec_lab import processes
from fedrec_lab.launch import (
    PROJECT,
    ConfigError,
    check_run_config,
    default_superlink_report,
    merged_run_config,
    unknown_key_message,
)


def fedrec() -> list[str]:
    """``fedrec run`` through the console script of this environment (else the module)."""
    script = Path(sys.executable).with_name("fedrec")
    if script.exists():
        return [str(script), "run"]
    return [sys.executable, "-m", "fedrec_lab.launch"]


def outside_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a launcher started outside the project folder: it is named."""
    return {
        **os.environ,
        "FEDREC_CACHE_DIR": str(tmp_path / "cache"),
        "FEDREC_PROJECT": str(PROJECT),
    }


def test_the_console_script_is_declared() -> None:
    pyproject = tomllib.loads((PROJECT / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["fedrec"] == "fedrec_lab.cli:main"


# --- run configuration checked before submitting ---------------------------------------------


def test_an_unknown_key_is_named_with_the_closest_known_key() -> None:
    with pytest.raises(ConfigError) as error:
        check_run_config({"num-server-round": 3})
    message = str(error.value)
    assert "unknown run-config key 'num-server-round' (did you mean 'num-server-rounds'?)" in (
        message
    )
    assert str(PROJECT / "pyproject.toml") in message


def test_unknown_key_message() -> None:
    known = ["seed", "data-dir", "lr"]
    assert unknown_key_message({"seed": 1, "lr": 2}, known) is None
    assert unknown_key_message({"datadir": "x"}, known) == (
        "unknown run-config key 'datadir' (did you mean 'data-dir'?)"
    )
    assert unknown_key_message({"zzz": 1}, known) == "unknown run-config key 'zzz'"


def test_wrong_types_and_values_are_refused_before_submitting() -> None:
    with pytest.raises(ConfigError, match="'lr' must be of type float"):
        check_run_config({"lr": "fast"})
    with pytest.raises(ConfigError, match="batch-size=0 must be > 0"):
        check_run_config({"batch-size": 0})
    check_run_config({"lr": 0.5, "dataset": "synthetic"})


def test_an_override_is_read_as_its_keys_type() -> None:
    """A string key takes the word as the shell leaves it (no TOML quoting needed), or a TOML
    literal; numbers and booleans as written."""
    assert merged_run_config(None, ["dataset=synthetic", "seed=2"]) == {
        "dataset": "synthetic",
        "seed": 2,
    }
    assert merged_run_config(None, ["dataset='synthetic'", "lr=1", "run-name=2024"]) == {
        "dataset": "synthetic",
        "lr": 1.0,
        "run-name": "2024",
    }
    assert merged_run_config(None, ["data-file=my logs/x.csv"])["data-file"] == "my logs/x.csv"
    with pytest.raises(ConfigError, match="not key=value"):
        merged_run_config(None, ["seed"])
    with pytest.raises(ConfigError, match=r"seed='one': seed takes an integer, e.g\. seed=0"):
        merged_run_config(None, ["seed=one"])


def test_settings_may_stand_after_the_options() -> None:
    """``fedrec run PRESET seed=1 --nodes 4 num-server-rounds=2``: a setting typed after an
    option is read as one, as ``fedrec tune`` and ``fedrec deploy-local`` read them."""
    from fedrec_lab.launch.command import check_arguments

    preset = "conf/fedrap-plgc-ml100k-strict.toml"
    config = check_arguments([preset, "seed=1", "--nodes", "4", "num-server-rounds=2"])
    assert config["seed"] == 1 and config["num-server-rounds"] == 2


def test_the_entry_point_names_an_unknown_key_and_starts_nothing(tmp_path: Path) -> None:
    done = subprocess.run(
        [*fedrec(), "num-server-round=3"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=outside_env(tmp_path),
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "unknown run-config key 'num-server-round'" in done.stderr
    assert "did you mean 'num-server-rounds'?" in done.stderr
    assert "SuperLink PID" not in done.stderr  # refused before starting anything


# --- processes by PID ------------------------------------------------------------------------

linux = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux /proc")


@linux
def test_listening_pids_names_the_owner() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert processes.listening_pids(port) == [os.getpid()]
    assert processes.listening_pids(port) == []


@linux
def test_a_superlink_on_the_default_port_is_named_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FEDREC_DATA_DIR", "/elsewhere")  # /proc shows the initial environment
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        report = default_superlink_report(port)
    assert report is not None
    assert f"127.0.0.1:{port}" in report
    assert f"PID {os.getpid()}: {processes.command_line(os.getpid())}" in report
    assert "yours is /elsewhere" in report  # the environment its runs would see differs
    assert "flwr stop <run-id>" in report and "kill <PID>" in report
    assert "pkill" not in report
    assert default_superlink_report(port) is None  # nothing listens any more


@linux
def test_the_note_on_a_default_port_superlink_is_two_lines_said_once(tmp_path: Path) -> None:
    from fedrec_lab.launch.default_port import default_superlink_note

    noted = tmp_path / "noted"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        note = default_superlink_note(port, noted)
        assert note is not None and note.count("\n") == 1  # two lines
        assert f"PID {os.getpid()}" in note and "--which-superlink" in note
        assert default_superlink_note(port, noted) is None  # said once for this SuperLink
    assert default_superlink_note(port, noted) is None  # none listens


def test_stop_ends_a_process_tree_and_never_a_reused_pid() -> None:
    parent = subprocess.Popen(["bash", "-c", "sleep 300 & sleep 300 & wait"])
    deadline = time.monotonic() + 30
    while len(processes.descendants(parent.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    tree = [(parent.pid, processes.start_time(parent.pid)), *processes.descendants(parent.pid)]
    assert len(tree) == 3
    stranger = (tree[1][0], tree[1][1] + 1)  # same PID, other start time: another process
    assert not processes.alive(stranger)
    assert processes.stop([stranger]) == []
    assert processes.alive(tree[1])
    assert sorted(processes.stop(tree, grace=5.0)) == sorted(pid for pid, _ in tree)
    parent.wait(timeout=10)
    assert not any(processes.alive(p) for p in tree)


# --- end to end through the entry point (real SuperLink) -------------------------------------


def started_pids(stderr: str) -> tuple[int, Path, list[int]]:
    """(SuperLink PID, its FLWR_HOME, the PIDs the launcher says it stopped)."""
    found = re.search(r"SuperLink PID (\d+) on \S+ \(FLWR_HOME (.+)\)", stderr)
    assert found, stderr
    stopped = re.search(r"processes it started: PIDs \[([\d, ]*)\]", stderr)
    assert stopped, stderr
    pids = [int(p) for p in stopped.group(1).split(",") if p.strip()]
    return int(found.group(1)), Path(found.group(2)), pids


def processes_with_home(home: Path) -> list[int]:
    """Living processes whose environment has ``FLWR_HOME=home`` (what the launcher started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            env = processes.environment(int(entry.name)) or {}
            if env.get("FLWR_HOME") == str(home) and processes.start_time(int(entry.name)):
                found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_missing_data_exits_2_through_the_entry_point_before_anything_starts(
    tmp_path: Path,
) -> None:
    """The data is checked before the SuperLink starts: the console script says what is
    missing and where, exits 2, and starts no SuperLink and no run folder."""
    env = outside_env(tmp_path)
    done = subprocess.run(
        [
            *fedrec(),
            "dataset=ml-100k",
            f"data-dir={tmp_path / 'nowhere'}",
            "num-server-rounds=1",
            f"results-dir={tmp_path / 'results'}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "u.data not found" in done.stderr and "run status" not in done.stdout
    assert "SuperLink PID" not in done.stderr, done.stderr
    assert not (tmp_path / "results").exists()


def test_a_run_that_fails_in_flower_exits_1_and_says_its_status(monkeypatch, capsys) -> None:
    """A run that started and failed (its ServerApp raised: ``finished:failed``, see
    tests/apps/test_flower_simulation.py) ends ``fedrec run`` with exit status 1."""
    from fedrec_lab.launch import command
    from fedrec_lab.launch.runs import Outcome

    monkeypatch.setattr(command, "launch", lambda *a, **k: Outcome("finished:failed"))
    assert command.main(["num-server-rounds=1"]) == 1
    assert "run status: finished:failed" in capsys.readouterr().out


@linux
@pytest.mark.slow
def test_sigint_stops_the_run_the_superlink_and_every_process_it_started(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    command = [
        *fedrec(),
        "dataset='synthetic'",
        "synthetic-users=40",
        "synthetic-items=300",
        "synthetic-mean-degree=10",
        "num-server-rounds=100000",
        f"results-dir='{results}'",
        "run-name='long'",
    ]
    env = outside_env(tmp_path)
    launcher = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout: list[str] = []
    stderr: list[str] = []
    readers = [
        threading.Thread(target=lambda: stdout.extend(launcher.stdout), daemon=True),
        threading.Thread(target=lambda: stderr.extend(launcher.stderr), daemon=True),
    ]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + 480
    while not any("[round 2/" in line for line in stdout):
        assert launcher.poll() is None, "".join(stdout + stderr)
        assert time.monotonic() < deadline, "".join(stdout + stderr)
        time.sleep(0.5)
    launcher.send_signal(signal.SIGINT)
    assert launcher.wait(timeout=180) == 128 + signal.SIGINT
    for reader in readers:
        reader.join(timeout=10)
    out, err = "".join(stdout), "".join(stderr)
    run_id = re.search(r"run (\d+) submitted", err)
    assert run_id, err
    assert f"interrupted by SIGINT; run {run_id.group(1)}: finished:stopped" in err, err
    superlink, home, stopped = started_pids(err)
    assert superlink in stopped and len(stopped) > 1  # and what it started (Ray, ...)
    assert not any(processes.start_time(pid) for pid in stopped)
    assert processes_with_home(home) == []
    assert not home.exists()
    assert (results / "long" / "INCOMPLETE").exists()  # the stopped run is marked
    assert not (results / "long" / "summary.json").exists()
    assert "run status" not in out


def test_the_superlink_starts_from_a_virtual_environment_that_was_not_activated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``.venv/bin/python -m fedrec_flwr ...`` with the venv's scripts off ``PATH``: the
    SuperLink starts Flower's ``flower-superexec`` by name, so it must find this
    environment's (it exited with code 3 before ``with_tools_on_path``)."""
    from fedrec_lab.launch import local_superlink, with_tools_on_path

    scripts = str(Path(sys.executable).parent)
    outside = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != scripts]
    monkeypatch.setenv("PATH", os.pathsep.join(outside or ["/usr/bin", "/bin"]))
    env = with_tools_on_path(dict(os.environ))
    assert env["PATH"].split(os.pathsep)[0] == scripts
    assert with_tools_on_path(env) == env  # once
    with local_superlink() as link:
        assert link.process.poll() is None  # healthy, still running


# --- --workers -------------------------------------------------------------------------------


def test_worker_entries_start_that_many_actors_even_above_the_cores() -> None:
    from fedrec_lab.launch import worker_entries

    assert worker_entries(1, cores=2) == ["client-resources-num-cpus=2"]
    assert worker_entries(2, cores=2) == ["client-resources-num-cpus=1"]
    assert worker_entries(3, cores=16) == ["client-resources-num-cpus=5"]
    assert worker_entries(4, cores=2) == ["client-resources-num-cpus=1", "init-args-num-cpus=4"]
    with pytest.raises(ConfigError, match="at least 1"):
        worker_entries(0, cores=2)


def test_workers_option_reaches_the_federation_config(monkeypatch, capsys) -> None:
    from fedrec_lab import launch
    from fedrec_lab.launch import command, ray_cluster

    seen = {}

    def fake_launch(config, nodes, federation, **kwargs):
        seen.update(nodes=nodes, federation=list(federation))
        return launch.Outcome(launch.COMPLETED)

    monkeypatch.setattr(command, "launch", fake_launch)
    monkeypatch.setattr(command, "default_superlink_report", lambda: None)
    monkeypatch.setattr(ray_cluster.os, "cpu_count", lambda: 2)
    argv = ["--nodes", "7", "--workers", "4", "--federation", "client-resources-num-gpus=0.5"]
    assert launch.main(argv) == 0
    assert seen == {
        "nodes": 7,
        "federation": [
            "client-resources-num-cpus=1",
            "init-args-num-cpus=4",
            "client-resources-num-gpus=0.5",
        ],
    }
    seen.clear()
    assert launch.main(["--workers", "2", "--ray-address", "10.0.0.5:6379"]) == 2
    assert not seen and "--workers sizes a new local Ray instance" in capsys.readouterr().err


# --- data that cannot be had: refused before anything starts ---------------------------------


def unreachable_source(monkeypatch, tmp_path: Path, url: str) -> None:
    """ML-100K from ``url``, no data folder, an empty cache, the current folder ``tmp_path``;
    starting a SuperLink fails the test."""
    from fedrec_flwr.data import download, registry
    from fedrec_lab.launch import runs

    source = dataclasses.replace(registry.SOURCES["ml-100k"], url=url)
    monkeypatch.setitem(download.DATASETS, "ml-100k", source)
    monkeypatch.delenv("FEDREC_DATA_DIR", raising=False)
    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FEDREC_PROJECT", str(PROJECT))
    monkeypatch.chdir(tmp_path)

    def no_superlink(*args, **kwargs):
        raise AssertionError("a SuperLink was started for data that cannot be had")

    monkeypatch.setattr(runs, "local_superlink", no_superlink)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/ml-100k.zip",  # nothing listens: refused at once
        "http://no-such-host.invalid/ml-100k.zip",  # no name resolution, as offline
    ],
)
def test_a_download_that_cannot_happen_exits_2_with_one_message_and_no_run_folder(
    monkeypatch, tmp_path: Path, capsys, url: str
) -> None:
    from fedrec_lab.launch import command

    unreachable_source(monkeypatch, tmp_path, url)
    assert command.main([]) == 2
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fedrec: error: ml-100k: cannot download")
    assert url in lines[0] and "<data-dir>/ml-100k/" in lines[0]
    assert "FEDREC_DATA_DIR" in lines[0] and "--resume" not in err
    assert not (tmp_path / "results").exists() and out == ""


def test_a_stalled_download_gives_up_within_its_timeout(monkeypatch, tmp_path: Path, capsys):
    """A source that accepts the connection and never answers: the download timeout ends
    the wait (here 0.5 s), and the run is refused as for a machine offline."""
    from fedrec_flwr.data import download
    from fedrec_lab.launch import command

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/ml-100k.zip"
        unreachable_source(monkeypatch, tmp_path, url)
        monkeypatch.setattr(download, "DOWNLOAD_TIMEOUT_S", 0.5)
        assert command.main(["--check"]) == 2
    err = capsys.readouterr().err
    assert "cannot download" in err and "timed out" in err and "--resume" not in err


def test_check_says_whether_the_run_can_start_and_starts_nothing(
    monkeypatch, tmp_path: Path, capsys
) -> None:
    from fedrec_lab.launch import command

    unreachable_source(monkeypatch, tmp_path, "http://127.0.0.1:9/ml-100k.zip")
    assert command.main(["--check", "dataset=synthetic", "synthetic-users=50"]) == 0
    err = capsys.readouterr().err
    assert "dataset card: synthetic, strict protocol" in err and "the run can start" in err
    assert command.main(["--check", "seed=one"]) == 2
    assert "seed takes an integer" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_an_unfinished_run_without_a_round_is_not_advised_to_resume(tmp_path: Path) -> None:
    from fedrec_lab.launch import run_folder
    from fedrec_lab.launch.runs import resume_advice

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / run_folder.incomplete_marker()).write_text("")
    (folder / "rounds.csv").write_text("round,seconds\n")
    verdict = run_folder.judge(folder)
    assert verdict.resumable and "run the same command again" in resume_advice(verdict)
    (folder / "rounds.csv").write_text("round,seconds\n1,0.5\n")
    assert "fedrec run --resume" in resume_advice(run_folder.judge(folder))
