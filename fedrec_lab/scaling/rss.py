"""Peak resident memory of a whole process tree, sampled in a background thread.

The tree is this process (unless left out) and all its descendants, plus every process
whose environment carries ``TAG_ENV=<tag>``: a SuperLink started in its own session, the
simulation process it starts and Ray's workers inherit the variable even when they are
reparented away from us. The sum of RSS counts pages shared between processes once per
process (an upper bound on what the tree uses).

Backends, best first: ``psutil``; ``/proc`` (Linux, no dependency); ``getrusage`` (no
sampling: this process's peak plus the largest peak of its waited-for children).
"""

from __future__ import annotations

import os
import resource
import sys
import threading
from collections.abc import Callable, Collection
from pathlib import Path

TAG_ENV = "FEDREC_SCALE_TAG"
PROC = Path("/proc")
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _proc_children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat[stat.rfind(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    return children


def proc_tree(root: int) -> set[int]:
    """``root`` and its living descendants, from ``/proc``."""
    children = _proc_children()
    found, stack = {root}, list(children.get(root, []))
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, []))
    return found


def proc_tagged(tag: str) -> set[int]:
    """PIDs whose environment holds ``TAG_ENV=tag`` (readable ones only)."""
    needle = f"{TAG_ENV}={tag}".encode()
    found = set()
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def proc_rss_bytes(pid: int) -> int:
    """Resident bytes of ``pid`` (0 once it has exited)."""
    try:
        return int((PROC / str(pid) / "statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def backend_name() -> str:
    """``psutil``, ``proc`` or ``getrusage``: what :class:`PeakRss` will use here."""
    try:
        import psutil  # noqa: F401
    except ImportError:
        return "proc" if (PROC / "self" / "statm").exists() else "getrusage"
    return "psutil"


def tree_rss_bytes(
    include_self: bool = True, tag: str | None = None, exclude: Collection[int] = ()
) -> int:
    """One sample: summed RSS of the tree (see the module's doc), less the PIDs in
    ``exclude`` (their descendants stay in)."""
    me = os.getpid()
    if backend_name() == "psutil":
        import psutil

        procs = {p.pid: p for p in psutil.Process(me).children(recursive=True)}
        if include_self:
            procs[me] = psutil.Process(me)
        if tag:
            for p in psutil.process_iter():
                try:
                    if p.pid not in procs and p.environ().get(TAG_ENV) == tag:
                        procs[p.pid] = p
                except (psutil.Error, OSError):
                    continue
        total = 0
        for pid, p in procs.items():
            if (pid == me and not include_self) or pid in exclude:
                continue
            try:
                total += p.memory_info().rss
            except (psutil.Error, OSError):
                continue
        return total
    pids = proc_tree(me) | (proc_tagged(tag) if tag else set())
    if not include_self:
        pids.discard(me)
    return sum(proc_rss_bytes(pid) for pid in pids - set(exclude))


def rusage_peak_bytes() -> int:
    """This process's peak RSS plus its waited-for children's largest (kB on Linux)."""
    scale = 1 if sys.platform == "darwin" else 1024
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + children) * scale


class PeakRss:
    """``with PeakRss(...) as peak:`` samples every ``interval`` s; ``peak.mb`` after."""

    def __init__(
        self,
        include_self: bool = True,
        tag: str | None = None,
        interval: float = 0.25,
        sample: Callable[[], int] | None = None,
    ) -> None:
        """``exclude`` (a set the caller may fill later) names PIDs left out of the sum."""
        self.backend = "custom" if sample else backend_name()
        self.exclude: set[int] = set()
        self._sample = sample or (lambda: tree_rss_bytes(include_self, tag, self.exclude))
        self.interval = interval
        self.peak_bytes = 0
        self.samples = 0
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def _take(self) -> None:
        try:
            value = self._sample()
        except OSError:
            return
        self.peak_bytes = max(self.peak_bytes, value)
        self.samples += 1

    def _loop(self) -> None:
        while not self._done.wait(self.interval):
            self._take()

    def __enter__(self) -> PeakRss:
        if self.backend != "getrusage":
            self._take()
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._take()
        else:
            self.peak_bytes = rusage_peak_bytes()

    @property
    def mb(self) -> float:
        return self.peak_bytes / 2**20
