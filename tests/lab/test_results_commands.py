"""Every command quoted in the committed results (``bench/results``) and in the docs names an
entry point that exists: ``fedrec <command>`` one of the CLI's commands (or a run's preset /
option), ``python -m <module>`` a module that imports and runs as a program, ``python
bench/<script>.py`` (or ``bash bench/<script>.sh``) a file of the project. A result states
the command that produced it: a command that names a moved or removed program fails here."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from fedrec_lab import cli

ROOT = Path(__file__).resolve().parents[2]
#: Where commands are quoted, and the files there that can quote one.
PLACES = ("bench/results", "docs")
TEXT = (".md", ".json", ".txt")

PYTHON_MODULE = re.compile(r"\bpython3?\s+-m\s+([A-Za-z_][\w.]*)")
SCRIPT = re.compile(r"\b(?:python3?|bash)\s+\.?/?((?:bench|\.ci)/[\w./-]+\.(?:py|sh))")
FEDREC = re.compile(r"(?:^|[\s`$(;&|\"])fedrec\s+(\S+)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`([^`]+)`")
INDENTED = re.compile(r"^(?: {4}|\t)(.+)$", re.MULTILINE)


def code_of(path: Path, text: str) -> list[str]:
    """The parts of a file that can hold a command: its code (Markdown: fenced, indented,
    inline), its strings (JSON), all of it (plain text)."""
    if path.suffix == ".json":
        try:
            return list(strings(json.loads(text)))
        except ValueError:
            return [text]
    if path.suffix == ".md":
        rest = FENCE.sub("", text)
        return FENCE.findall(text) + INLINE.findall(rest) + INDENTED.findall(rest)
    return [text]


def strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def commands_in(code: str) -> Iterator[tuple[str, str]]:
    """(kind, name) of each command in ``code``: ``module``, ``script`` or ``fedrec``."""
    for found in PYTHON_MODULE.finditer(code):
        yield "module", found.group(1).rstrip(".")
    for found in SCRIPT.finditer(code):
        yield "script", found.group(1)
    for found in FEDREC.finditer(code):
        yield "fedrec", found.group(1).strip("`\"'),;")


@cache
def runnable_module(name: str) -> str | None:
    """Why ``python -m name`` would fail; None if the module imports and runs as a program."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as error:  # a parent package that does not import
        return f"{type(error).__name__}: {error}"
    if spec is None:
        return "no such module"
    try:
        importlib.import_module(name)
    except Exception as error:  # any import failure makes the command stale
        return f"does not import: {type(error).__name__}: {error}"
    if spec.submodule_search_locations is not None:  # a package runs its __main__
        if importlib.util.find_spec(f"{name}.__main__") is None:
            return "a package without __main__"
        return None
    source = Path(spec.origin or "")
    if source.suffix == ".py" and '__name__ == "__main__"' not in source.read_text():
        return "a module that does not run as a program (no __main__ guard)"
    return None


def fedrec_argument(name: str) -> str | None:
    """Why ``fedrec name ...`` would fail; None if the CLI takes it."""
    if name in ("-h", "--help", "help") or cli.is_run_argument(name):
        return None
    if name.isupper() or re.fullmatch(r"<[^>]*>|\.\.\.|\[.*", name):  # a placeholder
        return None
    command = cli.COMMANDS.get(name)
    if command is None:
        return f"no fedrec command '{name}' (the commands are {', '.join(cli.COMMANDS)})"
    if not hasattr(importlib.import_module(command.module), "main"):
        return f"{command.module} has no main"
    return None


def problem(kind: str, name: str) -> str | None:
    if kind == "module":
        return runnable_module(name)
    if kind == "script":
        return None if (ROOT / name).is_file() else "no such file"
    return fedrec_argument(name)


def quoted_commands(root: Path = ROOT) -> dict[tuple[str, str], set[str]]:
    """Every command quoted in the results and docs: (kind, name) -> the files quoting it."""
    found: dict[tuple[str, str], set[str]] = {}
    for place in PLACES:
        for path in sorted((root / place).rglob("*")):
            if path.suffix not in TEXT or not path.is_file():
                continue
            text = path.read_text(errors="replace")
            for code in code_of(path, text):
                for command in commands_in(code):
                    found.setdefault(command, set()).add(str(path.relative_to(root)))
    return found


def stale(found: dict[tuple[str, str], set[str]]) -> list[str]:
    """Each command that names no existing entry point, with why and where."""
    lines = []
    for (kind, name), files in sorted(found.items()):
        why = problem(kind, name)
        if why:
            shown = {"module": f"python -m {name}", "script": name, "fedrec": f"fedrec {name}"}
            lines.append(f"{shown[kind]}: {why} (in {', '.join(sorted(files))})")
    return lines


def test_every_quoted_command_names_an_existing_entry_point() -> None:
    found = quoted_commands()
    kinds = {kind for kind, _ in found}
    assert kinds == {"module", "script", "fedrec"}, kinds  # the scan sees each form
    assert len(found) >= 20, sorted(found)
    assert stale(found) == []


def test_a_moved_or_missing_entry_point_is_reported(tmp_path: Path) -> None:
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (results / "study.md").write_text(
        "# A study\n\n`python -m fedrec_flwr.tuning conf/x.toml --trials 16`\n\n"
        "```bash\npython bench/no_such_script.py --out x\nfedrec tunes conf/x.toml\n```\n"
    )
    (results / "rows.json").write_text(
        json.dumps({"command": "python -m fedrec_lab.baselines --dataset ml-100k"})
    )
    (tmp_path / "docs" / "page.md").write_text(
        "Run `fedrec run conf/p.toml num-server-rounds=3`, `fedrec COMMAND --help`, then "
        "`python -m fedrec_flwr.results`.\n"
    )
    found = quoted_commands(tmp_path)
    assert set(found) == {
        ("module", "fedrec_flwr.tuning"),
        ("script", "bench/no_such_script.py"),
        ("fedrec", "tunes"),
        ("module", "fedrec_lab.baselines"),
        ("fedrec", "run"),
        ("fedrec", "COMMAND"),
        ("module", "fedrec_flwr.results"),
    }
    reported = "\n".join(stale(found))
    assert "python -m fedrec_flwr.tuning: no such module (in bench/results/study.md)" in reported
    assert "bench/no_such_script.py: no such file" in reported
    assert "no fedrec command 'tunes'" in reported
    assert "python -m fedrec_flwr.results: a module that does not run as a program" in reported
    assert "fedrec_lab.baselines" not in reported and "fedrec run" not in reported
    assert "COMMAND" not in reported
