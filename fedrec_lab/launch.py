"""``fedrec``: run the app with ``flwr run`` on a private local SuperLink, and mean it.

``flwr run .`` submits to the local SuperLink on Flower's default port (starting one that
outlives the run), exits 0 even when the run failed, and leaves the run training on Ctrl-C.
This launcher (console script ``fedrec``, or ``python -m fedrec_lab.launch``):

- merges a preset with ``key=value`` overrides and checks them before submitting (an
  unknown key is named, with the closest known one);
- starts a SuperLink of its own (own temporary ``FLWR_HOME`` and ports, started from a
  neutral folder so Ray workers import the app from the FAB), so a SuperLink left on the
  default port by an earlier ``flwr run`` (with its own environment and folder) is never
  used; it is named instead;
- exits with the run's real status (0 only for ``finished:completed``);
- on Ctrl-C (SIGINT) or SIGTERM stops the run (``flwr stop``), then the SuperLink and
  every process it started, by PID, and removes its ``FLWR_HOME``::

    fedrec conf/pfedrec-ml100k-paper.toml num-server-rounds=10 --nodes 2
    fedrec --resume results/<run-name>        # continue a stopped run from its checkpoint
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedrec_lab import processes
from fedrec_lab.presets import resolve

PROJECT = Path(__file__).resolve().parents[1]
# Flower's local SuperLink (flwr/cli/constant.py): HTTP API and Control API ports.
DEFAULT_HTTP_PORT = 39091
DEFAULT_CONTROL_PORT = 39093
COMPLETED = "finished:completed"
# The environment a run reads; a SuperLink started with other values runs with those.
RUN_ENVIRONMENT = ("FEDREC_DATA_DIR", "FEDREC_CACHE_DIR", "FLWR_HOME")
# RAY_ADDRESS=local: Ray starts a new local instance, even when a `ray start --head` on this
# machine left its address in /tmp/ray/ray_current_cluster (which ray.init() would join).
LOCAL_RAY = "local"

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    """Default ``say``: print nothing."""


class ConfigError(ValueError):
    """The run configuration would be refused (unknown key, wrong type, impossible value)."""


class RunInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM: the run was stopped with ``flwr stop`` and our processes ended."""

    def __init__(self, signum: int, run_id: str | None = None, status: str = "") -> None:
        super().__init__(signum, run_id, status)
        self.signum, self.run_id, self.status = signum, run_id, status


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tool(name: str) -> str:
    """A console script of this environment (``flwr``, ``flower-superlink``)."""
    found = Path(sys.executable).with_name(name)
    return str(found) if found.exists() else (shutil.which(name) or name)


def _flwr() -> str:
    return _tool("flwr")


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


# --- run configuration ---------------------------------------------------------------------


def merged_run_config(preset: str | Path | None, overrides: Sequence[str]) -> dict[str, Any]:
    """A preset's keys (if any, its base's included) updated with ``key=value`` overrides
    (TOML literals)."""
    config: dict[str, Any] = {}
    if preset:
        config.update(resolve(preset))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"override '{item}' is not key=value")
        try:
            config.update(tomllib.loads(f"{key.strip()} = {value}"))
        except tomllib.TOMLDecodeError:
            raise SystemExit(
                f"override '{item}': the value is not a TOML literal (quote strings: "
                f"{key.strip()}='{value}'; floats need a dot: 1.0)"
            ) from None
    return config


def project_defaults(project: Path = PROJECT) -> dict[str, Any]:
    """``[tool.flwr.app.config]`` of the project's ``pyproject.toml``: the keys Flower accepts."""
    pyproject = tomllib.loads((Path(project) / "pyproject.toml").read_text())
    return dict(pyproject["tool"]["flwr"]["app"]["config"])


def unknown_key_message(config: dict[str, Any], known: Sequence[str]) -> str | None:
    """Name the first key not in ``known`` with the closest known key; None if all are known."""
    for key in config:
        if key not in known:
            hint = difflib.get_close_matches(key, known, n=1)
            return f"unknown run-config key '{key}'" + (
                f" (did you mean '{hint[0]}'?)" if hint else ""
            )
    return None


