"""The SuperLink on Flower's default local port: the one a plain ``flwr run .`` submits to.

``fedrec`` never uses it. ``fedrec run`` says so in two lines, once per such SuperLink
(:func:`default_superlink_note`); ``fedrec run --which-superlink`` names it, with what its
runs would see differently (:func:`default_superlink_report`).
"""

from __future__ import annotations

import contextlib
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


def default_superlink_note(port: int = DEFAULT_HTTP_PORT, noted: Path | None = None) -> str | None:
    """Two lines on the SuperLink at Flower's default port, the first time ``fedrec run``
    sees it (its PIDs and start times are kept in ``noted``, by default in the cache
    folder); None when there is none, or it was noted already."""
    pids = processes.listening_pids(port)
    if pids == [] and not healthy(port):
        return None
    seen = sorted(f"{pid}:{processes.start_time(pid)}" for pid in pids or [])
    noted = noted or cache_folder() / "noted-default-superlink"
    with contextlib.suppress(OSError):
        if seen and noted.read_text().split() == seen:
            return None
    with contextlib.suppress(OSError):
        noted.parent.mkdir(parents=True, exist_ok=True)
        noted.write_text(" ".join(seen))
    who = f"PID {', '.join(map(str, pids))}" if pids else "another user's"
    return (
        f"a SuperLink ({who}) listens on Flower's default port {port}: `flwr run .` would "
        "submit to it, fedrec does not use it;\n"
        "`fedrec run --which-superlink` says what its runs would see differently."
    )


def cache_folder() -> Path:
    """``$FEDREC_CACHE_DIR``, else ``~/.cache/fedrec_flwr`` (as the data cache)."""
    return Path(os.environ.get("FEDREC_CACHE_DIR") or Path.home() / ".cache" / "fedrec_flwr")


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
