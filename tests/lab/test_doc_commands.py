"""Every ``fedrec`` and ``flwr`` command the docs show works when pasted into bash.

The commands are those in fenced blocks of README.md and docs/, and in the comment headers
of the presets (conf/). Each runs through a real shell (``bash -c``), in a folder that sees
the project's files, with ``fedrec`` and ``flwr`` standing for shell functions that record
their arguments: quoting, word splitting and redirections are bash's own. The recorded
arguments are then checked as the command checks them before it starts anything
(``fedrec_lab.cli.check_arguments``; for ``flwr``, Flower's own parser and the run
configuration's check). A user's file the command names (``data-file=...``) is generated
with the columns the command maps, and read and split as ``fedrec run --check`` would; a
named dataset's data is checked when ``FEDREC_DATA_DIR`` holds it, else the configuration
alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMAND = re.compile(r"^\s*(?:\$ )?((?:fedrec|flwr) .*|(?:fedrec|flwr))$")
HEADER_COMMAND = re.compile(r"^#\s+((?:fedrec|flwr) .*)$")
#: The shell functions standing for the two commands: each call's arguments, NUL-separated,
#: into a file of its own.
PRELUDE = """
calls=0
record() { calls=$((calls + 1)); printf '%s\\0' "$@" > "$RECORD.$calls"; }
fedrec() { record fedrec "$@"; }
flwr() { record flwr "$@"; }
"""
#: Commands that read what an earlier command on the same page wrote (the tuned preset of
#: `fedrec tune`): their arguments are parsed, the file they name is not read.
WRITTEN_BEFORE = (re.compile(r"results/tune/\S+-tuned\.toml"),)


@dataclass(frozen=True)
class Command:
    source: str  # file:line
    text: str

    def __str__(self) -> str:
        return self.source


def fenced_commands(path: Path) -> list[Command]:
    """The ``fedrec``/``flwr`` command lines in the fenced blocks of a Markdown page, each
    with its continuation lines (a line ending in a backslash)."""
    found, fenced = [], False
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        match = COMMAND.match(line) if fenced else None
        if not match:
            continue
        start, text = index, match.group(1)
        while text.rstrip().endswith("\\") and index < len(lines):
            text = text.rstrip()[:-1] + " " + lines[index].strip()
            index += 1
        found.append(Command(f"{path.relative_to(ROOT)}:{start}", text))
    return found


def header_commands(path: Path) -> list[Command]:
    """The commands in a preset's comment header (``# fedrec run conf/...``)."""
    found = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.startswith("#"):
            break
        match = HEADER_COMMAND.match(line)
        if match:
            found.append(Command(f"{path.relative_to(ROOT)}:{number}", match.group(1)))
    return found


def documented_commands() -> list[Command]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    presets = sorted((ROOT / "conf").rglob("*.toml"))
    return [c for p in pages for c in fenced_commands(p)] + [
        c for p in presets for c in header_commands(p)
    ]


COMMANDS = documented_commands()


def test_the_docs_show_commands() -> None:
    sources = {c.source.split(":")[0] for c in COMMANDS}
    assert {"README.md", "docs/own-data.md", "docs/deployment.md"} <= sources
    assert any(s.startswith("conf/") for s in sources)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    """A folder that sees the project's top-level files (presets are found as in the
    project), where whatever a command would write lands."""
    with tempfile.TemporaryDirectory(prefix="fedrec-doc-commands-") as folder:
        work = Path(folder)
        for entry in ROOT.iterdir():
            if entry.name not in {".git", ".venv", "results", "logs"}:
                (work / entry.name).symlink_to(entry)
        yield work


@pytest.fixture(scope="module")
def cache() -> Iterator[Path]:
    """One cache for the module: a dataset is split once, whichever command reads it."""
    with tempfile.TemporaryDirectory(prefix="fedrec-doc-cache-") as folder:
        yield Path(folder)


