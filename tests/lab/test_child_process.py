"""A cell's child process ends with the command that started it (Linux)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedrec_lab.child_process import PARENT_PID, child_env

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's"
)

CHILD = (
    "from fedrec_lab.child_process import die_with_parent\n"
    "die_with_parent()\n"
    "print('ready', flush=True)\n"
    "import time\n"
    "time.sleep(120)\n"
)
# The parent starts the child as the cells do, prints its PID once the child runs, and waits.
PARENT = (
    "import subprocess, sys, time\n"
    "from fedrec_lab.child_process import child_env\n"
    "child = subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdout=subprocess.PIPE,\n"
    "                         text=True, env=child_env())\n"
    "child.stdout.readline()\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def alive(pid: int) -> bool:
    """Is ``pid`` a running process (not gone, not a zombie)?"""
    status = Path(f"/proc/{pid}/status")
    try:
        state = next(line for line in status.read_text().splitlines() if line.startswith("State"))
    except (FileNotFoundError, ProcessLookupError):
        return False
    return "zombie" not in state and "Z" not in state.split()[1]


def test_the_child_ends_when_its_parent_is_killed() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD], stdout=subprocess.PIPE, text=True
    )
    try:
        child = int(parent.stdout.readline())  # type: ignore[union-attr]
        assert alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(child), "the child outlived its parent"
    finally:
        parent.kill()
        parent.wait()


def test_a_child_whose_parent_already_ended_does_not_run() -> None:
    env = {**child_env(), PARENT_PID: str(os.getpid() + 1_000_000)}  # not its parent
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode != 0
    assert "ready" not in done.stdout
    assert "has ended" in done.stderr


def test_child_env_names_this_process() -> None:
    assert child_env({"A": "1"}) == {"A": "1", PARENT_PID: str(os.getpid())}
