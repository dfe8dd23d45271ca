"""``fedrec deploy-local N``: a real Flower deployment on this machine, one SuperNode per
device, each reading only its own data.

    fedrec deploy-local 3 [PRESET.toml] [key=value ...] [--insecure] [--keep DIR] [--timings]

exports the configured dataset for N devices (:mod:`fedrec_lab.export`), starts a
SuperLink and N SuperNodes on 127.0.0.1 (SuperNode ``i`` with node config
``data-path=<its folder> state-dir=<its own folder>``, its own ``FLWR_HOME`` and cache, none
of them with ``FEDREC_DATA_DIR``), runs ``flwr run <project> deploy`` (3 rounds unless
``num-server-rounds`` says otherwise), prints the metrics and stops every process it started,
by PID, also on Ctrl-C, SIGTERM and failure. Exit status 0 only if the run completed.
The deployment is secure unless told otherwise: TLS with a CA of its own and SuperNode
authentication, generated for the run (:mod:`fedrec_lab.secure`); ``--insecure`` turns both
off and prints a warning (``--secure``, the default, is still accepted).
``python -m fedrec_lab.deploy`` is the same command.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedrec_flwr.config import RunConfig
from fedrec_flwr.node import timing as node_timing
from fedrec_lab.export import export_devices
from fedrec_lab.launch.command import read_config, signals_interrupt
from fedrec_lab.launch.command import say as _say
from fedrec_lab.launch.flwr_cli import follow, stop_run
from fedrec_lab.launch.run_config import (
    ConfigError,
    check_data,
    check_run_config,
    project_defaults,
    with_absolute_paths,
)
from fedrec_lab.launch.runs import COMPLETED, RunInterrupted, conclude, outlive_superlink
from fedrec_lab.launch.tools import Say
from fedrec_lab.project import ProjectNotFoundError, project_root
from fedrec_lab.supernodes import FEDERATION, LocalDeployment

INSECURE_WARNING = (
    "WARNING: --insecure: the SuperLink serves without TLS and accepts any SuperNode (no "
    "authentication): whoever reaches its port can read the models and join the federation. "
    "Leave --insecure out for TLS and SuperNode authentication."
)


def deploy_local(
    num_nodes: int,
    config: dict[str, Any],
    folder: Path,
    secure: bool = True,
    timeout: float | None = None,
    say: Say = _say,
    project: Path | None = None,
) -> tuple[str, Path]:
    """Run ``config`` on ``num_nodes`` local SuperNodes; (final status, results folder).
    ``project``: the project folder (:func:`fedrec_lab.project.project_root`)."""
    project = project_root(project)
    config = checked_deployment(num_nodes, config, project, say)
    run_config = RunConfig.from_mapping({**project_defaults(project), **config})
    devices = export_devices(run_config, num_nodes, folder / "devices")
    say(f"exported {num_nodes} device folders into {folder / 'devices'}")
    named = run_config.results_path(config["run-name"])
    deadline = None if timeout is None else time.monotonic() + timeout
    with LocalDeployment(folder, secure=secure, say=say) as deployment:
        for device in devices:
            deployment.add_supernode(device)
        deployment.wait_online(num_nodes)
        run_id, link = None, deployment.link
        if link is None:  # started with the deployment: its SuperNodes are online
            raise RuntimeError("the local deployment has no SuperLink")
        try:
            run_id = deployment.submit(config, project)
            say(f"run {run_id} submitted to federation '{FEDERATION}'")
            status, _ = follow(link, run_id, True, timeout)
            announced = status is None
            if announced:
                status = outlive_superlink(link, lambda: _run_folder(named), deadline, say)
            outcome = conclude(link, status, "", _run_folder(named), say, folder, announced)
        except KeyboardInterrupt as interrupt:
            signum = getattr(interrupt, "signum", signal.SIGINT)
            stopped = stop_run(link, run_id) if run_id else "not-started"
            raise RunInterrupted(signum, run_id, stopped) from None
    return outcome.status, _run_folder(named)


def checked_deployment(
    num_nodes: int, config: dict[str, Any], project: Path, say: Say = _say, data: bool = True
) -> dict[str, Any]:
    """The configuration of a local deployment (3 rounds unless set, paths made absolute),
    checked; with ``data`` its data too (found, downloaded or read, and split), before
    anything starts. ConfigError otherwise."""
    config = with_absolute_paths(config)
    config.setdefault("results-dir", str(Path("results").resolve()))
    config.setdefault("num-server-rounds", 3)
    config.setdefault("run-name", f"deploy{num_nodes}-{time.strftime('%Y%m%d-%H%M%S')}")
    check_run_config(config, project, data=False)
    if data:
        for line in check_data(config, project):
            say(line)
    return config


def _run_folder(named: Path) -> Path:
    """The folder the run wrote: ``named``, or ``named-<k>`` if that name was taken (the
    ServerApp never reuses a folder): the one written last."""
    candidates = [named, *named.parent.glob(f"{named.name}-*")]
    written = [c for c in candidates if (c / "rounds.csv").exists()]
    return max(written, key=lambda c: (c / "rounds.csv").stat().st_mtime, default=named)


def report(run_dir: Path, timings: Path | None = None) -> str:
    """The run's rounds and test metrics (and, with ``timings``, where the seconds went)."""
    if not (run_dir / "rounds.csv").exists():
        return f"no results in {run_dir}"
    with open(run_dir / "rounds.csv") as f:
        rows = list(csv.DictReader(f))
    shown = ["round", "seconds", "train-loss", "val-hr@10", "test-hr@10", "test-ndcg@10"]
    lines = ["  ".join(f"{name:>12}" for name in shown)]
    lines += ["  ".join(f"{_short(row.get(name, '')):>12}" for name in shown) for row in rows]
    summary_file = run_dir / "summary.json"
    if summary_file.exists():
        summary = json.loads(summary_file.read_text())
        test = " ".join(f"{k} {v:.4f}" for k, v in summary["test"].items())
        lines.append(f"best validation round {summary['best_round']}: test {test}")
    elapsed = [0.0] + [float(row["seconds"]) for row in rows]
    walls = {int(r["round"]): b - a for r, a, b in zip(rows, elapsed, elapsed[1:], strict=False)}
    if walls:
        lines.append(f"seconds per round (median): {statistics.median(walls.values()):.1f}")
    if timings is not None and timings.exists():
        records = [json.loads(line) for line in timings.read_text().splitlines() if line]
        lines.append(
            "per round: wall = process start (Python, imports, Flower's hand-over) + our "
            "setup (data, runtime) + our train/evaluate + Flower (polling, transfers, server)"
        )
        for row in node_timing.summarise(records, walls):
            lines.append(
                f"  round {row['round']}: {row['wall']:.1f} s = start {row['start']:.1f} + "
                f"setup {row['setup']:.2f} + work {row['work']:.2f} + Flower {row['flower']:.1f}"
            )
    lines.append(f"results: {run_dir}")
    return "\n".join(lines)