def shell_calls(command: Command, workdir: Path, record: Path) -> list[list[str]]:
    """Run ``command`` in bash with the recording functions; the argument lists of its
    calls."""
    done = subprocess.run(
        ["bash", "-c", PRELUDE + command.text],
        cwd=workdir,
        env={**os.environ, "RECORD": str(record)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        pytest.fail(f"{command}: bash refused `{command.text}`:\n{done.stderr}")
    files = sorted(record.parent.glob(f"{record.name}.*"), key=lambda p: int(p.suffix[1:]))
    calls = [p.read_bytes().decode().split("\0")[:-1] for p in files]
    if not calls:
        pytest.fail(f"{command}: `{command.text}` calls neither fedrec nor flwr")
    return calls


# --- the data a command names -----------------------------------------------------------------

ROLES = ("user", "item", "rating", "timestamp")
FILE_KEYS = ("data-file", *(f"{role}-column" for role in ROLES))


def file_settings(argv: list[str]) -> dict[str, str]:
    """The file keys among ``key=value`` items and ``--key value`` options."""
    found: dict[str, str] = {}
    for index, arg in enumerate(argv):
        key, sep, value = arg.lstrip("-").partition("=")
        if key in FILE_KEYS and sep:
            found[key] = value
        elif arg.startswith("--") and key in FILE_KEYS and index + 1 < len(argv):
            found[key] = argv[index + 1]
    return found


def write_user_file(argv: list[str], workdir: Path) -> None:
    """The file a command's ``data-file`` names (relative, so under ``workdir``), generated
    with the columns its keys map: 30 users, 8 rows each, ratings 4 and 5. Columns given by
    position (or ``header=false``): a file without a header, user, item, rating and time in
    this order."""
    keys = file_settings(argv)
    if not keys.get("data-file") or Path(keys["data-file"]).is_absolute():
        return
    rows = [
        [f"u{u}", f"i{(u + k) % 12}", str(4 + (u + k) % 2), str(100 * u + k)]
        for u in range(30)
        for k in range(8)
    ]
    given = {role: keys.get(f"{role}-column", "auto") for role in ROLES}
    positions = "header=false" in argv or any(v.isdigit() for v in given.values())
    columns = ["user_id", "item_id", "rating", "timestamp"]
    for role, name in given.items():
        if name not in ("auto", "") and not name.isdigit():
            columns[ROLES.index(role)] = name
    if given["rating"] == "" or "rating-column" not in keys:
        columns[2] = "stars"  # read by no key
    path = workdir / keys["data-file"]
    path.parent.mkdir(parents=True, exist_ok=True)
    if positions:
        path.write_text("".join(" ".join(row) + "\n" for row in rows))
    elif path.suffix == ".inter":
        types = ("token", "token", "float", "float")
        header = "\t".join(f"{n}:{t}" for n, t in zip(columns, types, strict=True))
        path.write_text(header + "\n" + "".join("\t".join(row) + "\n" for row in rows))
    else:
        path.write_text("".join(",".join(row) + "\n" for row in [columns, *rows]))


def data_available(config: dict) -> bool:
    """Whether a run's data can be checked here: a generated file, generated data, or a named
    dataset in ``FEDREC_DATA_DIR`` (and no other data-dir)."""
    from fedrec_flwr.data.registry import SOURCES

    dataset = config.get("dataset", "ml-100k")
    if dataset in ("file", "synthetic"):
        return True
    folder = os.environ.get("FEDREC_DATA_DIR", "")
    source = SOURCES.get(dataset)
    return bool(
        folder and source and not config.get("data-dir") and (Path(folder) / source.folder).is_dir()
    )


# --- the checks -------------------------------------------------------------------------------


def unparsed(context) -> list[str]:
    """A click group's arguments left for its subcommand (click keeps them in two lists)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # click 8.2's protected_args
        return [*context.protected_args, *context.args]


def check_flwr(argv: list[str], where: str) -> None:
    """Flower's own parser on ``flwr ARGV`` (no command runs); a ``flwr run`` configuration
    (``--run-config``: a TOML file or key=value pairs) as the ServerApp will check it."""
    import click
    import typer
    from flwr.cli.app import app
    from flwr.common.config import parse_config_args

    from fedrec_lab.launch import check_run_config

    command: click.Command = typer.main.get_command(app)
    context = command.make_context("flwr", list(argv))
    while isinstance(command, click.Group) and (rest := unparsed(context)):
        name, *rest = rest
        sub = command.get_command(context, name)
        assert sub is not None, f"{where}: flwr has no command {name!r}"
        command, context = sub, sub.make_context(name, rest, parent=context)
    if context.info_name == "run" and context.params.get("run_config_overrides"):
        config = parse_config_args(list(context.params["run_config_overrides"]))
        check_run_config(config, ROOT, data=False)


def check_call(argv: list[str], where: str, workdir: Path, read_presets: bool) -> None:
    """``argv`` (``fedrec ...`` or ``flwr ...``) checked as the command checks it."""
    from fedrec_lab import cli
    from fedrec_lab.launch import check_data

    if argv[0] == "flwr":
        check_flwr(argv[1:], where)
        return
    if not read_presets:
        cli.command_of(argv[1:])
        return
    write_user_file(argv[1:], workdir)
    name, checked = cli.check_arguments(argv[1:])
    if name in ("run", "deploy-local") and data_available(checked):
        check_data(checked, workdir)


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_a_documented_command_works_in_bash(
    command: Command, workdir: Path, cache: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("FEDREC_CACHE_DIR", str(cache))
    for argv in shell_calls(command, workdir, tmp_path / "call"):
        written = any(p.search(" ".join(argv)) for p in WRITTEN_BEFORE)
        where = f"{command}: `{command.text}`"
        try:
            check_call(argv, where, workdir, read_presets=not written)
        except SystemExit as refused:  # argparse's exit: its message is on stderr
            if refused.code not in (0, None):
                pytest.fail(f"{where} is refused: {refused}\n{capsys.readouterr().err}")
        except Exception as error:  # ConfigError, ValueError, click's UsageError ...
            pytest.fail(f"{where} is refused: {type(error).__name__}: {error}")


BROKEN = {
    "a placeholder bash reads as a redirection": "fedrec run --resume results/<run-name>",
    "a value not of its key's type": "fedrec run seed=one",
    "an unknown key": "fedrec run num-server-round=3",
    "a preset that is not there": "fedrec run conf/no-such-preset.toml",
    "an unknown option": "fedrec deploy-local 3 --fast",
    "flwr's run config is TOML: a bare word is none": "flwr run . --run-config dataset=file",
    "a shell error": "fedrec run 'dataset=file",
}


@pytest.mark.parametrize("why", BROKEN)
def test_a_broken_command_fails_the_check(why, workdir, cache, tmp_path, monkeypatch, capsys):
    with pytest.raises(pytest.fail.Exception):
        test_a_documented_command_works_in_bash(
            Command("x.md:1", BROKEN[why]), workdir, cache, tmp_path, monkeypatch, capsys
        )
