"""``fedrec run`` when its SuperLink dies: the run folder decides the outcome, the death is
named (PID, time, log kept), no ``flwr`` call is made on a dead SuperLink (one could start
another), and nothing started is left running.

The fast tests run the launcher in-process against fakes of ``flower-superlink`` and ``flwr``
(small scripts: a health endpoint, a simulation that writes a run folder round by round and
goes on when the SuperLink dies). The ``slow`` test kills a real SuperLink mid-run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fedrec_lab import processes
from fedrec_lab.launch import command, run_folder, superlink, tools

linux = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads Linux /proc")
pytestmark = linux

# --- fakes -----------------------------------------------------------------------------------

FAKE_SUPERLINK = r"""
import http.server, json, os, signal, subprocess, sys, threading, time
from pathlib import Path
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
log = Path(args[args.index("--log-file") + 1])
home = Path(os.environ["FLWR_HOME"])
here = Path(__file__).parent
log.parent.mkdir(parents=True, exist_ok=True)
log.write_text(f"fake SuperLink on {port}\n")

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Health)
threading.Thread(target=server.serve_forever, daemon=True).start()
subprocess.Popen([sys.executable, str(here / "flower-superexec")])
if os.fork() == 0:  # a process no longer below the SuperLink: only its FLWR_HOME tells
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
die_after = int(os.environ.get("FAKE_DIE_AFTER_ROUNDS", "0"))
rounds = None
while True:
    submitted = home / "submitted.json"
    if submitted.exists():
        config = json.loads(submitted.read_text())
        subprocess.Popen([sys.executable, str(here / "flwr-simulation"), json.dumps(config)])
        submitted.unlink()
        rounds = Path(config["results-dir"]) / config["run-name"] / "rounds.csv"
    if die_after and rounds is not None and rounds.exists():
        if len(rounds.read_text().splitlines()) - 1 >= die_after:
            log.write_text(log.read_text() + "killed\n")
            os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)
"""

FAKE_SUPEREXEC = "import time\ntime.sleep(600)\n"

FAKE_SIMULATION = r"""
import json, os, sys, time
from pathlib import Path
config = json.loads(sys.argv[1])
folder = Path(config["results-dir"]) / config["run-name"]
folder.mkdir(parents=True)
(folder / "config.json").write_text(json.dumps(config))
(folder / "INCOMPLETE").write_text("running\n")
crash = int(os.environ.get("FAKE_CRASH_AT_ROUND", "0"))
with open(folder / "rounds.csv", "w") as rounds:
    rounds.write("round,seconds\n")
    rounds.flush()
    for r in range(1, int(config["num-server-rounds"]) + 1):
        if r == crash:
            sys.exit(1)
        time.sleep(float(os.environ.get("FAKE_ROUND_SECONDS", "0.3")))
        rounds.write(f"{r},{r}\n")
        rounds.flush()
(folder / "summary.json").write_text("{}")
(folder / "INCOMPLETE").unlink()
(Path(os.environ["FLWR_HOME"]) / "finished").write_text("")
"""

FAKE_FLWR = r"""
import json, os, sys, time, tomllib, urllib.request
from pathlib import Path
home = Path(os.environ["FLWR_HOME"])
connection = tomllib.loads((home / "config.toml").read_text())["superlink"]
address = connection[connection["default"]]["address"]

def healthy():
    try:
        with urllib.request.urlopen(f"http://{address}/health", timeout=0.5) as answer:
            return answer.status == 200
    except OSError:
        return False

with open(os.environ["FAKE_CALL_LOG"], "a") as calls:
    calls.write(json.dumps({"args": sys.argv[1:], "healthy": healthy()}) + "\n")
if not healthy():
    print("Connection to the SuperLink is unavailable")
    sys.exit(1)
command = sys.argv[1]
if command == "run":
    if os.environ.get("FAKE_REFUSE_RUN"):
        print("Invalid run configuration: the fake SuperLink says no", file=sys.stderr)
        sys.exit(1)
    run_config = sys.argv[sys.argv.index("--run-config") + 1]
    config = tomllib.loads(Path(run_config).read_text())
    (home / "submitted.json").write_text(json.dumps(config))
    print(json.dumps({"success": True, "run-id": "7"}))
elif command == "log":
    while healthy() and not (home / "finished").exists():
        print("a log line", flush=True)
        time.sleep(0.2)
    if not healthy():
        print("Connection to the SuperLink is unavailable")
        sys.exit(1)
elif command == "ls":
    status = "finished:completed" if (home / "finished").exists() else "running"
    print(json.dumps({"runs": [{"status": status}]}))
elif command == "stop":
    (home / "stopped").write_text("")