def _short(value: str) -> str:
    try:
        number = float(value)
    except ValueError:
        return value
    return str(int(number)) if number.is_integer() else f"{number:.4f}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedrec deploy-local",
        description="Export the data for N devices, start a SuperLink and N SuperNodes on "
        "127.0.0.1, run the app on them (3 rounds by default), print the metrics, stop "
        "everything started. Exit status 0 only if the run completed.",
    )
    parser.add_argument("nodes", type=int, help="number of SuperNodes (devices)")
    parser.add_argument("items", nargs="*", help="a preset .toml first (optional), then key=value")
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="no TLS and no SuperNode authentication (prints a warning); default: both, "
        "with credentials generated for the run",
    )
    parser.add_argument("--secure", action="store_true", help="the default (kept for scripts)")
    parser.add_argument(
        "--keep",
        metavar="DIR",
        help="work in DIR and keep it (data, logs, keys); else a "
        "temporary folder, removed after a completed run",
    )
    parser.add_argument("--timings", action="store_true", help="where each round's seconds go")
    parser.add_argument(
        "--check",
        action="store_true",
        help="check the configuration and the data, print the dataset card and exit, "
        "starting nothing: 0 if the deployment can start, 2 if not",
    )
    parser.add_argument("--timeout", type=float, help="stop the run after this many seconds")
    parser.add_argument(
        "--project",
        metavar="DIR",
        help="the project folder (presets, pyproject.toml); default $FEDREC_PROJECT, else the "
        "nearest folder upwards whose pyproject.toml names fedrec-flwr",
    )
    return parser


def check_arguments(argv: Sequence[str]) -> dict[str, Any]:
    """The configuration ``fedrec deploy-local ARGV`` would run, checked but for its data.
    ConfigError, ProjectNotFoundError or SystemExit (argparse) if it would be refused."""
    args = _parser().parse_intermixed_args(list(argv))
    if args.nodes < 1:
        raise ConfigError("at least one SuperNode")
    project = project_root(args.project)
    return checked_deployment(args.nodes, read_config(args.items), project, data=False)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_intermixed_args(argv)
    if args.nodes < 1:
        _say("error: at least one SuperNode")
        return 2
    try:
        config = read_config(args.items)
    except ConfigError as error:
        _say(f"error: {error}")
        return 2
    if args.insecure and args.secure:
        _say("error: --secure and --insecure exclude each other (secure is the default)")
        return 2
    if args.check:
        try:
            checked_deployment(args.nodes, config, project_root(args.project))
        except (ConfigError, ProjectNotFoundError) as error:
            _say(f"error: {error}")
            return 2
        _say("checked: the configuration and the data are good; the deployment can start")
        return 0
    if args.insecure:
        _say(INSECURE_WARNING)
    folder = Path(args.keep or tempfile.mkdtemp(prefix="fedrec-deploy-")).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    timings = folder / "node-timings.jsonl" if args.timings else None
    if timings is not None:
        timings.unlink(missing_ok=True)
        os.environ[node_timing.ENV] = str(timings)  # inherited by the SuperNodes
    status, run_dir = "not-started", None
    with signals_interrupt():
        try:
            status, run_dir = deploy_local(
                args.nodes, config, folder, not args.insecure, args.timeout, project=args.project
            )
        except (ConfigError, ProjectNotFoundError) as error:
            _say(f"error: {error}")
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
            return 2
        except RunInterrupted as interrupt:
            what = f"run {interrupt.run_id}: {interrupt.status}" if interrupt.run_id else "no run"
            _say(f"interrupted by {signal.Signals(interrupt.signum).name}; {what}")
            return 128 + interrupt.signum
        except Exception as error:
            _say(f"error: {type(error).__name__}: {error}")
            _say(f"logs kept in {folder}")
            return 1
    if run_dir is not None:
        print(report(run_dir, timings))
    print(f"run status: {status}")
    if status != COMPLETED or args.keep:
        _say(f"logs and data kept in {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if status == COMPLETED else 1


if __name__ == "__main__":
    sys.exit(main())
