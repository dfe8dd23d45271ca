"""A run's child process ends with the process that started it.

The experiment, analysis, tuning and transfer commands run each cell in a fresh
``python -c`` process and wait for it. Stopping such a command by its PID (``kill PID``)
would otherwise leave the child running, still writing rounds into the cell's folder while
a restarted command works on the same cell. :func:`die_with_parent` asks Linux to send the
child SIGTERM when its parent goes (``prctl(PR_SET_PDEATHSIG)``); elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

#: ``prctl`` option from ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1
#: Environment variable holding the starting process's PID (set by :func:`child_env`).
PARENT_PID = "FEDREC_PARENT_PID"


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child that calls :func:`die_with_parent`: ``env`` (or this
    process's) with this process's PID under :data:`PARENT_PID`."""
    return {**(os.environ if env is None else env), PARENT_PID: str(os.getpid())}


def die_with_parent() -> None:
    """In the child: receive SIGTERM when the parent process ends (Linux), and exit at once
    if it has already ended (the parent named in :data:`PARENT_PID` is not ours any more)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        return  # not allowed here (a sandbox): the child runs as it did without it
    expected = os.environ.get(PARENT_PID)
    if expected is not None and os.getppid() != int(expected):
        sys.exit("the process that started this run has ended; not running it")
