"""``fedrec run`` on oversubscribed cores: a short real run while ``4 x nproc`` busy processes
compete for the CPUs still ends with the run folder's truth (exit status 0, ``finished:
completed``, every round in ``rounds.csv``, ``summary.json``), and leaves nothing behind (no
Flower process of its ``FLWR_HOME``, no temporary ``FLWR_HOME``)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fedrec_lab import processes
from fedrec_lab.launch import run_folder, superlink

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads Linux /proc"),
]

ROUNDS = 4
HOGS_PER_CORE = 4
#: Flower's console scripts: none may outlive the launch.
FLOWER = ("flower-superlink", "flower-superexec", "flwr-simulation", "flwr-serverapp")


#: A process that spins on a CPU until killed; it also ends if the test's process is gone
#: (killed before its ``finally``) or after 20 minutes, so that none can outlive the test.
HOG = """
import os, time
parent, end = os.getppid(), time.monotonic() + 1200
while os.getppid() == parent and time.monotonic() < end:
    for _ in range(1_000_000):
        pass
"""


def start_hogs(count: int) -> list[subprocess.Popen]:
    """``count`` processes that spin on a CPU each until killed."""
    code = HOG
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]


def kill(started: list[subprocess.Popen]) -> None:
    """SIGKILL each of these processes, by PID, and reap it."""
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait()


def flower_processes_of(home: Path) -> list[tuple[int, list[str]]]:
    """Flower's processes whose environment names ``home`` as ``FLWR_HOME`` or whose current
    folder lies in it (PID, arguments)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        args = processes.argv(pid) or []
        if not any(Path(arg).name in FLOWER for arg in args[:3]):
            continue
        env = processes.environment(pid) or {}
        cwd = processes.working_dir(pid) or ""
        if env.get("FLWR_HOME") == str(home) or cwd.startswith(str(home)):
            found.append((pid, args))
    return found


def fedrec_command() -> list[str]:
    script = Path(sys.executable).with_name("fedrec")
    if script.exists():
        return [str(script), "run"]
    return [sys.executable, "-m", "fedrec_lab.launch"]


def test_a_short_run_on_oversubscribed_cores_completes_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    items = [
        "dataset='synthetic'",
        "synthetic-users=30",
        "synthetic-items=200",
        "synthetic-mean-degree=10",
        f"num-server-rounds={ROUNDS}",
        f"results-dir='{results}'",
        "run-name='loaded'",
    ]
    env = {
        **os.environ,
        "FEDREC_CACHE_DIR": str(tmp_path / "cache"),
        "FEDREC_PROJECT": str(Path(__file__).resolve().parents[2]),
    }
    hogs = start_hogs(HOGS_PER_CORE * (os.cpu_count() or 1))
    launcher = None
    try:
        launcher = subprocess.Popen(
            [*fedrec_command(), *items],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        stdout, stderr = launcher.communicate(timeout=900)
    finally:
        kill(hogs)
        if launcher is not None and launcher.poll() is None:
            launcher.send_signal(signal.SIGTERM)  # the launcher stops its run and processes
            launcher.communicate(timeout=120)
    said = stdout + stderr
    assert launcher.returncode == 0, said
    assert stdout.rstrip().endswith("run status: finished:completed"), said
    assert "warning" not in stderr and "error" not in stderr, said
    assert f"[round {ROUNDS}/{ROUNDS}]" in stdout, said
    verdict = run_folder.judge(results / "loaded")
    assert verdict.state == run_folder.COMPLETED, said
    assert verdict.rounds == ROUNDS and verdict.planned == ROUNDS, said
    assert (results / "loaded" / "summary.json").is_file()
    found = re.search(r"SuperLink PID (\d+) on [\d.:]+ \(FLWR_HOME (.+)\)", stderr)
    assert found, said
    pid, home = int(found.group(1)), Path(found.group(2))
    assert re.search(r"stopped the SuperLink and the processes it started: PIDs \[", stderr)
    assert processes.start_time(pid) is None
    assert superlink.home_processes(home) == []
    assert flower_processes_of(home) == []
    assert not home.exists(), f"the temporary FLWR_HOME {home} was left behind"
