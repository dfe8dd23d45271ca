"""A private local SuperLink: its own ``FLWR_HOME`` and ports, watched while it runs, stopped
with every process it started.

The ``flwr`` CLI reads the SuperLink's address from ``$FLWR_HOME/config.toml``, written here
with an explicit address: no ``flwr`` call on this home can start a SuperLink of its own (the
``:local:`` address would, when ours is gone). Flower's processes below the SuperLink
(SuperExec, the simulation or ServerApp) are named and watched: when one ends, its PID and the
time are kept (:class:`Exit`). On exit, whatever still runs with this ``FLWR_HOME`` in its
environment is stopped too, by PID, even if it was reparented.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fedrec_lab import processes
from fedrec_lab.launch import tools
from fedrec_lab.launch.ray_cluster import LOCAL_RAY
from fedrec_lab.launch.tools import Say, free_port, quiet, with_tools_on_path

#: The connection ``flwr`` uses (``$FLWR_HOME/config.toml``).
CONNECTION = "fedrec"
#: Flower's processes, by the console script in their command line, and what they are.
ROLES = {
    "flower-superexec": "SuperExec",
    "flwr-simulation": "simulation",
    "flwr-serverapp": "ServerApp",
}
#: The roles of the process that carries a run (it may outlive the SuperLink).
RUN_ROLES = ("simulation", "ServerApp")
#: Ray's FutureWarning on every ``ray.init()``, "Tip: In future versions of Ray, Ray will no
#: longer override accelerator visible devices env var if num_gpus=0 ...", left out of the
#: run's log: a warning filter (``PYTHONWARNINGS``) for that message, category and module
#: only. Ray's own switch, ``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0``, would silence it by
#: showing every GPU to the ClientApps given no GPU (``client-resources-num-gpus`` 0), which
#: Ray hides from them now (docs/deployment.md, GPUs).
RAY_GPU_TIP = "ignore:Tip:FutureWarning:ray._private.worker"


@dataclass(frozen=True)
class Exit:
    """A watched process that ended: what it was, its PID, when it was seen gone, how."""

    role: str
    pid: int
    when: float  # time.time()
    how: str = ""  # "killed by SIGKILL", "exit code 1"; "" when not ours to reap

    def describe(self) -> str:
        at = time.strftime("%H:%M:%S", time.localtime(self.when))
        return f"the {self.role} (PID {self.pid}) ended at {at}" + (
            f" ({self.how})" if self.how else ""
        )


def _how(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


@dataclass
class LocalSuperLink:
    """A SuperLink this process started: its process, ports, ``FLWR_HOME`` and environment,
    and Flower's processes below it."""

    home: Path
    env: dict[str, str]
    process: subprocess.Popen
    port: int
    seen: set[processes.Process] = field(default_factory=set)
    roles: dict[processes.Process, str] = field(default_factory=dict)
    exits: list[Exit] = field(default_factory=list)
    stopping: bool = False
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @property
    def log_file(self) -> Path:
        return self.home / "local-superlink" / "superlink.log"

    def alive(self) -> bool:
        """Whether the SuperLink runs; its end is recorded the first time it is seen."""
        with self._lock:
            code = self.process.poll()
            if code is None:
                return True
            if not self.stopping and self.died is None:
                self.exits.append(Exit("SuperLink", self.process.pid, time.time(), _how(code)))
            return False

    @property
    def died(self) -> Exit | None:
        """The SuperLink's end, if it ended before :meth:`stop`."""
        return next((e for e in self.exits if e.role == "SuperLink"), None)

    def watch(self) -> None:
        """Remember the SuperLink's descendants and every process with its ``FLWR_HOME`` (Ray
        and a dead SuperLink leave reparented ones), name Flower's own among them, and record
        those that ended."""
        with self._lock:
            # Below a reaped SuperLink, its PID may be another process's: look no more.
            current = processes.descendants(self.process.pid) if self.alive() else []
            current += home_processes(self.home)
            self.seen.update(current)
            for process in current:
                if process not in self.roles:
                    role = role_of(process[0])
                    if role:
                        self.roles[process] = role
            ended = {(e.role, e.pid) for e in self.exits}
            for process, role in self.roles.items():
                gone = (role, process[0]) not in ended and not processes.alive(process)
                if gone and not self.stopping:
                    self.exits.append(Exit(role, process[0], time.time()))

    def running(self, *roles: str) -> list[processes.Process]:
        """The watched processes of these roles that still run."""
        return [p for p, role in self.roles.items() if role in roles and processes.alive(p)]

    def stop(self) -> list[int]:
        """Stop the SuperLink, then whatever it started, then anything else that runs with its
        ``FLWR_HOME``; their PIDs."""
        self.watch()
        self.stopping = True
        stopped = []
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            stopped.append(self.process.pid)
        stopped += processes.stop(self.seen, grace=5.0)
        return stopped + stop_home_processes(self.home)


