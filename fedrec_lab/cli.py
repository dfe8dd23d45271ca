"""``fedrec``: the lab's one command, with subcommands as ``flwr`` has them.

    fedrec run conf/pfedrec-ml100k-strict.toml num-server-rounds=10
    fedrec deploy-local 3 conf/pfedrec-ml100k-strict.toml --secure
    fedrec tune | experiments | audit | baselines | presets | export ...

Each subcommand is the ``main`` of its module, which ``python -m <module>`` also runs.
``fedrec PRESET.toml key=value ...`` (no subcommand) is ``fedrec run``. ``--project DIR``,
anywhere on the line, names the project folder (:mod:`fedrec_lab.project`).
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from fedrec_lab.project import ENVIRONMENT, ProjectNotFoundError, project_root


@dataclass(frozen=True)
class Command:
    """A subcommand: the module whose ``main(argv)`` runs it, and what it does."""

    module: str
    summary: str


COMMANDS = {
    "run": Command(
        "fedrec_lab.launch.command",
        "run the app through Flower on a private local SuperLink (a preset, key=value ...)",
    ),
    "deploy-local": Command(
        "fedrec_lab.deploy", "run it on N local SuperNodes, each reading only its own data"
    ),
    "tune": Command(
        "fedrec_lab.tuning",
        "a hyperparameter study of a method on a dataset, or of a preset (Optuna)",
    ),
    "experiments": Command(
        "fedrec_lab.experiments.command", "run and report the experiment tables"
    ),
    "audit": Command("fedrec_lab.audit.command", "the privacy audit: attacks on uploads"),
    "baselines": Command(
        "fedrec_lab.baselines.command", "centralized and local-only reference rows"
    ),
    "presets": Command("fedrec_lab.presets", "build, check or show the presets in conf/"),
    "analyze": Command(
        "fedrec_lab.analysis.command",
        "a run at its best round: generalization gap, sharpness, item views; the SAM table",
    ),
    "export": Command("fedrec_lab.export", "write one data folder per device (its users' rows)"),
}


def usage() -> str:
    """The top-level help."""
    width = max(len(name) for name in COMMANDS)
    lines = [
        "usage: fedrec [--project DIR] COMMAND [ARGS ...]",
        "       fedrec [--project DIR] PRESET.toml [key=value ...]   (= fedrec run ...)",
        "",
        "Personalised federated recommendation on Flower: the launcher and the lab.",
        "",
        "commands:",
        *(f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()),
        "",
        "options:",
        "  --project DIR  the project folder (presets, pyproject.toml); default "
        f"${ENVIRONMENT}, else the nearest folder upwards whose pyproject.toml names "
        "fedrec-flwr",
        "",
        "`fedrec COMMAND --help` describes a command.",
    ]
    return "\n".join(lines)


def take_project(argv: list[str]) -> tuple[str | None, list[str]]:
    """``--project DIR`` (or ``--project=DIR``) taken out of ``argv``: (DIR or None, rest)."""
    project, rest, index = None, [], 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--project":
            if index + 1 >= len(argv):
                raise ProjectNotFoundError("--project needs a folder: --project DIR")
            project, index = argv[index + 1], index + 2
            continue
        if arg.startswith("--project="):
            project = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        index += 1
    return project, rest


def is_run_argument(arg: str) -> bool:
    """Whether ``arg`` starts a bare ``fedrec ...`` run (a preset, ``key=value`` or an
    option of ``fedrec run``)."""
    return arg.endswith(".toml") or "=" in arg or arg.startswith("-")


def command_of(argv: list[str]) -> tuple[str, list[str]]:
    """(subcommand, its arguments) of ``fedrec ARGV`` (``--project`` taken out first);
    ValueError for no or an unknown command."""
    if not argv or argv[0] in ("-h", "--help", "help"):
        raise ValueError(usage())
    name, rest = argv[0], argv[1:]
    if name in COMMANDS:
        return name, rest
    if is_run_argument(name):
        return "run", argv
    hint = difflib.get_close_matches(name, list(COMMANDS), n=1)
    raise ValueError(
        f"unknown command '{name}'"
        + (f" (did you mean '{hint[0]}'?)" if hint else "")
        + f"; the commands are {', '.join(COMMANDS)}, or a preset .toml to run"
    )


def check_arguments(argv: Sequence[str]) -> tuple[str, object]:
    """``fedrec ARGV`` parsed and checked as far as its command checks without data or a
    run (its ``check_arguments``): (command, what it checked). Raises what the command
    would exit with (SystemExit, ConfigError, ValueError)."""
    project, argv = take_project(list(argv))
    if project is not None:
        project_root(project)
    name, rest = command_of(argv)
    module = importlib.import_module(COMMANDS[name].module)
    return name, module.check_arguments(rest)


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to the subcommand's ``main``; its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        project, argv = take_project(argv)
        if project is not None:
            os.environ[ENVIRONMENT] = str(project_root(project))  # checked, then inherited
    except ProjectNotFoundError as error:
        print(f"fedrec: error: {error}", file=sys.stderr)
        return 2
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    try:
        name, rest = command_of(argv)
    except ValueError as error:
        print(f"fedrec: error: {error}", file=sys.stderr)
        return 2
    program = sys.argv[0]
    sys.argv[0] = f"fedrec {name}"  # the usage line of a parser that does not name itself
    try:
        module = importlib.import_module(COMMANDS[name].module)
        return int(module.main(rest) or 0)
    except ProjectNotFoundError as error:
        print(f"fedrec {name}: error: {error}", file=sys.stderr)
        return 2
    finally:
        sys.argv[0] = program


if __name__ == "__main__":
    sys.exit(main())
