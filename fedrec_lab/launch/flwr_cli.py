"""The ``flwr`` calls of a launch, made on its own SuperLink only.

A call is made only while that SuperLink runs (:class:`SuperLinkGoneError` otherwise), from its
``FLWR_HOME``, whose connection names the SuperLink's address: a call can never start
another SuperLink.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from fedrec_lab import processes
from fedrec_lab.launch import tools
from fedrec_lab.launch.run_config import write_run_config
from fedrec_lab.launch.superlink import RUN_ROLES, LocalSuperLink

SUBMIT_TIMEOUT = 300.0  # seconds for `flwr run` to answer (it builds and uploads the FAB)
#: Lines of a run's log that are left out. Flower's simulation warns "Since flwr 1.32,
#: default simulated SuperNodes changed from 10 to 2." on every run, whatever the federation
#: size it was given (flwr/simulation/app.py, Flower 1.42); a launch always gives it
#: (``num-supernodes``, from ``--nodes``), so there the warning only misleads.
LEFT_OUT = ("default simulated SuperNodes changed from 10 to 2.",)
#: The ServerApp's line for a finished round (``fedrec_flwr.server.recording``).
ROUND_LINE = re.compile(r"\[round \d+/\d+\]")


class SuperLinkGoneError(RuntimeError):
    """The SuperLink of this launch has ended: no ``flwr`` call is made on it any more."""


def _text(said: str | bytes | None) -> str:
    """What a timed-out command printed, as text (its output may come back undecoded)."""
    return said.decode(errors="replace") if isinstance(said, bytes) else said or ""


def flwr_command(
    link: LocalSuperLink, args: Sequence[str], timeout: float
) -> subprocess.CompletedProcess:
    """``flwr <args>`` on ``link`` (output captured); :class:`SuperLinkGoneError` if it ended."""
    if not link.alive():
        raise SuperLinkGoneError(f"the SuperLink (PID {link.process.pid}) has ended")
    return subprocess.run(
        [tools.tool("flwr"), *args],
        cwd=link.home,
        env=link.env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        start_new_session=True,  # a second Ctrl-C must not cut `flwr stop` short
    )


def submit(
    link: LocalSuperLink,
    config: dict[str, Any],
    nodes: int,
    federation: Sequence[str],
    project: Path,
) -> tuple[str | None, str]:
    """``flwr run`` (no streaming); (run id, "") or (None, why it did not start)."""
    run_toml = write_run_config(config, link.home / "run-config.toml")
    args = ["run", str(project), "--format", "json", "--run-config", str(run_toml)]
    args += ["--federation-config", " ".join([f"num-supernodes={nodes}", *federation])]
    try:
        started = flwr_command(link, args, timeout=SUBMIT_TIMEOUT)
    except SuperLinkGoneError as gone:
        return None, str(gone)
    except subprocess.TimeoutExpired as expired:
        said = _text(expired.stdout) + _text(expired.stderr)
        return None, f"flwr run did not answer within {SUBMIT_TIMEOUT:.0f} s\n{said}"
    try:
        return str(json.loads(started.stdout)["run-id"]), ""
    except (ValueError, KeyError, TypeError):
        said = (started.stdout + started.stderr).strip() or "(no output)"
        return None, f"flwr run exited with code {started.returncode}:\n{said}"


def shown(line: str) -> bool:
    """Whether a line of the run's log is shown (or collected): not one of ``LEFT_OUT``."""
    return not any(text in line for text in LEFT_OUT)


def write_out(line: str) -> None:
    """``line`` to standard output, unless it is closed (a pager that quit): the log is read
    on to its end all the same, so that ``flwr log`` ends with the run."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.write(line)
        sys.stdout.flush()


def pump(
    source: Iterable[str],
    stream: bool,
    lines: list[str],
    first_round: Callable[[], None] | None = None,
) -> None:
    """Copy the log's ``source`` lines that are :func:`shown` to standard output
    (``stream``) or into ``lines``; call ``first_round`` at the first finished round."""
    for line in source:
        if not shown(line):
            continue
        if stream:
            write_out(line)
        else:
            lines.append(line)
        if first_round is not None and ROUND_LINE.search(line):
            first_round()
            first_round = None


def follow(
    link: LocalSuperLink,
    run_id: str,
    stream: bool,
    timeout: float | None,
    first_round: Callable[[], None] | None = None,
) -> tuple[str | None, str]:
    """Stream (or collect) the run's log until it ends; (final status, output). The status
    is None when the SuperLink ended: Flower cannot tell it any more. ``first_round`` is
    called when the log shows the first finished round."""
    logs = subprocess.Popen(
        [tools.tool("flwr"), "log", run_id, "--stream"],
        cwd=link.home,
        env={**link.env, "PYTHONUNBUFFERED": "1"},  # each line as it comes
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=pump, args=(logs.stdout, stream, lines, first_round), daemon=True
    )
    reader.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while logs.poll() is None and link.alive():
            if deadline is not None and time.monotonic() > deadline:
                return f"timeout ({stop_run(link, run_id)})", "".join(lines)
            with contextlib.suppress(subprocess.TimeoutExpired):
                logs.wait(timeout=0.5)
    finally:
        if logs.poll() is None:
            logs.kill()
            logs.wait()
        reader.join(timeout=10)
    return final_status(link, run_id), "".join(lines)


def final_status(link: LocalSuperLink, run_id: str, wait: float = 10.0) -> str | None:
    """The run's status once ``finished:*`` (the log stream may end just before); None when
    the SuperLink ended."""
    deadline = time.monotonic() + wait
    try:
        status = run_status(link, run_id)
        while not status.startswith("finished") and time.monotonic() < deadline:
            time.sleep(0.2)
            status = run_status(link, run_id)
    except SuperLinkGoneError:
        return None
    return status


def stop_run(link: LocalSuperLink, run_id: str) -> str:
    """``flwr stop`` the run; its final status. Without a SuperLink, the run's own process
    is stopped by PID instead."""
    try:
        flwr_command(link, ["stop", run_id], timeout=60)
    except SuperLinkGoneError:
        return stop_run_processes(link)
    return final_status(link, run_id, wait=20.0) or "unknown (its SuperLink ended)"


def stop_run_processes(link: LocalSuperLink) -> str:
    """Stop the run's own process by PID (its SuperLink has ended); what became of it."""
    stopped = processes.stop(link.running(*RUN_ROLES), grace=15.0)
    return f"stopped (PIDs {stopped}; its SuperLink had ended)" if stopped else "ended"


def run_status(link: LocalSuperLink, run_id: str) -> str:
    """``flwr ls`` of the run: its status, ``unknown`` if unreadable."""
    listed = flwr_command(link, ["ls", "--run-id", run_id, "--format", "json"], 60)
    try:
        return json.loads(listed.stdout)["runs"][0]["status"]
    except (ValueError, KeyError, IndexError, TypeError):
        return "unknown"
