"""The processes of a local deployment: one SuperLink and its SuperNodes on 127.0.0.1.

:class:`LocalDeployment` starts them (free ports, a folder of its own: the SuperLink's and
the CLI's ``FLWR_HOME``, one folder per SuperNode with its own ``FLWR_HOME``, cache, state
folder and log), writes the ``deploy`` federation into ``$FLWR_HOME/config.toml``, and on exit
stops every process it started and what they started, by PID (:mod:`fedrec_lab.processes`).
With ``secure`` the SuperLink serves TLS with its own CA and accepts only SuperNodes whose
key it registered (:mod:`fedrec_lab.secure`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from fedrec_lab import processes
from fedrec_lab.launch import tools
from fedrec_lab.launch.run_config import write_run_config
from fedrec_lab.launch.superlink import LocalSuperLink, stop_home_processes
from fedrec_lab.launch.tools import Say, free_port, quiet, with_tools_on_path
from fedrec_lab.secure import NodeKey, write_certificates, write_node_key

FEDERATION = "deploy"
HOST = "127.0.0.1"
TASK_POLL_INTERVAL = 0.2  # seconds


class LocalDeployment:
    """A SuperLink (started on entry) and the SuperNodes added to it; all stopped on exit."""

    def __init__(self, folder: Path, secure: bool = False, say: Say = quiet) -> None:
        self.folder, self.secure, self.say = Path(folder), secure, say
        self.home = self.folder / "flwr-home"
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if k != "FEDREC_DATA_DIR"}  # no shared data
        self.env = {
            **with_tools_on_path(dict(env)),
            "FLWR_HOME": str(self.home),
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "FEDREC_CACHE_DIR": str(self.folder / "server-cache"),
        }
        self.certificates = write_certificates(self.folder / "tls") if secure else None
        self.link: LocalSuperLink | None = None
        self.supernodes: list[tuple[subprocess.Popen, Path]] = []
        self._launch: list[tuple[list[str], dict[str, str]]] = []  # command, environment
        self._done = threading.Event()

    # ---------------------------------------------------------------- start
    def __enter__(self) -> LocalDeployment:
        try:
            self._start_superlink()
        except BaseException:
            self.stop()
            raise
        threading.Thread(target=self._watch, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _start_superlink(self) -> None:
        runtime = self.home / "local-superlink"
        runtime.mkdir(parents=True, exist_ok=True)
        tls = ["--insecure"]
        if self.certificates is not None:
            c = self.certificates
            tls = ["--ssl-ca-certfile", str(c.ca_cert), "--ssl-certfile", str(c.server_cert)]
            tls += ["--ssl-keyfile", str(c.server_key), "--enable-supernode-auth"]
        command = [tools.tool("flower-superlink"), *tls, "--host", HOST, "--port", str(self.port)]
        command += ["--database", str(runtime / "state.db"), "--log-file"]
        command += [str(runtime / "superlink.log"), "--disable-runtime-dependency-installation"]
        process = self._spawn(command, self.env, self.folder / "superlink.out", self.folder)
        self.link = LocalSuperLink(self.home, self.env, process, self.port)
        connection: dict[str, Any] = {"address": f"{HOST}:{self.port}"}
        if self.certificates is None:
            connection["insecure"] = True
        else:
            connection["root-certificates"] = str(self.certificates.ca_cert)
        lines = [f'[superlink]\ndefault = "{FEDERATION}"\n\n[superlink.{FEDERATION}]']
        lines += [f"{key} = {json.dumps(value)}" for key, value in connection.items()]
        (self.home / "config.toml").write_text("\n".join(lines) + "\n")
        self.say(f"SuperLink PID {process.pid} on {HOST}:{self.port}" + self._tls_note())
        self._wait_ready(process)

    def _tls_note(self) -> str:
        if self.certificates is None:
            return " (insecure)"
        return f" (TLS, CA {self.certificates.ca_cert}; SuperNode authentication)"

    def _wait_ready(self, process: subprocess.Popen, timeout: float = 90.0) -> None:
        scheme, context = "http", None
        if self.certificates is not None:
            scheme = "https"
            context = ssl.create_default_context(cafile=str(self.certificates.ca_cert))
        deadline = time.monotonic() + timeout
        while True:
            try:
                url = f"{scheme}://{HOST}:{self.port}/health"
                with urllib.request.urlopen(url, timeout=1, context=context) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"flower-superlink did not start (exit code {process.poll()}): "
                    + _tail(self.folder / "superlink.out")
                )
            time.sleep(0.3)

    def add_supernode(self, device: Path, key: NodeKey | None = None) -> subprocess.Popen:
        """Start a SuperNode reading only ``device`` (an exported folder); in secure mode its
        key is registered first, unless ``key`` is given (then it is used as it is)."""
        index = len(self.supernodes)
        node_dir = self.folder / f"node-{index}"
        manifest = json.loads((Path(device) / "manifest.json").read_text())
        node_config = (
            f"partition-id={manifest['partition-id']} "
            f"num-partitions={manifest['num-partitions']} "
            f"data-path='{Path(device).resolve()}' state-dir='{node_dir / 'state'}'"
        )
        if self.certificates is None:
            auth = ["--insecure"]
        else:
            if key is None:
                key = write_node_key(node_dir, "auth-key")
                self.flwr("supernode", "register", str(key.public), FEDERATION)
            auth = ["--root-certificates", str(self.certificates.ca_cert)]
            auth += ["--auth-supernode-private-key", str(key.private)]
            # The same key signs its secure-aggregation keys; every node reads the roster
            # of every partition's public key (fedrec_flwr.privacy.secagg_trust).
            roster = self.folder / "roster"
            roster.mkdir(exist_ok=True)
            (roster / f"{manifest['partition-id']}.pub").write_bytes(key.public.read_bytes())
            node_config += f" secagg-identity-key='{key.private}' secagg-roster='{roster}'"
        command = [tools.tool("flower-supernode"), *auth, "--superlink", f"{HOST}:{self.port}"]
        command += ["--port", str(free_port()), "--node-config", node_config]
        env = {
            **self.env,
            "FLWR_HOME": str(node_dir / "flwr-home"),
            "FEDREC_CACHE_DIR": str(node_dir / "cache"),  # the device's own disk
            # How often the SuperNode's SuperExec looks for a message to start a ClientApp
            # process for (Flower's default 1 s: half a second per message on average).
            "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": os.environ.get(
                "FLWR_SUPEREXEC_TASK_POLL_INTERVAL", str(TASK_POLL_INTERVAL)
            ),
        }
        (node_dir / "state").mkdir(parents=True, exist_ok=True)
        process = self._spawn(command, env, node_dir / "supernode.log", node_dir)
        self.supernodes.append((process, node_dir))
        self._launch.append((command, env))
        self.say(f"SuperNode {index} PID {process.pid} reads {device}")
        return process

    def restart_supernode(self, index: int, timeout: float = 180.0) -> subprocess.Popen:
        """Kill SuperNode ``index`` with SIGKILL (a crash) and start it again as it was started:
        same data, state folder and, in secure mode, key, hence the same node id. Flower lets
        a node id in again only once the SuperLink has marked it offline (no heartbeat for up
        to 60 s): the restart waits for that, and messages sent to it meanwhile fail."""
        process, node_dir = self.supernodes[index]
        log = node_dir / "supernode.log"
        ids = re.findall(r"SuperNode ID: (\d+)", log.read_text(errors="replace"))
        self.watch()  # its SuperExec and app processes are stopped with the rest
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait()
        deadline = time.monotonic() + timeout
        while ids and self._status(ids[-1]) == "online":
            if time.monotonic() > deadline:
                raise RuntimeError(f"SuperNode {index} still online {timeout} s after its kill")
            time.sleep(1.0)
        command, env = self._launch[index]
        restarted = self._spawn(command, env, log, node_dir)
        self.supernodes[index] = (restarted, node_dir)
        self.say(f"SuperNode {index} killed (PID {process.pid}), restarted: PID {restarted.pid}")
        return restarted

    def _status(self, node_id: str) -> str | None:
        """A node's status on the SuperLink (``online``, ``offline``, ...)."""
        listed = json.loads(self.flwr("supernode", "ls", FEDERATION) or "{}")
        for node in listed.get("nodes", []):
            if str(node.get("node-id")) == node_id:
                return node.get("status")
        return None

    def wait_online(self, count: int, timeout: float = 120.0) -> None:
        """Wait until ``count`` SuperNodes are online (a SuperNode that exits stops it)."""
        deadline = time.monotonic() + timeout
        while True:
            for index, (process, node_dir) in enumerate(self.supernodes):
                if process.poll() is not None:
                    raise RuntimeError(
                        f"SuperNode {index} exited (code {process.returncode}): "
                        + _tail(node_dir / "supernode.log")
                    )
            listed = json.loads(self.flwr("supernode", "ls", FEDERATION) or "{}")
            online = [n for n in listed.get("nodes", []) if n.get("status") == "online"]
            if len(online) >= count:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(online)} of {count} SuperNodes online after {timeout} s")
            time.sleep(1.0)

    def submit(self, config: dict[str, Any], project: Path) -> str:
        """``flwr run <project> deploy``; the run id."""
        toml = write_run_config(config, self.home / "run-config.toml")
        out = self.flwr("run", str(project), FEDERATION, "--run-config", str(toml))
        try:
            return str(json.loads(out)["run-id"])
        except (ValueError, KeyError, TypeError):
            raise RuntimeError(f"flwr run did not start the run: {out}") from None

    def flwr(self, *args: str, timeout: float = 300) -> str:
        """A ``flwr`` CLI command on this deployment (JSON output); its stdout."""
        done = subprocess.run(
            [tools.tool("flwr"), *args, "--format", "json"],
            cwd=self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            start_new_session=True,
        )
        if done.returncode != 0 and args[:2] != ("supernode", "ls"):
            raise RuntimeError(f"flwr {' '.join(args)} failed: {done.stdout}{done.stderr}")
        return done.stdout

    @staticmethod
    def _spawn(command: list[str], env: dict, log: Path, cwd: Path) -> subprocess.Popen:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            return subprocess.Popen(
                command,
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the launcher only: it stops them
            )

    # ----------------------------------------------------------------- stop
    def _watch(self, every: float = 1.0) -> None:
        while not self._done.wait(every):
            self.watch()

    def watch(self) -> None:
        """Remember every descendant of our processes (to stop them even if reparented)."""
        if self.link is not None:
            self.link.watch()
            for process, _ in self.supernodes:
                if process.poll() is None:  # a reaped one's PID may be another's
                    self.link.seen.update(processes.descendants(process.pid))

    def stop(self) -> list[int]:
        """Stop the SuperNodes, then the SuperLink, then whatever they started or still runs
        with one of their ``FLWR_HOME``; their PIDs."""
        self._done.set()
        self.watch()
        mine = [(p.pid, processes.start_time(p.pid)) for p, _ in self.supernodes]
        stopped = processes.stop([(pid, t) for pid, t in mine if t is not None], grace=15.0)
        for process, _ in self.supernodes:
            process.wait()  # reap it
        stopped += self.link.stop() if self.link is not None else stop_home_processes(self.home)
        for _, node_dir in self.supernodes:  # anything left with a SuperNode's FLWR_HOME
            stopped += stop_home_processes(node_dir / "flwr-home")
        if stopped:
            self.say(f"stopped the SuperNodes, the SuperLink and their processes: PIDs {stopped}")
        return stopped


def _tail(log: Path, size: int = 1500) -> str:
    text = log.read_text(errors="replace") if log.exists() else "(no log)"
    return f"its log ({log}) ends:\n{text[-size:]}"