"""


@pytest.fixture
def fake_flower(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Fake Flower console scripts, used by the launcher in place of the real ones; the log
    of every ``flwr`` call is ``<tmp>/calls.jsonl``."""
    folder = tmp_path / "bin"
    folder.mkdir()
    scripts = {
        "flower-superlink": FAKE_SUPERLINK,
        "flower-superexec": FAKE_SUPEREXEC,
        "flwr-simulation": FAKE_SIMULATION,
        "flwr": FAKE_FLWR,
    }
    for name, text in scripts.items():
        script = folder / name
        script.write_text(f"#!{sys.executable}\n{text}")
        script.chmod(0o755)
    real = tools.tool
    monkeypatch.setattr(
        tools, "tool", lambda name: str(folder / name) if name in scripts else real(name)
    )
    monkeypatch.setattr(command, "default_superlink_report", lambda: None)
    monkeypatch.setenv("FAKE_CALL_LOG", str(tmp_path / "calls.jsonl"))
    return folder


def fedrec_run(tmp_path: Path, rounds: int = 12) -> list[str]:
    return [
        "dataset='synthetic'",
        f"num-server-rounds={rounds}",
        f"results-dir='{tmp_path / 'results'}'",
        "run-name='run'",
    ]


def home_of(err: str) -> Path:
    found = re.search(r"FLWR_HOME (.+)\)", err)
    assert found, err
    return Path(found.group(1))


