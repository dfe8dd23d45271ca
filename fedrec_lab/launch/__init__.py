"""``fedrec run``: run the app with ``flwr run`` on a private local SuperLink, and mean it.

``flwr run .`` submits to the local SuperLink on Flower's default port (starting one that
outlives the run), exits 0 even when the run failed, and leaves the run training on Ctrl-C.
This launcher (``fedrec run``, or ``python -m fedrec_lab.launch``):

- merges a preset with ``key=value`` overrides (each read as its key's type) and checks
  them, and the data (found, downloaded or read, and split), before starting anything (an
  unknown key is named, with the closest known one): :mod:`.run_config`;
- starts a SuperLink of its own (own temporary ``FLWR_HOME`` and ports, started from a
  neutral folder so Ray workers import the app from the FAB), so a SuperLink left on the
  default port by an earlier ``flwr run`` is never used; it is named instead
  (:mod:`.superlink`, :mod:`.default_port`);
- exits with the run's real status, as its run folder shows it (0 only for a completed
  run), also when its SuperLink dies during the run (:mod:`.runs`, :mod:`.run_folder`);
- on Ctrl-C (SIGINT) or SIGTERM stops the run (``flwr stop``), then the SuperLink and
  every process it started, by PID, and removes its ``FLWR_HOME`` (:mod:`.command`)::

    fedrec run conf/pfedrec-ml100k-paper.toml num-server-rounds=10 --nodes 2
    fedrec run --resume results/<run-name>     # continue a stopped run from its checkpoint

``PROJECT`` is the project folder (:func:`fedrec_lab.project.project_root`), looked up when
read.
"""

from fedrec_lab.launch.command import main, resumed, say, signals_interrupt
from fedrec_lab.launch.default_port import (
    DEFAULT_CONTROL_PORT,
    DEFAULT_HTTP_PORT,
    default_superlink_report,
)
from fedrec_lab.launch.flwr_cli import follow, stop_run
from fedrec_lab.launch.ray_cluster import LOCAL_RAY, resolve_ray_address, worker_entries
from fedrec_lab.launch.run_config import (
    ConfigError,
    check_data,
    check_run_config,
    merged_run_config,
    parse_overrides,
    project_defaults,
    unknown_key_message,
    with_absolute_paths,
    write_run_config,
)
from fedrec_lab.launch.runs import COMPLETED, Outcome, RunInterrupted, launch, run
from fedrec_lab.launch.superlink import LocalSuperLink, local_superlink
from fedrec_lab.launch.tools import Say, free_port, quiet, tool, with_tools_on_path
from fedrec_lab.project import lazy_paths

__getattr__ = lazy_paths(__name__, "PROJECT")
_resumed = resumed  # the name the checkpoint tests call

__all__ = [
    "COMPLETED",
    "DEFAULT_CONTROL_PORT",
    "DEFAULT_HTTP_PORT",
    "LOCAL_RAY",
    "ConfigError",
    "LocalSuperLink",
    "Outcome",
    "RunInterrupted",
    "Say",
    "check_data",
    "check_run_config",
    "default_superlink_report",
    "follow",
    "free_port",
    "launch",
    "local_superlink",
    "main",
    "merged_run_config",
    "parse_overrides",
    "project_defaults",
    "quiet",
    "resolve_ray_address",
    "resumed",
    "run",
    "say",
    "signals_interrupt",
    "stop_run",
    "tool",
    "unknown_key_message",
    "with_absolute_paths",
    "with_tools_on_path",
    "worker_entries",
    "write_run_config",
]
