"""``fedrec --ray-address``: the simulation joins an existing Ray cluster.

The slow test starts a Ray cluster of its own on 127.0.0.1 (a head with no CPU and two
workers with one CPU each, every node with its own temporary folder and free ports), runs
``fedrec`` on it, and checks in the cluster's GCS that the run's driver was the launcher's
simulation process and that the ClientApp actors ran on the two worker nodes; no Ray
instance was started under the launcher. The cluster is stopped by PID (never ``ray stop``,
which stops every Ray process on the machine).
"""

from __future__ import annotations

import contextlib
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
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedrec_lab import processes
from fedrec_lab.launch import (
    LOCAL_RAY,
    ConfigError,
    free_port,
    local_superlink,
    resolve_ray_address,
    tool,
)
from fedrec_lab.project import ENVIRONMENT, project_root

pytestmark = pytest.mark.usefixtures("private_cache")

RAY_START_TIMEOUT = 120.0
RUN_TIMEOUT = 480.0

# Run in a subprocess, so that the test process never becomes a Ray driver: prints the
# cluster's nodes (after waiting until `want` of them are alive), actors and jobs as JSON.
QUERY = """
import json, sys, time
import ray
import ray._private.state as state

address, want, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ray.init(address=address, logging_level="ERROR", log_to_driver=False)
deadline = time.monotonic() + timeout
while sum(n["Alive"] for n in ray.nodes()) < want and time.monotonic() < deadline:
    time.sleep(0.5)
nodes = [
    {"id": n["NodeID"], "alive": n["Alive"], "cpus": n["Resources"].get("CPU", 0),
     "raylet": n["RayletSocketName"]}
    for n in ray.nodes()
]
actors = [
    {"class": a["ActorClassName"], "node": a["Address"]["NodeID"], "job": a["JobID"],
     "pid": a["Pid"]}
    for a in state.actors().values()
]
jobs = [{"id": j["JobID"], "driver_pid": j["DriverPid"]} for j in state.jobs()]
print(json.dumps({"nodes": nodes, "actors": actors, "jobs": jobs}))
"""


def _fedrec() -> list[str]:
    script = Path(sys.executable).with_name("fedrec")
    if script.exists():
        return [str(script), "run"]
    return [sys.executable, "-m", "fedrec_lab.launch"]


