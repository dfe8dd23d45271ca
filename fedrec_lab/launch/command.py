"""``fedrec run``: a preset and ``key=value`` overrides, or ``--resume RUN_DIR``; the exit
status is the run's (0 only for a completed run, 2 for a refused configuration)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fedrec_lab import progress
from fedrec_lab.launch.default_port import (
    DEFAULT_HTTP_PORT,
    default_superlink_note,
    default_superlink_report,
)
from fedrec_lab.launch.ray_cluster import worker_entries
from fedrec_lab.launch.run_config import (
    ConfigError,
    check_data,
    check_run_config,
    merged_run_config,
    project_defaults,
    with_absolute_paths,
)
from fedrec_lab.launch.runs import COMPLETED, STEPS, RunInterrupted, launch
from fedrec_lab.project import ProjectNotFoundError, project_root


@contextmanager
def signals_interrupt() -> Iterator[None]:
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


def say(message: str) -> None:
    """What the launcher tells its user (standard error, ``fedrec:`` first)."""
    print(f"fedrec: {message}", file=sys.stderr, flush=True)


def parser(prog: str = "fedrec run") -> argparse.ArgumentParser:
    """The options of ``fedrec run``."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run the app through Flower on a private local SuperLink; exit status 0 "
        "only if the run completed (as its run folder shows), 2 if its configuration is "
        "refused; Ctrl-C stops the run and everything it started.",
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
        "--project",
        metavar="DIR",
        help="the project folder (presets, pyproject.toml); default $FEDREC_PROJECT, else the "
        "nearest folder upwards whose pyproject.toml names fedrec-flwr",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="check the configuration and the data (a user's file read and split, a named "
        "dataset found or downloaded), print the dataset card and exit, starting nothing: "
        "0 if the run can start, 2 if not",
    )
    parser.add_argument(
        "--which-superlink",
        action="store_true",
        help="name the SuperLink on Flower's default port (the one `flwr run .` uses) and exit",
    )
    progress.add_switch(parser)
    return parser


def resumed(
    run_dir: str, overrides: dict[str, Any], nodes: int | None, project: Path | None = None
) -> tuple[dict[str, Any], int | None]:
    """``--resume``: the run's own configuration with ``overrides``, checked as the ServerApp
    will check it (:mod:`fedrec_flwr.resume`), and its number of nodes."""
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.resume import CheckpointError, resume_dir, resume_run_config

    try:
        config, needed = resume_run_config(run_dir)
        config.update(overrides)
        resume_dir(RunConfig.from_mapping({**project_defaults(project), **config}))
    except (CheckpointError, ValueError) as error:
        raise ConfigError(str(error)) from None
    if nodes is not None and needed is not None and nodes != needed:
        raise ConfigError(f"--resume {run_dir}: its checkpoint needs --nodes {needed}")
    return config, nodes or needed


def read_config(items: Sequence[str]) -> dict[str, Any]:
    """The preset (a first item ending in ``.toml``) merged with the ``key=value`` items."""
    preset = items[0] if items and items[0].endswith(".toml") else None
    if preset and not Path(preset).is_file():
        raise ConfigError(f"no preset file {preset}; the presets are conf/*.toml")
    try:
        return merged_run_config(preset, items[1:] if preset else items)
    except ValueError as error:  # a preset that does not resolve, an override not key=value
        raise ConfigError(str(error)) from None


def federation_of(args: argparse.Namespace) -> list[str]:
    """``--federation`` entries, after those ``--workers`` implies."""
    federation = list(args.federation)
    if args.workers is not None and args.ray_address:
        raise ConfigError(
            "--workers sizes a new local Ray instance; on a cluster each node's "
            "`ray start --num-cpus` and --federation client-resources-num-cpus=K do"
        )
    if args.workers is not None:
        federation = worker_entries(args.workers) + federation
    return federation


def checked_config(args: argparse.Namespace, data: bool = True) -> tuple[dict[str, Any], Path]:
    """The configuration ``fedrec run`` would submit, checked (with ``data``: its data too,
    as the launch checks it); ConfigError or ProjectNotFoundError otherwise. The card's lines
    are said."""
    project = project_root(args.project)
    config = read_config(args.items)
    federation_of(args)
    if args.resume:
        config, _ = resumed(args.resume, config, args.nodes, project)
    config = with_absolute_paths(config)
    check_run_config(config, project, data=False)
    if data:
        for line in check_data(config, project):
            say(line)
    return config, project


def check_arguments(argv: Sequence[str]) -> dict[str, Any]:
    """The configuration ``fedrec run ARGV`` would submit, checked but for its data (the
    docs' commands are checked so); ``--resume`` names a run folder, which is not read.
    ConfigError, ProjectNotFoundError or SystemExit (argparse) if it would be refused."""
    args = parser().parse_intermixed_args(list(argv))
    if args.resume:
        federation_of(args)
        return read_config(args.items)
    return checked_config(args, data=False)[0]


def check(args: argparse.Namespace) -> int:
    """``fedrec run --check``: the configuration and the data checked, nothing started."""
    try:
        checked_config(args)
    except (ConfigError, ProjectNotFoundError) as error:
        say(f"error: {error}")
        return 2
    say("checked: the configuration and the data are good; the run can start")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``fedrec run [PRESET.toml] [key=value ...] [--nodes N]``, or ``fedrec run --resume
    RUN_DIR [key=value ...]``; the exit status of the run."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["deploy-local"]:
        say("error: a local deployment is `fedrec deploy-local N ...`, not `fedrec run`")
        return 2
    args = parser().parse_intermixed_args(argv)  # settings may stand among the options
    if args.which_superlink:
        report = default_superlink_report()
        print(report or f"No SuperLink on Flower's default port 127.0.0.1:{DEFAULT_HTTP_PORT}.")
        return 0
    if args.check:
        return check(args)
    note = default_superlink_note()
    if note:
        say(f"note: {note}")
    with signals_interrupt():
        try:
            project = project_root(args.project)
            config = read_config(args.items)
            federation = federation_of(args)
            nodes = args.nodes
            if args.resume:
                config, nodes = resumed(args.resume, config, nodes, project)
            with progress.bar(
                len(STEPS), "fedrec: starting", unit="step", enabled=args.progress, leave=False
            ) as steps:
                outcome = launch(
                    config,
                    nodes or 2,
                    federation,
                    project=project,
                    say=say,
                    ray_address=args.ray_address,
                    prepare=True,
                    steps=steps,
                )
        except (ConfigError, ProjectNotFoundError) as error:
            say(f"error: {error}")
            return 2
        except RunInterrupted as interrupt:
            what = f"run {interrupt.run_id}: {interrupt.status}" if interrupt.run_id else "no run"
            say(f"interrupted by {signal.Signals(interrupt.signum).name}; {what}")
            return 128 + interrupt.signum
    print(f"run status: {outcome.status}")
    return 0 if outcome.status == COMPLETED else 1
