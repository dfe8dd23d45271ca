"""The lab commands are safe by default: without ``--out`` they write into a scratch folder
under the current one, never into the committed results; each takes ``--data-dir``; ``--help``
shows the defaults and works outside the checkout."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedrec_lab import tuning
from fedrec_lab.audit import command as audit
from fedrec_lab.audit.command import shown_argv
from fedrec_lab.baselines import command as baselines
from fedrec_lab.experiments import command as experiments
from fedrec_lab.project import ENVIRONMENT
from fedrec_lab.scratch import SCRATCH, scratch_out

COMMANDS = {"tune": tuning, "audit": audit, "experiments": experiments, "baselines": baselines}
FIRST_ARGUMENT = {"tune": ["conf/x.toml"], "experiments": ["strict"]}


@pytest.fixture(autouse=True)
def wide_help(monkeypatch):
    """``--help`` on one line per option (argparse wraps at $COLUMNS, inside paths too)."""
    monkeypatch.setenv("COLUMNS", "400")


def help_text(name: str, capsys) -> str:
    with pytest.raises(SystemExit) as done:
        COMMANDS[name].main([*FIRST_ARGUMENT.get(name, []), "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_out_defaults_to_a_scratch_folder_and_help_says_so(name, capsys):
    text = help_text(name, capsys)
    assert f"(default: {scratch_out(name)})" in text
    assert "bench/results" not in text.split("(default: ")[-1]
    assert "--data-dir DATA_DIR" in text and "(default: '')" in text


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_shows_the_default_of_options_without_a_help_text(name, capsys):
    text = help_text(name, capsys)
    shown = {"tune": "--rounds ROUNDS (default: 60)", "audit": "--rounds ROUNDS (default: 100)"}
    shown |= {"experiments": "--seeds SEEDS [SEEDS ...] (default: [0, 1, 2])"}
    shown |= {"baselines": "--dataset DATASET (default: ml-100k)"}
    assert shown[name] in text
    assert "(default: None) (default:" not in text and "default 'keep-all'" not in text


def test_scratch_folders_are_outside_the_committed_results():
    assert not SCRATCH.is_absolute() and SCRATCH.parts[0] != "bench"
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(scratch_out("tune") / "x.md")],
        cwd=Path(__file__).resolve().parents[2],
    )
    assert ignored.returncode == 0, "fedrec-out/ must be ignored by git"


@pytest.mark.parametrize("name", ["tune", "experiments", "audit", "baselines"])
def test_help_works_outside_the_checkout(name, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FEDREC_PROJECT"}
    done = subprocess.run(
        [sys.executable, "-m", "fedrec_lab.cli", name, "--help"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "--out OUT" in done.stdout and "fedrec-out" in done.stdout


def test_audit_writes_into_the_scratch_folder_by_default(tmp_path, monkeypatch, capsys):
    committed = Path(__file__).resolve().parents[2] / "bench/results/privacy/table4-paper.json"
    given = tmp_path / "given.json"
    given.write_text(
        json.dumps({"command": "c", "runs": json.loads(committed.read_text())["runs"]})
    )
    monkeypatch.chdir(tmp_path)
    audit.main(["--merge", str(given)])
    table = tmp_path / "fedrec-out" / "audit" / "audit-ml100k.md"
    assert table.is_file()
    assert str(table) in capsys.readouterr().out  # says where the results went


def test_audit_takes_data_dir_into_each_run_and_shows_it_as_dir(monkeypatch, tmp_path):
    seen = {}

    def audited_run(mapping, *args):
        seen.update(mapping)
        return {"best_round": 1, "test": {"hr@10": 0.5}, "attacks": {}}

    monkeypatch.setattr(audit, "audited_run", audited_run)
    settings = {"protocol": "strict", "dataset": "ml-100k", "rounds": 1, "audit_rounds": [1]}
    settings |= {"users": 1, "nodes": 0, "prepared": "", "data_dir": str(tmp_path)}
    record = audit.run_job(settings, ("pfedrec", "none", {}, 0))
    assert seen["data-dir"] == str(tmp_path)
    assert "data_dir" not in record and "prepared" not in record
    assert shown_argv(["--data-dir", "/home/me/data", "--seeds", "0"]) == [
        "--data-dir",
        "DIR",
        "--seeds",
        "0",
    ]


def test_tune_without_data_dir_leaves_it_to_the_environment(monkeypatch, tmp_path):
    ran = []
    monkeypatch.setattr(
        tuning, "run_trial", lambda config, watch=None: ran.append(config) or {"error": "x"}
    )
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)  # outside the checkout: the project is named
    monkeypatch.setenv(ENVIRONMENT, str(root))
    preset = root / "conf" / "pfedrec-ml100k-strict.toml"
    tuning.main([str(preset), "--trials", "1", "--rounds", "1"])
    assert ran and "data-dir" not in ran[0]
    assert (tmp_path / "fedrec-out" / "tune" / "pfedrec-ml100k-strict.md").is_file()