def check_run_config(config: dict[str, Any], project: Path = PROJECT) -> list[str]:
    """Refuse, naming the key, what Flower would refuse with only "Invalid run configuration".

    Keys are checked against the project's ``[tool.flwr.app.config]``; then the merged
    configuration is validated as the ServerApp will (types, impossible values). A user's
    file (``dataset = "file"``) is read and split here, so that a bad one is refused before
    the run starts; returns its dataset card (empty for the named datasets).
    """
    defaults = project_defaults(project)
    unknown = unknown_key_message(config, list(defaults))
    if unknown:
        raise ConfigError(
            f"{unknown}. The keys are those of [tool.flwr.app.config] in "
            f"{Path(project) / 'pyproject.toml'} (README: Run configuration)."
        )
    from fedrec_flwr.config import RunConfig  # imports torch: only when a run is checked
    from fedrec_flwr.data import user_dataset
    from fedrec_flwr.data.prepared import check_user_file

    try:
        checked = RunConfig.from_mapping({**defaults, **config})
        return check_user_file(checked) if checked.dataset == user_dataset.FILE_DATASET else []
    except ValueError as error:
        raise ConfigError(str(error)) from None


def write_run_config(config: dict[str, Any], path: Path) -> Path:
    """Write a flat run config as TOML (strings quoted, booleans lower-case)."""
    path.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in config.items()))
    return path


# --- the private SuperLink -----------------------------------------------------------------


@dataclass
class LocalSuperLink:
    """A SuperLink this process started: its process, ports, ``FLWR_HOME`` and environment."""

    home: Path
    env: dict[str, str]
    process: subprocess.Popen
    port: int
    seen: set[processes.Process] = field(default_factory=set)

    @property
    def log_file(self) -> Path:
        return self.home / "local-superlink" / "superlink.log"

    def watch(self) -> None:
        """Remember the SuperLink's current descendants (Ray may reparent them later)."""
        self.seen.update(processes.descendants(self.process.pid))

    def stop(self) -> list[int]:
        """Stop the SuperLink, then whatever it started that still runs; their PIDs."""
        self.watch()
        stopped = []
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            stopped.append(self.process.pid)
        return stopped + processes.stop(self.seen, grace=5.0)


def _healthy(port: int, timeout: float = 0.4) -> bool:
    """Whether a SuperLink answers on ``127.0.0.1:port`` (Flower's own readiness probe)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout) as r:
            return 200 <= r.status < 300
    except OSError:
        return False


def _start_superlink(home: Path, env: dict[str, str], port: int, control: int) -> subprocess.Popen:
    """``flower-superlink`` as ``flwr`` starts its local one, but with our ports and home."""
    runtime = home / "local-superlink"
    runtime.mkdir(parents=True, exist_ok=True)
    command = [
        _tool("flower-superlink"),
        "--insecure",
        "--simulation",
        "--isolation",
        "subprocess",
        "--control-api-address",
        f"127.0.0.1:{control}",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-file",
        str(runtime / "superlink.log"),
        "--database",
        str(runtime / "state.db"),
    ]
    return subprocess.Popen(
        command,
        cwd=home,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C reaches us only: we stop the run first, then it
    )


@contextmanager
def local_superlink(
    home: Path | None = None,
    say: Say = _quiet,
    startup_timeout: float = 90.0,
    ray: str = LOCAL_RAY,
) -> Iterator[LocalSuperLink]:
    """A private local SuperLink, stopped with every process it started on exit.

    A temporary ``FLWR_HOME`` (``home`` None) is removed on exit. Its simulations run on
    the Ray cluster at ``ray`` (``RAY_ADDRESS``), by default on a new local Ray instance.
    """
    temporary = home is None
    home = Path(home or tempfile.mkdtemp(prefix="fedrec-flwr-home-"))
    home.mkdir(parents=True, exist_ok=True)
    port, control = _free_port(), _free_port()
    while control == port:
        control = _free_port()
    env = {
        **with_tools_on_path(dict(os.environ)),
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(port),
        "FLWR_LOCAL_CONTROL_API_PORT": str(control),
        "RAY_ADDRESS": ray,
    }
    link: LocalSuperLink | None = None
    done = threading.Event()
    watcher: threading.Thread | None = None
    try:
        link = LocalSuperLink(home, env, _start_superlink(home, env, port, control), port)
        say(f"SuperLink PID {link.process.pid} on 127.0.0.1:{port} (FLWR_HOME {home})")
        _wait_until_healthy(link, startup_timeout)
        watcher = threading.Thread(target=_watch, args=(link, done), daemon=True)
        watcher.start()
        yield link
    finally:
        done.set()
        if watcher is not None:
            watcher.join(timeout=10)
        if link is not None:
            stopped = link.stop()
            if stopped:
                say(f"stopped the SuperLink and the processes it started: PIDs {stopped}")
        if temporary:
            shutil.rmtree(home, ignore_errors=True)


def _wait_until_healthy(link: LocalSuperLink, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _healthy(link.port):
        if link.process.poll() is not None or time.monotonic() > deadline:
            tail = link.log_file.read_text()[-2000:] if link.log_file.exists() else ""
            raise RuntimeError(
                f"flower-superlink did not start (exit code {link.process.poll()}); "
                f"its log ({link.log_file}):\n{tail}"
            )
        time.sleep(0.2)


def _watch(link: LocalSuperLink, done: threading.Event, every: float = 1.0) -> None:
    while not done.wait(every):
        link.watch()


# --- a SuperLink left on Flower's default port ---------------------------------------------


def default_superlink_report(port: int = DEFAULT_HTTP_PORT) -> str | None:
    """Describe the SuperLink listening on Flower's default local port; None if there is none.

    That is the one a plain ``flwr run .`` submits to: its runs see the environment and
    folder it was started with, not the caller's.
    """
    pids = processes.listening_pids(port)
    if pids == [] and not _healthy(port):
        return None
    lines = [f"A SuperLink is listening on Flower's default local port 127.0.0.1:{port}:"]
    for pid in pids or []:
        lines += _describe_process(pid)
    if not pids:
        lines.append(f"  PID unreadable (another user's?); `ss -ltnp 'sport = :{port}'` names it")
    lines += [
        "  A plain `flwr run .` submits to it: its runs see the environment (FEDREC_DATA_DIR,",
        "  FEDREC_CACHE_DIR) and folder it was started with, and a relative results-dir lands",
        "  there. fedrec does not use it. If it is yours and no longer needed: `flwr ls` lists",
        "  its runs, `flwr stop <run-id>` stops one, `kill <PID>` stops the SuperLink.",
    ]
    return "\n".join(lines)


def _describe_process(pid: int) -> list[str]:
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


# --- Ray: a private local instance, or an existing cluster ---------------------------------

# Sizes of a new local instance: Ray refuses them when joining a cluster.
RAY_INIT_SIZES = ("init-args-num-cpus", "init-args-num-gpus")


def worker_entries(workers: int, cores: int | None = None) -> list[str]:
    """``--federation-config`` entries that start ``workers`` Ray workers (ClientApp actors)
    on a new local Ray instance of ``cores`` CPUs (default: this machine's).

    Flower starts one actor per ``client-resources-num-cpus`` of Ray's CPUs, a whole number:
    up to ``cores`` workers share the cores; more get one CPU each of a Ray instance told it
    has ``workers`` CPUs (``init-args-num-cpus``). More workers than cores pays off with
    one-user nodes (faithful mode), whose messages mostly wait on Flower's own process.
    """
    if workers < 1:
        raise ConfigError(f"--workers {workers}: give at least 1 Ray worker")
    cores = cores or os.cpu_count() or 1
    entries = [f"client-resources-num-cpus={max(1, cores // workers)}"]
    if workers > cores:
        entries.append(f"init-args-num-cpus={workers}")
    return entries


def resolve_ray_address(
    address: str | None, federation: Sequence[str] = (), timeout: float = 5.0
) -> str:
    """The ``RAY_ADDRESS`` the simulation gets: ``local`` for None, else ``address`` checked.

    Raises :class:`ConfigError` when ``address`` is not ``HOST:PORT``, when no Ray head
    answers there, or when ``federation`` sizes a local instance (``init-args-num-*``).
    """
    if address is None or address == LOCAL_RAY:
        return LOCAL_RAY
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"--ray-address {address}: give the Ray head's HOST:PORT, the address "
            "`ray start --head` printed (e.g. 10.0.0.5:6379)"
        )
    sizes = [entry for entry in federation if entry.split("=", 1)[0].strip() in RAY_INIT_SIZES]
    if sizes:
        raise ConfigError(
            f"--federation {' '.join(sizes)} sizes a new local Ray instance; on the cluster at "
            f"{address} the nodes' `ray start --num-cpus/--num-gpus` do: drop it"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as error:
        raise ConfigError(
            f"no Ray cluster answers at {address} ({error}). Start its head there with "
            f"`ray start --head --port={port}` and its workers with `ray start "
            f"--address={address}`, check it with `ray status --address={address}`, or leave "
            "out --ray-address (and RAY_ADDRESS) to run on a private local Ray instance."
        ) from None
    return address


# --- one run -------------------------------------------------------------------------------


def run(
    config: dict[str, Any],
    nodes: int = 2,
    federation: Sequence[str] = (),
    project: Path = PROJECT,
    stream: bool = True,
    timeout: float | None = None,
    say: Say = _quiet,
    check: bool = True,
    ray_address: str | None = None,
) -> tuple[str, str]:
    """``flwr run`` the app with ``config`` on ``nodes`` SuperNodes; (status, output).

    ``status`` is the run's final status, e.g. ``finished:completed``. Relative
    ``results-dir``/``data-dir`` are made absolute against the current folder. Raises
    :class:`ConfigError` before starting anything if Flower or the ServerApp would refuse
    ``config``; on KeyboardInterrupt stops the run and raises :class:`RunInterrupted`; past
    ``timeout`` seconds stops the run and returns ``timeout (<status>)``. ``check=False``
    skips the check (another app than this project's, e.g. ``bench/echo_app``).
    ``ray_address`` (``HOST:PORT``) runs the ClientApps on that Ray cluster, None on a new
    local Ray instance.
    """
    config = dict(config)
    for key in ("results-dir", "data-dir", "data-file", "resume"):
        if config.get(key):
            config[key] = str(Path(config[key]).expanduser().resolve())
    config.setdefault("results-dir", str(Path("results").resolve()))
    if check:
        for line in check_run_config(config, project):
            say(line)
    ray = resolve_ray_address(ray_address, federation)
    if ray != LOCAL_RAY:
        say(f"Ray: the ClientApps run on the cluster at {ray}")
    with local_superlink(say=say, ray=ray) as link:
        run_id = None
        try:
            run_id, output = _submit(link, config, nodes, federation, project)
            if run_id is None:
                return "not-started", output
            say(f"run {run_id} submitted")
            return _follow(link, run_id, stream, timeout)
        except KeyboardInterrupt as interrupt:
            signum = getattr(interrupt, "signum", signal.SIGINT)
            if run_id:
                say(f"{signal.Signals(signum).name}: stopping run {run_id} (flwr stop)")
            status = _stop_run(link, run_id) if run_id else "not-started"
            raise RunInterrupted(signum, run_id, status) from None


def _submit(
    link: LocalSuperLink,
    config: dict[str, Any],
    nodes: int,
    federation: Sequence[str],
    project: Path,
) -> tuple[str | None, str]:
    """``flwr run`` (no streaming); (run id or None, flwr's output)."""
    run_toml = write_run_config(config, link.home / "run-config.toml")
    command = [
        _flwr(),
        "run",
        str(project),
        "--format",
        "json",
        "--run-config",
        str(run_toml),
        "--federation-config",
        " ".join([f"num-supernodes={nodes}", *federation]),
    ]
    started = _flwr_command(link, command, timeout=300)
    try:
        return str(json.loads(started.stdout)["run-id"]), ""
    except (ValueError, KeyError, TypeError):
        return None, started.stdout + started.stderr


def _follow(
    link: LocalSuperLink, run_id: str, stream: bool, timeout: float | None
) -> tuple[str, str]:
    """Stream (or collect) the run's log until it ends; (final status, output)."""
    logs = subprocess.Popen(
        [_flwr(), "log", run_id, "--stream"],
        cwd=link.home,
        env=link.env,
        stdout=None if stream else subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = logs.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timeout ({_stop_run(link, run_id)})", ""
    finally:
        if logs.poll() is None:
            logs.kill()
            logs.wait()
    return _final_status(link, run_id), output or ""


def _final_status(link: LocalSuperLink, run_id: str, wait: float = 10.0) -> str:
    """The run's status once ``finished:*`` (the log stream may end just before)."""
    deadline = time.monotonic() + wait
    status = _run_status(link, run_id)
    while not status.startswith("finished") and time.monotonic() < deadline:
        time.sleep(0.2)
        status = _run_status(link, run_id)
    return status


def _stop_run(link: LocalSuperLink, run_id: str) -> str:
    """``flwr stop`` the run; its final status."""
    _flwr_command(link, [_flwr(), "stop", run_id], timeout=60)
    return _final_status(link, run_id, wait=20.0)


def _run_status(link: LocalSuperLink, run_id: str) -> str:
    listed = _flwr_command(link, [_flwr(), "ls", "--run-id", run_id, "--format", "json"], 60)
    try:
        return json.loads(listed.stdout)["runs"][0]["status"]
    except (ValueError, KeyError, IndexError, TypeError):
        return "unknown"


def _flwr_command(
    link: LocalSuperLink, command: list[str], timeout: float
) -> subprocess.CompletedProcess:
    return subprocess.run(
        command,
        cwd=link.home,
        env=link.env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        start_new_session=True,  # a second Ctrl-C must not cut `flwr stop` short
    )


# --- command line --------------------------------------------------------------------------


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`RunInterrupted` once; later ones only say "wait".

    Installed explicitly: a launcher started in the background of a script inherits an
    ignored SIGINT, and SIGTERM would otherwise end it without stopping the run.
    """
    received: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        if received:
            print("fedrec: stopping the run and its processes, please wait", file=sys.stderr)
            return
        received.append(signum)
        raise RunInterrupted(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _say(message: str) -> None:
    print(f"fedrec: {message}", file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedrec",
        description="Run the app through Flower on a private local SuperLink; exit status 0 "
        "only if the run completed; Ctrl-C stops the run and everything it started.",
        epilog="fedrec deploy-local N [...]: the same on N local SuperNodes, each reading only "
        "its own data (fedrec deploy-local --help).",
    )
    parser.add_argument("items", nargs="*", help="a preset .toml first (optional), then key=value")
    parser.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="simulated SuperNodes (default 2; with --resume, as many as the run had)",
    )
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a stopped or crashed run from its last checkpoint, with the keys of its "
        "config.json (key=value may change only those that do not alter the results, e.g. "
        "round-timeout)",
    )
    parser.add_argument(
        "--federation",
        nargs="*",
        default=[],
        help="extra --federation-config entries, e.g. client-resources-num-cpus=1",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="Ray workers (ClientApp actors) on this machine (default: Flower's, one per 2 "
        "CPUs); more than the cores suits one-user nodes, e.g. --workers 4 on 2 cores",
    )
    parser.add_argument(
        "--ray-address",
        metavar="HOST:PORT",
        default=os.environ.get("RAY_ADDRESS") or None,
        help="run the ClientApps on the Ray cluster whose head is at HOST:PORT (`ray start "
        "--head`; default $RAY_ADDRESS, else a new local Ray instance)",
    )
    parser.add_argument(
        "--which-superlink",
        action="store_true",
        help="name the SuperLink on Flower's default port (the one `flwr run .` uses) and exit",
    )
    return parser


def _resumed(
    run_dir: str, overrides: dict[str, Any], nodes: int | None
) -> tuple[dict[str, Any], int | None]:
    """``--resume``: the run's own configuration with ``overrides``, checked as the ServerApp
    will check it (:mod:`fedrec_flwr.resume`), and its number of nodes."""
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.resume import CheckpointError, resume_dir, resume_run_config

    try:
        config, needed = resume_run_config(run_dir)
        config.update(overrides)
        resume_dir(RunConfig.from_mapping({**project_defaults(), **config}))
    except (CheckpointError, ValueError) as error:
        raise ConfigError(str(error)) from None
    if nodes is not None and needed is not None and nodes != needed:
        raise ConfigError(f"--resume {run_dir}: its checkpoint needs --nodes {needed}")
    return config, nodes or needed


def main(argv: Sequence[str] | None = None) -> int:
    """``fedrec [PRESET.toml] [key=value ...] [--nodes N]``, or ``fedrec --resume RUN_DIR
    [key=value ...]``; the exit status of the run. ``fedrec deploy-local N ...`` runs on N
    local SuperNodes instead (:mod:`fedrec_lab.deploy`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["deploy-local"]:
        from fedrec_lab.deploy import main as deploy_main

        return deploy_main(argv[1:])
    args = _parser().parse_args(argv)
    report = default_superlink_report()
    if args.which_superlink:
        print(report or f"No SuperLink on Flower's default port 127.0.0.1:{DEFAULT_HTTP_PORT}.")
        return 0
    if report:
        _say(f"note: {report}")
    preset = args.items[0] if args.items and args.items[0].endswith(".toml") else None
    overrides = args.items[1:] if preset else args.items
    config = merged_run_config(preset, overrides)
    nodes = args.nodes
    with _signals_interrupt():
        try:
            federation = list(args.federation)
            if args.workers is not None and args.ray_address:
                raise ConfigError(
                    "--workers sizes a new local Ray instance; on a cluster each node's "
                    "`ray start --num-cpus` and --federation client-resources-num-cpus=K do"
                )
            if args.workers is not None:
                federation = worker_entries(args.workers) + federation
            if args.resume:
                config, nodes = _resumed(args.resume, config, nodes)
            status, _ = run(config, nodes or 2, federation, say=_say, ray_address=args.ray_address)
        except ConfigError as error:
            _say(f"error: {error}")
            return 2
        except RunInterrupted as interrupt:
            what = f"run {interrupt.run_id}: {interrupt.status}" if interrupt.run_id else "no run"
            _say(f"interrupted by {signal.Signals(interrupt.signum).name}; {what}")
            return 128 + interrupt.signum
    print(f"run status: {status}")
    return 0 if status == COMPLETED else 1


if __name__ == "__main__":
    sys.exit(main())
