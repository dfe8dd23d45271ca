"""Run the app with ``flwr run`` on a private local SuperLink, from Python or the shell.

``flwr run`` takes either one TOML file or key=value pairs; this launcher merges a preset
with overrides, starts a SuperLink of its own (own ``FLWR_HOME`` and ports, started from a
neutral folder so Ray workers import the app from the FAB), runs, reports the run's real
status (``flwr run`` exits 0 even when the ServerApp fails) and stops the SuperLink::

    python -m fedrec_flwr.launch conf/pfedrec-ml100k-paper.toml num-server-rounds=10 --nodes 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _flwr() -> str:
    found = Path(sys.executable).with_name("flwr")
    return str(found) if found.exists() else (shutil.which("flwr") or "flwr")


def merged_run_config(preset: str | Path | None, overrides: Sequence[str]) -> dict[str, Any]:
    """A preset's keys (if any) updated with ``key=value`` overrides (TOML literals)."""
    config: dict[str, Any] = {}
    if preset:
        config.update(tomllib.loads(Path(preset).read_text()))
    for item in overrides:
        if "=" not in item:
            raise SystemExit(f"override '{item}' is not key=value")
        config.update(tomllib.loads(item.replace("=", " = ", 1)))
    return config


def write_run_config(config: dict[str, Any], path: Path) -> Path:
    """Write a flat run config as TOML (strings quoted, booleans lower-case)."""
    path.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in config.items()))
    return path


@contextmanager
def local_superlink(home: Path | None = None) -> Iterator[dict[str, str]]:
    """A private local SuperLink; yields the environment ``flwr`` commands must use."""
    home = Path(home or tempfile.mkdtemp(prefix="fedrec-flwr-home-"))
    home.mkdir(parents=True, exist_ok=True)
    port = str(_free_port())
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": port,
        "FLWR_LOCAL_CONTROL_API_PORT": str(_free_port()),
    }
    # `flwr ls` starts the SuperLink, from a neutral folder.
    subprocess.run([_flwr(), "ls"], cwd=home, env=env, capture_output=True, timeout=120)
    try:
        yield env
    finally:
        found = subprocess.run(
            ["pgrep", "-f", f"flower-superlink.*--port {port}"], capture_output=True, text=True
        )
        for pid in found.stdout.split():
            os.kill(int(pid), signal.SIGTERM)


def run(
    config: dict[str, Any],
    nodes: int = 2,
    federation: Sequence[str] = (),
    project: Path = PROJECT,
    stream: bool = True,
    timeout: float | None = None,
) -> tuple[str, str]:
    """``flwr run`` the app with ``config`` on ``nodes`` SuperNodes; (status, output).

    ``status`` is the run's final status, e.g. ``finished:completed``. Relative
    ``results-dir``/``data-dir`` are made absolute against the current folder.
    """
    config = dict(config)
    for key in ("results-dir", "data-dir"):
        if config.get(key):
            config[key] = str(Path(config[key]).expanduser().resolve())
    config.setdefault("results-dir", str(Path("results").resolve()))
    with local_superlink() as env:
        run_toml = write_run_config(config, Path(env["FLWR_HOME"]) / "run-config.toml")
        federation_config = " ".join([f"num-supernodes={nodes}", *federation])
        command = [
            _flwr(),
            "run",
            str(project),
            "--format",
            "json",
            "--run-config",
            str(run_toml),
            "--federation-config",
            federation_config,
        ]
        started = subprocess.run(
            command, cwd=env["FLWR_HOME"], env=env, capture_output=True, text=True, timeout=300
        )
        try:
            run_id = str(json.loads(started.stdout)["run-id"])
        except (ValueError, KeyError):
            return "not-started", started.stdout + started.stderr
        logs = subprocess.Popen(
            [_flwr(), "log", run_id, "--stream"],
            cwd=env["FLWR_HOME"],
            env=env,
            stdout=None if stream else subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        output, _ = logs.communicate(timeout=timeout)
        status = _run_status(run_id, env)
        for _ in range(50):  # the log stream may end just before the status is final
            if status.startswith("finished"):
                break
            time.sleep(0.2)
            status = _run_status(run_id, env)
        return status, output or ""


def _run_status(run_id: str, env: dict[str, str]) -> str:
    listed = subprocess.run(
        [_flwr(), "ls", "--run-id", run_id, "--format", "json"],
        cwd=env["FLWR_HOME"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    try:
        return json.loads(listed.stdout)["runs"][0]["status"]
    except (ValueError, KeyError, IndexError):
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m fedrec_flwr.launch [PRESET.toml] [key=value ...]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("items", nargs="*", help="a preset .toml first (optional), then key=value")
    parser.add_argument("--nodes", type=int, default=2, help="simulated SuperNodes (default 2)")
    parser.add_argument(
        "--federation",
        nargs="*",
        default=[],
        help="extra --federation-config entries, e.g. client-resources-num-cpus=1",
    )
    args = parser.parse_args(argv)
    preset = args.items[0] if args.items and args.items[0].endswith(".toml") else None
    overrides = args.items[1:] if preset else args.items
    status, _ = run(merged_run_config(preset, overrides), args.nodes, args.federation)
    print(f"run status: {status}")
    return 0 if status == "finished:completed" else 1


if __name__ == "__main__":
    sys.exit(main())
