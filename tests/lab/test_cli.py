"""``fedrec`` and its subcommands, and how the lab finds the project folder (never through
where its own code lies)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from fedrec_lab import cli, project
from fedrec_lab.project import ENVIRONMENT, ProjectNotFoundError, project_root

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "fedrec_lab"


# --- the project folder ----------------------------------------------------------------------


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current folder outside any project, and no ``$FEDREC_PROJECT``, restored after the
    test even when the test's ``fedrec --project`` sets it (setenv records the variable's
    state before the test; a delenv of an unset variable records nothing)."""
    monkeypatch.setenv(ENVIRONMENT, "")
    monkeypatch.delenv(ENVIRONMENT)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_project_is_found_from_a_folder_below_it(
    monkeypatch: pytest.MonkeyPatch, elsewhere: Path
) -> None:
    monkeypatch.chdir(ROOT / "conf")
    assert project_root() == ROOT


def test_outside_a_project_the_error_says_what_to_do(elsewhere: Path) -> None:
    (elsewhere / "pyproject.toml").write_text('[project]\nname = "another-project"\n')
    with pytest.raises(ProjectNotFoundError) as error:
        project_root()
    message = str(error.value)
    assert f"no fedrec-flwr project found from {elsewhere} upwards" in message
    assert "--project DIR" in message and f"{ENVIRONMENT}=DIR" in message


def test_given_then_environment_then_the_current_folder(
    monkeypatch: pytest.MonkeyPatch, elsewhere: Path
) -> None:
    monkeypatch.setenv(ENVIRONMENT, str(ROOT))
    assert project_root() == ROOT
    assert project.conf_dir() == ROOT / "conf"
    with pytest.raises(ProjectNotFoundError, match=f"--project {elsewhere}: no pyproject.toml"):
        project_root(elsewhere)
    monkeypatch.setenv(ENVIRONMENT, str(elsewhere))
    with pytest.raises(ProjectNotFoundError, match=f"{ENVIRONMENT} {elsewhere}: no pyproject"):
        project_root()
    assert project_root(ROOT) == ROOT


def test_module_level_paths_are_looked_up_when_read(
    monkeypatch: pytest.MonkeyPatch, elsewhere: Path
) -> None:
    from fedrec_lab import baselines, launch, presets

    with pytest.raises(ProjectNotFoundError):
        _ = launch.PROJECT
    monkeypatch.setenv(ENVIRONMENT, str(ROOT))
    assert launch.PROJECT == ROOT
    assert baselines.CONF == presets.CONF == ROOT / "conf"
    with pytest.raises(AttributeError, match="has no attribute 'ELSEWHERE'"):
        _ = launch.ELSEWHERE


def test_no_lab_module_locates_the_repository_through_its_own_file() -> None:
    """``Path(__file__)`` in the lab would break in an installed wheel (no ``conf/`` there)."""
    found = []
    for path in sorted(LAB.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name) and node.id == "__file__":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


# --- the command -----------------------------------------------------------------------------


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Every subcommand's ``main`` replaced by one that records its arguments."""
    import importlib

    seen: dict[str, list[str]] = {}
    for name, command in cli.COMMANDS.items():
        module = importlib.import_module(command.module)

        def record(argv: list[str], name: str = name) -> int:
            seen[name] = list(argv)
            return 3

        monkeypatch.setattr(module, "main", record)
    return seen


def test_each_subcommand_runs_its_module(recorded: dict[str, list[str]]) -> None:
    for name in cli.COMMANDS:
        assert cli.main([name, "--flag", "value"]) == 3
    assert recorded == {name: ["--flag", "value"] for name in cli.COMMANDS}


def test_a_preset_without_a_subcommand_is_a_run(recorded: dict[str, list[str]]) -> None:
    assert cli.main(["conf/pfedrec-ml100k-strict.toml", "seed=1"]) == 3
    assert cli.main(["--resume", "results/x"]) == 3
    assert cli.main(["num-server-rounds=2"]) == 3
    assert list(recorded) == ["run"] and recorded["run"] == ["num-server-rounds=2"]


def test_project_is_taken_anywhere_on_the_line(
    recorded: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch, elsewhere: Path
) -> None:
    assert cli.main(["tune", "conf/x.toml", "--project", str(ROOT), "--trials", "2"]) == 3
    assert recorded["tune"] == ["conf/x.toml", "--trials", "2"]
    assert project_root() == ROOT  # named for the subcommand and what it starts
    monkeypatch.delenv(ENVIRONMENT)
    assert cli.main([f"--project={elsewhere}", "presets", "check"]) == 2
    assert "presets" not in recorded


def test_help_and_unknown_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert f"  {name} " in out
    assert cli.main([]) == 2
    assert cli.main(["tunee"]) == 2
    assert "unknown command 'tunee' (did you mean 'tune'?)" in capsys.readouterr().err


def test_the_console_script_and_the_module_forms_answer() -> None:
    """``fedrec COMMAND --help`` through the installed script; ``python -m`` of the modules
    that became packages."""
    script = Path(sys.executable).with_name("fedrec")
    commands = {
        (sys.executable, "-m", "fedrec_lab.launch", "--help"): "--resume RUN_DIR",
        (sys.executable, "-m", "fedrec_lab.baselines", "--help"): "--local-rounds",
    }
    if script.exists():
        commands[(str(script), "--help")] = "deploy-local"
        commands[(str(script), "run", "--help")] = "usage: fedrec run"
        commands[(str(script), "presets", "--help")] = "{build,check,show}"
    for command, expected in commands.items():
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert done.returncode == 0, (command, done.stderr)
        assert expected in done.stdout, (command, done.stdout)