def _ray_env() -> dict[str, str]:
    """The test's environment (its FEDREC_CACHE_DIR reaches the ClientApps), no RAY_ADDRESS;
    the project named (the launcher runs in a folder outside it)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, "RAY_USAGE_STATS_ENABLED": "0", ENVIRONMENT: str(project_root())}


class LocalRayCluster:
    """Ray nodes on 127.0.0.1 started by this test (``ray start --block``), stopped by PID."""

    def __init__(self) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: list[tuple[subprocess.Popen, Path]] = []  # ray start, its temp dir
        self.seen: set[processes.Process] = set()
        self._done = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)

    def start(self, workers: int = 2) -> None:
        """A head without CPUs (no ClientApp can run there), then ``workers`` 1-CPU workers."""
        self._watcher.start()
        self._node(
            "--head",
            f"--port={self.port}",
            "--num-cpus=0",
            "--include-dashboard=false",
            f"--ray-client-server-port={free_port()}",
        )
        self._wait_for_head()
        for _ in range(workers):
            self._node(f"--address={self.address}", "--num-cpus=1")
        alive = [n for n in self.query(want=1 + workers)["nodes"] if n["alive"]]
        assert len(alive) == 1 + workers, self.logs()

    def _node(self, *args: str) -> None:
        temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Unix socket paths
        command = [
            tool("ray"),
            "start",
            "--block",
            "--disable-usage-stats",
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={temp}",
            f"--object-store-memory={80 * 1024**2}",
            *(f"--{name}={free_port()}" for name in self._port_flags),
            *args,
        ]
        with (temp / "ray-start.log").open("w") as log:
            process = subprocess.Popen(
                command,
                env=_ray_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.nodes.append((process, temp))

    # Ports that default to fixed numbers (52365...): every node gets free ones.
    _port_flags = (
        "node-manager-port",
        "object-manager-port",
        "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port",
        "runtime-env-agent-port",
        "metrics-export-port",
    )

    def _wait_for_head(self) -> None:
        deadline = time.monotonic() + RAY_START_TIMEOUT
        check = [tool("ray"), "health-check", f"--address={self.address}"]
        while subprocess.run(check, env=_ray_env(), capture_output=True).returncode != 0:
            head = self.nodes[0][0]
            assert head.poll() is None and time.monotonic() < deadline, self.logs()
            time.sleep(0.5)

    def query(self, want: int = 0) -> dict:
        """Nodes, actors and jobs in the cluster's GCS (once ``want`` nodes are alive)."""
        done = subprocess.run(
            [sys.executable, "-c", QUERY, self.address, str(want), str(RAY_START_TIMEOUT)],
            env=_ray_env(),
            capture_output=True,
            text=True,
            timeout=RAY_START_TIMEOUT + 60,
        )
        assert done.returncode == 0, done.stderr + self.logs()
        return json.loads(done.stdout.strip().splitlines()[-1])

    def node_ids(self, found: dict) -> list[str]:
        """GCS node ids of ``self.nodes``, in order (a raylet's socket is in its temp dir)."""
        return [
            next(n["id"] for n in found["nodes"] if n["raylet"].startswith(f"{temp}/"))
            for _, temp in self.nodes
        ]

    def logs(self) -> str:
        return "\n".join(
            f"--- {temp}/ray-start.log:\n{(temp / 'ray-start.log').read_text()[-2000:]}"
            for _, temp in self.nodes
            if (temp / "ray-start.log").exists()
        )

    def _watch(self) -> None:
        while not self._done.wait(0.5):
            self._remember()

    def _remember(self) -> None:
        for process, _ in self.nodes:
            started = processes.start_time(process.pid)
            if started is not None:
                self.seen.add((process.pid, started))
                self.seen.update(processes.descendants(process.pid))

    def stop(self) -> None:
        """SIGTERM each ``ray start --block`` (it ends its node), then whatever is left."""
        self._done.set()
        if self._watcher.is_alive():
            self._watcher.join(timeout=5)
        self._remember()
        for process, _ in reversed(self.nodes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for process, _ in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
        processes.stop(self.seen, grace=5.0)
        for process, temp in self.nodes:
            if process.poll() is None:
                process.kill()
                process.wait()
            shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def ray_cluster() -> Iterator[LocalRayCluster]:
    pytest.importorskip("ray")
    cluster = LocalRayCluster()
    try:
        cluster.start(workers=2)
        yield cluster
    finally:
        cluster.stop()
    assert not any(processes.alive(p) for p in cluster.seen), "Ray processes left running"


class TreeWatcher:
    """Every process seen below ``pid`` while it runs: {pid: command line}."""

    def __init__(self, pid: int) -> None:
        self.pid, self.seen = pid, {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(0.2):
            for pid, _ in processes.descendants(self.pid):
                self.seen.setdefault(pid, processes.command_line(pid) or "")

    def stop(self) -> dict[int, str]:
        self._done.set()
        self._thread.join(timeout=10)
        return self.seen


# --- the address is checked before anything starts -------------------------------------------


def test_no_address_means_a_new_local_ray_instance() -> None:
    assert resolve_ray_address(None) == LOCAL_RAY
    assert resolve_ray_address("local") == LOCAL_RAY


def test_an_address_where_no_ray_head_answers_says_what_to_do() -> None:
    port = free_port()  # nothing listens there
    with pytest.raises(ConfigError) as error:
        resolve_ray_address(f"127.0.0.1:{port}")
    message = str(error.value)
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in message
    assert f"ray start --head --port={port}" in message
    assert "leave" in message and "out --ray-address" in message


def test_a_malformed_address_and_local_ray_sizes_are_refused() -> None:
    with pytest.raises(ConfigError, match="give the Ray head's HOST:PORT"):
        resolve_ray_address("10.0.0.5")
    with pytest.raises(ConfigError, match="give the Ray head's HOST:PORT"):
        resolve_ray_address("10.0.0.5:http")
    with socket.socket() as server:  # a head that answers
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        assert resolve_ray_address(address, ["client-resources-num-cpus=1"]) == address
        with pytest.raises(ConfigError, match="init-args-num-cpus=2 sizes a new local Ray"):
            resolve_ray_address(address, ["init-args-num-cpus=2"])


def test_the_entry_point_refuses_an_unreachable_cluster_before_starting_anything(
    tmp_path: Path,
) -> None:
    port = free_port()
    done = subprocess.run(
        [*_fedrec(), "dataset='synthetic'", "--ray-address", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_ray_env(),
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in done.stderr
    assert "SuperLink PID" not in done.stderr


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads Linux /proc")
def test_the_private_superlink_gets_the_ray_address_in_its_environment() -> None:
    for ray, expected in ((LOCAL_RAY, "local"), ("10.0.0.5:6379", "10.0.0.5:6379")):
        with local_superlink(ray=ray) as link:
            assert processes.environment(link.process.pid)["RAY_ADDRESS"] == expected


# --- a run on the cluster --------------------------------------------------------------------


@pytest.mark.slow
def test_fedrec_runs_the_clientapps_on_the_workers_of_an_existing_cluster(
    ray_cluster: LocalRayCluster, tmp_path: Path
) -> None:
    results = tmp_path / "results"
    command = [
        *_fedrec(),
        "dataset='synthetic'",
        "synthetic-users=40",
        "synthetic-items=300",
        "synthetic-mean-degree=10",
        "num-server-rounds=2",
        f"results-dir='{results}'",
        "run-name='cluster'",
        "--nodes",
        "2",
        "--federation",
        "client-resources-num-cpus=1",
        "--ray-address",
        ray_cluster.address,
    ]
    launcher = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=_ray_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    tree = TreeWatcher(launcher.pid)
    try:
        out, err = launcher.communicate(timeout=RUN_TIMEOUT)
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)  # stops the run and its SuperLink
            launcher.communicate(timeout=120)
        started = tree.stop()
    assert launcher.returncode == 0, out + err + ray_cluster.logs()
    assert "run status: finished:completed" in out
    assert f"Ray: the ClientApps run on the cluster at {ray_cluster.address}" in err
    assert (results / "cluster" / "summary.json").exists()

    # No Ray instance of its own under the launcher...
    ray_processes = [c for c in started.values() if "raylet" in c or "gcs_server" in c]
    assert ray_processes == [], ray_processes
    # ...its simulation process was the driver of a job on the cluster...
    found = ray_cluster.query()
    (job,) = [j["id"] for j in found["jobs"] if j["driver_pid"] in started]
    # ...whose ClientApp actors ran on the two workers, none on the head (0 CPUs).
    actors = [a for a in found["actors"] if a["job"] == job]
    assert actors and all(a["class"] == "ClientAppActor" for a in actors), actors
    head, *workers = ray_cluster.node_ids(found)
    assert {a["node"] for a in actors} == set(workers), (actors, head, workers)