def flwr_calls(tmp_path: Path) -> list[dict]:
    lines = (tmp_path / "calls.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def nothing_left(home: Path) -> None:
    assert superlink.home_processes(home) == []
    assert not home.exists()


# --- the run folder decides ------------------------------------------------------------------


def test_a_completed_run_is_reported_completed_when_its_superlink_died(
    fake_flower: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("FAKE_DIE_AFTER_ROUNDS", "3")
    assert command.main(fedrec_run(tmp_path)) == 0
    out, err = capsys.readouterr()
    assert "run status: finished:completed" in out
    pid = re.search(r"SuperLink PID (\d+)", err).group(1)
    assert re.search(rf"the SuperLink \(PID {pid}\) ended at [\d:]+ \(killed by SIGKILL\)", err)
    assert "goes on without it: waiting for it to end" in err
    assert "warning: Flower could not tell, but the run completed" in err
    assert "12 rounds in rounds.csv, summary.json written" in err
    folder = tmp_path / "results" / "run"
    kept = folder / f"superlink-{pid}.log"
    assert f"the SuperLink's log is kept in {kept}" in err
    assert kept.read_text().endswith("killed\n")
    assert all(call["healthy"] for call in flwr_calls(tmp_path))  # none on a dead SuperLink
    nothing_left(home_of(err))


def test_an_unfinished_run_gets_exit_1_and_the_resume_command(
    fake_flower: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("FAKE_DIE_AFTER_ROUNDS", "2")
    monkeypatch.setenv("FAKE_CRASH_AT_ROUND", "6")
    assert command.main(fedrec_run(tmp_path)) == 1
    out, err = capsys.readouterr()
    assert "run status: unknown:superlink-died" in out
    folder = tmp_path / "results" / "run"
    assert f"the run did not finish: 5 of 12 rounds in rounds.csv, no summary.json ({folder})" in (
        err
    )
    assert f"continue it, once the cause is fixed, with: fedrec run --resume {folder}" in err
    assert re.search(r"the simulation \(PID \d+\) ended at", err)
    assert all(call["healthy"] for call in flwr_calls(tmp_path))
    nothing_left(home_of(err))


def test_a_run_that_does_not_start_prints_what_flwr_run_said(
    fake_flower: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("FAKE_REFUSE_RUN", "1")
    assert command.main(fedrec_run(tmp_path)) == 1
    out, err = capsys.readouterr()
    assert "run status: not-started" in out
    assert "the run did not start: flwr run exited with code 1" in err
    assert "the fake SuperLink says no" in err
    nothing_left(home_of(err))


def test_a_normal_run_is_completed_and_its_home_names_the_superlink(
    fake_flower: Path, tmp_path: Path, capsys
) -> None:
    assert command.main(fedrec_run(tmp_path, rounds=3)) == 0
    out, err = capsys.readouterr()
    assert "run status: finished:completed" in out
    assert "ended at" not in err and "warning" not in err
    calls = flwr_calls(tmp_path)
    assert [c["args"][0] for c in calls][:2] == ["run", "log"]
    stopped = re.search(r"processes it started: PIDs \[([\d, ]*)\]", err)
    assert stopped and len(stopped.group(1).split(",")) >= 3  # SuperLink, SuperExec, orphan
    nothing_left(home_of(err))


def test_the_home_connection_has_an_explicit_address(fake_flower: Path) -> None:
    """``flwr`` starts a SuperLink of its own for the ``:local:`` address only."""
    with superlink.local_superlink() as link:
        text = (link.home / "config.toml").read_text()
        assert f'address = "127.0.0.1:{link.port}"' in text
        assert ":local:" not in text


def test_no_flwr_call_is_made_on_a_dead_superlink(fake_flower: Path) -> None:
    from fedrec_lab.launch.flwr_cli import SuperLinkGoneError, flwr_command, follow

    with superlink.local_superlink() as link:
        link.process.send_signal(signal.SIGKILL)
        link.process.wait()
        with pytest.raises(SuperLinkGoneError, match=f"PID {link.process.pid}"):
            flwr_command(link, ["ls"], timeout=10)
        assert follow(link, "7", stream=False, timeout=30)[0] is None  # status unknown
        assert link.died is not None and link.died.how == "killed by SIGKILL"


# --- the run folder --------------------------------------------------------------------------


def write_run(folder: Path, rounds: int, done: bool, planned: int = 5) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"num-server-rounds": planned}))
    lines = ["round,seconds", *(f"{r},{r}" for r in range(1, rounds + 1))]
    (folder / "rounds.csv").write_text("\n".join(lines) + "\n")
    if done:
        (folder / "summary.json").write_text("{}")
    else:
        (folder / "INCOMPLETE").write_text("running\n")
    return folder


def test_the_verdict_follows_summary_and_marker(tmp_path: Path) -> None:
    done = run_folder.judge(write_run(tmp_path / "a", 5, done=True))
    assert done.state == run_folder.COMPLETED and done.rounds == 5 and not done.resumable
    early = run_folder.judge(write_run(tmp_path / "b", 3, done=True))  # early stopping
    assert early.state == run_folder.COMPLETED
    cut = run_folder.judge(write_run(tmp_path / "c", 2, done=False))
    assert cut.state == run_folder.UNFINISHED and cut.resumable
    assert cut.describe() == f"2 of 5 rounds in rounds.csv, no summary.json ({tmp_path / 'c'})"
    both = write_run(tmp_path / "d", 5, done=True)
    (both / "INCOMPLETE").write_text("")  # a summary with the marker: not finished
    assert run_folder.judge(both).state == run_folder.UNFINISHED
    assert run_folder.judge(None).state == run_folder.MISSING
    assert run_folder.judge(tmp_path / "none").state == run_folder.MISSING


def test_the_run_folder_is_the_new_one(tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_run(results / "old", 5, done=True)
    before = run_folder.run_folders(results)
    config = {"results-dir": str(results), "run-name": "mine"}
    assert run_folder.locate(config, before) is None
    write_run(results / "other", 1, done=False)
    write_run(results / "mine-2", 1, done=False)  # "mine" was taken: the ServerApp adds -2
    assert run_folder.locate(config, before) == results / "mine-2"
    assert run_folder.locate({"results-dir": str(results)}, before) in (
        results / "other",
        results / "mine-2",
    )
    resumed = {"results-dir": str(results), "resume": str(results / "old")}
    assert run_folder.locate(resumed, before) == results / "old"


# --- a real SuperLink killed mid-run -----------------------------------------------------------


@pytest.mark.slow
def test_killing_the_real_superlink_mid_run_leaves_a_completed_run_and_nothing_running(
    tmp_path: Path,
) -> None:
    script = Path(sys.executable).with_name("fedrec")
    fedrec = (
        [str(script), "run"] if script.exists() else [sys.executable, "-m", "fedrec_lab.launch"]
    )
    results = tmp_path / "results"
    items = [
        "dataset='synthetic'",
        "synthetic-users=40",
        "synthetic-items=300",
        "synthetic-mean-degree=10",
        "num-server-rounds=60",
        f"results-dir='{results}'",
        "run-name='killed'",
    ]
    env = {
        **os.environ,
        "FEDREC_CACHE_DIR": str(tmp_path / "cache"),
        "FEDREC_PROJECT": str(Path(__file__).resolve().parents[2]),
    }
    launcher = subprocess.Popen(
        [*fedrec, *items],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out: list[str] = []
    err: list[str] = []
    readers = [
        threading.Thread(target=lambda: out.extend(launcher.stdout), daemon=True),
        threading.Thread(target=lambda: err.extend(launcher.stderr), daemon=True),
    ]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + 480
    while not any("[round 3/" in line for line in out):
        assert launcher.poll() is None, "".join(out + err)
        assert time.monotonic() < deadline, "".join(out + err)
        time.sleep(0.2)
    pid = int(re.search(r"SuperLink PID (\d+)", "".join(err)).group(1))
    os.kill(pid, signal.SIGKILL)
    assert launcher.wait(timeout=480) == 0, "".join(out + err)
    for reader in readers:
        reader.join(timeout=10)
    stdout, stderr = "".join(out), "".join(err)
    assert "run status: finished:completed" in stdout, stderr
    assert re.search(rf"the SuperLink \(PID {pid}\) ended at [\d:]+ \(killed by SIGKILL\)", stderr)
    assert "but the run completed: 60 rounds in rounds.csv" in stderr
    assert (results / "killed" / f"superlink-{pid}.log").exists()
    home = home_of(stderr)
    assert superlink.home_processes(home) == [] and not home.exists()
    assert processes.start_time(pid) is None
