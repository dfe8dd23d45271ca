"""One run of the harness, in its own process (``bench/scale.py`` starts it as
``python -m fedrec_lab.scaling.runner SPEC.json OUT.json`` in the project folder): our app or the
echo floor, in-process (LocalGrid, no Ray) or through ``flwr run``.

In-process imports neither Ray nor ``fedrec_lab.launch``; torch and the data are imported
only by the runs that need them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedrec_lab.project import lazy_paths, project_root

from .rss import rusage_peak_bytes

if TYPE_CHECKING:
    from fedrec_lab.local_grid import LocalGrid

__getattr__ = lazy_paths(__name__, "PROJECT")  # the project folder, found when read


def echo_dir() -> Path:
    """The echo floor's Flower app (``bench/echo_app`` of the project: the ServerApp and
    ClientApp of :mod:`fedrec_lab.scaling.echo`), what ``flwr run`` starts."""
    return project_root() / "bench" / "echo_app"


def machine() -> dict[str, Any]:
    """torch version, CPU count and GPU name (None without CUDA) of this process."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"torch_version": torch.__version__, "cpu_count": os.cpu_count(), "gpu_name": gpu}


def federation(spec: dict[str, Any], cpu_count: int | None = None) -> list[str]:
    """``--federation-config`` entries: ``workers`` Ray workers on this machine's CPUs
    (:func:`fedrec_lab.launch.worker_entries`: more workers than CPUs really start)."""
    from fedrec_lab.launch import worker_entries

    entries = worker_entries(int(spec["workers"]), cpu_count)
    if spec.get("gpus"):
        entries.append(f"client-resources-num-gpus={spec['gpus']}")
    return entries


def num_users(config: dict[str, Any]) -> int:
    """Users of the case's dataset (loads the prepared split)."""
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.data.prepared import prepare

    return prepare(RunConfig.from_mapping(config)).num_users


def sized_grid(
    client_app, config: dict[str, Any], nodes: int, server_round: int
) -> tuple[LocalGrid, dict[str, list[tuple[int, int]]]]:
    """A LocalGrid that notes (bytes down, bytes up) of each message of ``server_round``, by
    kind, in the ``sizes`` returned with it (arrays only, as the strategy counts them)."""
    from fedrec_lab.local_grid import LocalGrid

    sizes: dict[str, list[tuple[int, int]]] = {}

    def noted(message, context):
        reply = client_app(message, context)
        content = message.content
        if "config" in content and content["config"].get("server-round") == server_round:
            down = content["arrays"].count_bytes() if "arrays" in content else 0
            up = 0
            if not reply.has_error() and "arrays" in reply.content:
                up = reply.content["arrays"].count_bytes()
            sizes.setdefault(message.metadata.message_type, []).append((down, up))
        return reply

    return LocalGrid(noted, config, nodes), sizes


def run_ours(spec: dict[str, Any]) -> dict[str, Any]:
    """Our app on ``spec['nodes']`` nodes; the run folder, the nodes used and (in-process)
    the sizes of round 2's messages (round 1 when there is one round)."""
    config, nodes = spec["config"], spec["nodes"]
    if spec["mode"] == "faithful":
        users = num_users(config)
        if nodes not in (None, users):
            raise SystemExit(f"faithful mode is one user per node: nodes={nodes}, users={users}")
        nodes = users
    nodes = nodes or 1
    sizes = None
    if spec["mode"] == "inprocess" or spec["what"] == "probe":
        from fedrec_flwr.client_app import app as client_app
        from fedrec_flwr.config import RunConfig
        from fedrec_flwr.server_app import run_federation

        rounds = int(config["num-server-rounds"])
        grid, sizes = sized_grid(client_app, config, nodes, 2 if rounds > 1 else 1)
        run_federation(grid, RunConfig.from_mapping(config))
    else:
        from fedrec_lab.launch import run

        status, output = run(config, nodes=nodes, federation=federation(spec), stream=False)
        if status != "finished:completed":
            raise SystemExit(f"flwr run ended {status}:\n{output[-3000:]}")
    run_dir = Path(config["results-dir"]) / config["run-name"]
    return {"run_dir": str(run_dir), "nodes": nodes, "sizes": sizes}


def run_floor(spec: dict[str, Any]) -> dict[str, Any]:
    """The echo app with the payload of ``spec['echo']``; its cumulative round seconds."""
    config = {**spec["echo"], "results-dir": spec["config"]["results-dir"]}
    nodes = int(config["nodes"])
    if spec["mode"] == "inprocess":
        from flwr.app import Context, RecordDict

        from fedrec_lab.local_grid import LocalGrid
        from fedrec_lab.scaling import echo

        context = Context(
            run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=config
        )
        echo.main(LocalGrid(echo.client, config, nodes), context)
    else:
        from fedrec_lab.launch import run

        status, output = run(
            config,
            nodes=nodes,
            federation=federation(spec),
            project=echo_dir(),
            stream=False,
            check=False,
        )
        if status != "finished:completed":
            raise SystemExit(f"echo flwr run ended {status}:\n{output[-3000:]}")
    path = Path(config["results-dir"]) / "echo-rounds.json"
    return {"elapsed": json.loads(path.read_text())["seconds"]}


def main(spec_path: str, out_path: str) -> None:
    """Run the spec (``what``: ``ours``, ``probe``: ours in-process only to note its message
    sizes, or ``floor``); write what it gave as JSON."""
    spec = json.loads(Path(spec_path).read_text())
    result = run_floor(spec) if spec["what"] == "floor" else run_ours(spec)
    result.update(machine())
    result["rusage_peak_bytes"] = rusage_peak_bytes()
    result["ray_imported"] = "ray" in sys.modules
    Path(out_path).write_text(json.dumps(result))


if __name__ == "__main__":  # python -m fedrec_lab.scaling.runner SPEC OUT (from the project)
    main(*sys.argv[1:3])
