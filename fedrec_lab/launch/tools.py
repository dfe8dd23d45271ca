"""The console scripts a launch runs (``flwr``, ``flower-superlink``) and what they need."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Callable
from pathlib import Path

Say = Callable[[str], None]


def quiet(_: str) -> None:
    """Default ``say``: print nothing."""


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tool(name: str) -> str:
    """A console script of this environment (``flwr``, ``flower-superlink``)."""
    found = Path(sys.executable).with_name(name)
    return str(found) if found.exists() else (shutil.which(name) or name)


def with_tools_on_path(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this environment's scripts folder first on ``PATH``: the SuperLink and
    SuperNodes start Flower's other processes (``flower-superexec``, ``flwr-simulation``,
    ``flwr-clientapp``) by name, which fails in a virtual environment that was not activated
    (``.venv/bin/python -m fedrec_flwr ...``)."""
    scripts = str(Path(sys.executable).parent)
    path = env.get("PATH", "")
    if path.split(os.pathsep)[0] == scripts:
        return env
    return {**env, "PATH": scripts + (os.pathsep + path if path else "")}