def role_of(pid: int) -> str | None:
    """What Flower process ``pid`` is (:data:`ROLES`), None if none of them."""
    for arg in (processes.argv(pid) or [])[:3]:
        role = ROLES.get(Path(arg).name)
        if role:
            return role
    return None


def home_processes(home: Path) -> list[processes.Process]:
    """The processes (but this one) whose environment has ``FLWR_HOME=home``."""
    found = processes.with_environment("FLWR_HOME", str(home))
    return [p for p in found if p[0] != os.getpid()]


def stop_home_processes(home: Path) -> list[int]:
    """Stop every process (but this one) whose environment has ``FLWR_HOME=home``."""
    return processes.stop(home_processes(home), grace=5.0)


def healthy(port: int, timeout: float = 0.4) -> bool:
    """Whether a SuperLink answers on ``127.0.0.1:port`` (Flower's own readiness probe)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout) as r:
            return 200 <= r.status < 300
    except OSError:
        return False


def write_connection(home: Path, port: int) -> Path:
    """``$FLWR_HOME/config.toml`` naming this SuperLink's address as the default connection."""
    text = (
        f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
        f'address = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    path = home / "config.toml"
    path.write_text(text)
    return path


def start_superlink(home: Path, env: dict[str, str], port: int, control: int) -> subprocess.Popen:
    """``flower-superlink`` as ``flwr`` starts its local one, but with our ports and home."""
    runtime = home / "local-superlink"
    runtime.mkdir(parents=True, exist_ok=True)
    command = [tools.tool("flower-superlink"), "--insecure", "--simulation"]
    command += ["--isolation", "subprocess", "--control-api-address", f"127.0.0.1:{control}"]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    command += ["--log-file", str(runtime / "superlink.log")]
    command += ["--database", str(runtime / "state.db")]
    return subprocess.Popen(
        command,
        cwd=home,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C reaches us only: we stop the run first, then it
    )


def superlink_env(home: Path, port: int, control: int, ray: str) -> dict[str, str]:
    """The environment of the SuperLink and of every ``flwr`` call on it."""
    return {
        **with_tools_on_path(dict(os.environ)),
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(port),
        "FLWR_LOCAL_CONTROL_API_PORT": str(control),
        "RAY_ADDRESS": ray,
        "PYTHONWARNINGS": ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), RAY_GPU_TIP])),
    }


@contextmanager
def local_superlink(
    home: Path | None = None,
    say: Say = quiet,
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
    port, control = free_port(), free_port()
    while control == port:
        control = free_port()
    env = superlink_env(home, port, control, ray)
    write_connection(home, port)
    link: LocalSuperLink | None = None
    done = threading.Event()
    watcher: threading.Thread | None = None
    try:
        link = LocalSuperLink(home, env, start_superlink(home, env, port, control), port)
        say(f"SuperLink PID {link.process.pid} on 127.0.0.1:{port} (FLWR_HOME {home})")
        wait_until_healthy(link, startup_timeout)
        watcher = threading.Thread(target=_watch, args=(link, done), daemon=True)
        watcher.start()
        yield link
    finally:
        done.set()
        if watcher is not None:
            watcher.join(timeout=10)
        stopped = link.stop() if link is not None else stop_home_processes(home)
        if stopped:
            say(f"stopped the SuperLink and the processes it started: PIDs {stopped}")
        if temporary:
            shutil.rmtree(home, ignore_errors=True)


def wait_until_healthy(link: LocalSuperLink, timeout: float) -> None:
    """Wait until the SuperLink answers; raise with its log's end if it exits or times out."""
    deadline = time.monotonic() + timeout
    while not healthy(link.port):
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
