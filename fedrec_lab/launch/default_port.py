"""The SuperLink on Flower's default local port: the one a plain ``flwr run .`` submits to.

``fedrec`` never uses it; it names it, with what its runs would see differently.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fedrec_lab import processes
from fedrec_lab.launch.superlink import healthy

# Flower's local SuperLink (flwr/cli/constant.py): HTTP API and Control API ports.
DEFAULT_HTTP_PORT = 39091
DEFAULT_CONTROL_PORT = 39093
# The environment a run reads; a SuperLink started with other values runs with those.
RUN_ENVIRONMENT = ("FEDREC_DATA_DIR", "FEDREC_CACHE_DIR", "FLWR_HOME")


def default_superlink_report(port: int = DEFAULT_HTTP_PORT) -> str | None:
    """Describe the SuperLink listening on Flower's default local port; None if there is none.

    That is the one a plain ``flwr run .`` submits to: its runs see the environment and
    folder it was started with, not the caller's.
    """
    pids = processes.listening_pids(port)
    if pids == [] and not healthy(port):
        return None
    lines = [f"A SuperLink is listening on Flower's default local port 127.0.0.1:{port}:"]
    for pid in pids or []:
        lines += describe_process(pid)
    if not pids:
        lines.append(f"  PID unreadable (another user's?); `ss -ltnp 'sport = :{port}'` names it")
    lines += [
        "  A plain `flwr run .` submits to it: its runs see the environment (FEDREC_DATA_DIR,",
        "  FEDREC_CACHE_DIR) and folder it was started with, and a relative results-dir lands",
        "  there. fedrec does not use it. If it is yours and no longer needed: `flwr ls` lists",
        "  its runs, `flwr stop <run-id>` stops one, `kill <PID>` stops the SuperLink.",
    ]
    return "\n".join(lines)


def describe_process(pid: int) -> list[str]:
    """PID, command line, folder and environment differences of one process."""
    lines = [f"  PID {pid}: {processes.command_line(pid) or '(command line unreadable)'}"]
    folder = processes.working_dir(pid)
    if folder:
        here = "" if Path(folder) == Path.cwd() else f" (not this folder, {Path.cwd()})"
        lines.append(f"  started in {folder}{here}")
    args = processes.argv(pid) or []
    interpreter = Path(args[0]) if args else Path()
    python = interpreter.parent if "python" in interpreter.name else None
    if python and python.is_absolute() and python != Path(sys.executable).parent:
        lines.append(
            f"  its Python is in {python}, yours in {Path(sys.executable).parent}: "
            "its runs import that environment's fedrec_flwr"
        )
    theirs = processes.environment(pid)
    if theirs is not None:
        for name in RUN_ENVIRONMENT:
            if theirs.get(name) != os.environ.get(name):
                lines.append(
                    f"  its {name} is {theirs.get(name, '(unset)')}, "
                    f"yours is {os.environ.get(name, '(unset)')}"
                )
    return lines
