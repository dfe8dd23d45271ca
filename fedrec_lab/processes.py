"""Processes by PID: who listens on a port, a process tree, stopping what we started.

Linux ``/proc`` only, read without extra dependencies; elsewhere every lookup returns
nothing (the callers then say less, they do not fail). A process is identified by
``(pid, start time)`` so that a PID reused by the system is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

PROC = Path("/proc")
Process = tuple[int, int]  # (pid, start time in clock ticks since boot)


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (state first), or None."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), None if it does not exist."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] == "Z":  # a zombie has exited already
        return None
    return int(fields[19])


def parent_pid(pid: int) -> int | None:
    """The parent's PID, None if the process does not exist."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[1])


def argv(pid: int) -> list[str] | None:
    """The process's arguments, None if unreadable."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [arg.decode(errors="replace") for arg in raw.split(b"\0")[:-1]] or None


def command_line(pid: int) -> str | None:
    """The process's command line, None if unreadable."""
    args = argv(pid)
    return " ".join(args) if args else None


def working_dir(pid: int) -> str | None:
    """The process's current folder, None if unreadable (another user's process)."""
    try:
        return os.readlink(PROC / str(pid) / "cwd")
    except OSError:
        return None


def environment(pid: int) -> dict[str, str] | None:
    """The process's environment at its start, None if unreadable (another user's process)."""
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    pairs = (entry.partition(b"=") for entry in raw.split(b"\0") if entry)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, _, v in pairs}


def _pids() -> list[int]:
    try:
        return [int(p.name) for p in PROC.iterdir() if p.name.isdigit()]
    except OSError:
        return []


def descendants(pid: int) -> list[Process]:
    """Every living process below ``pid`` in the process tree (children first)."""
    children: dict[int, list[int]] = {}
    for child in _pids():
        parent = parent_pid(child)
        if parent is not None:
            children.setdefault(parent, []).append(child)
    found: list[Process] = []
    stack = list(children.get(pid, []))
    while stack:
        child = stack.pop()
        started = start_time(child)
        if started is not None:
            found.append((child, started))
        stack.extend(children.get(child, []))
    return found


def with_environment(name: str, value: str) -> list[Process]:
    """Every living process whose environment (as it started) has ``name=value``; only
    this user's processes can be read."""
    found = []
    for pid in _pids():
        if (environment(pid) or {}).get(name) == value:
            started = start_time(pid)
            if started is not None:
                found.append((pid, started))
    return found


def alive(process: Process) -> bool:
    """Whether this very process (same PID, same start time) still runs."""
    return start_time(process[0]) == process[1]


def stop(processes: Iterable[Process], grace: float = 10.0) -> list[int]:
    """SIGTERM the living ones, SIGKILL those still alive after ``grace`` s; their PIDs."""
    targets = [p for p in dict.fromkeys(processes) if alive(p)]
    for pid, _ in targets:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in targets):
        time.sleep(0.1)
    for process in targets:
        if alive(process):
            _signal(process[0], signal.SIGKILL)
    return [pid for pid, _ in targets]


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def listening_pids(port: int) -> list[int] | None:
    """PIDs of the processes with a TCP socket listening on ``port``.

    None when the port is listened on but its owner cannot be read (another user's
    process); [] when nothing listens on it.
    """
    inodes = _listening_inodes(port)
    if not inodes:
        return []
    wanted = {f"socket:[{inode}]" for inode in inodes}
    owners = [pid for pid in _pids() if wanted & _fd_links(pid)]
    return owners or None


def _fd_links(pid: int) -> set[str]:
    """What the process's open file descriptors point to (those still open when read)."""
    try:
        fds = list((PROC / str(pid) / "fd").iterdir())
    except OSError:
        return set()
    links = set()
    for fd in fds:
        with contextlib.suppress(OSError):  # closed meanwhile
            links.add(os.readlink(fd))
    return links


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes of ``/proc/net/tcp{,6}`` entries listening (state 0A) on ``port``."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes
