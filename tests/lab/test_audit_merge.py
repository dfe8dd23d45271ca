"""`fedrec audit --merge` reads result files in both recorded forms (one command, or a merged
file's list of commands)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedrec_lab.audit.command import main, recorded_commands

COMMITTED = Path(__file__).resolve().parents[2] / "bench" / "results" / "privacy"


def test_recorded_commands_reads_both_forms() -> None:
    assert recorded_commands({"command": "a", "runs": []}) == ["a"]
    assert recorded_commands({"commands": ["a", "b"], "runs": []}) == ["a", "b"]


def test_merge_takes_a_committed_merged_file(tmp_path: Path) -> None:
    source = COMMITTED / "table4-paper.json"
    record = json.loads(source.read_text())
    assert "commands" in record  # the committed form: a merged file
    main(["--merge", str(source), "--out", str(tmp_path), "--tag", "merged"])
    table = (tmp_path / "merged.md").read_text()
    for command in record["commands"]:
        assert command in table


def test_merge_writes_every_run_and_refuses_one_run_twice(tmp_path: Path) -> None:
    runs = json.loads((COMMITTED / "secure-aggregation-audit.json").read_text())["runs"]
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps({"command": "one", "runs": runs[:1]}))
    second.write_text(json.dumps({"commands": ["two", "three"], "runs": runs[1:]}))
    main(["--merge", str(first), str(second), "--out", str(tmp_path), "--tag", "merged"])
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert merged["commands"] == ["one", "two", "three"]
    key = ("method", "config", "seed")
    assert sorted(tuple(r[k] for k in key) for r in merged["runs"]) == sorted(
        tuple(r[k] for k in key) for r in runs
    )
    assert "Command: `one`, `two`, `three`" in (tmp_path / "merged.md").read_text()
    with pytest.raises(SystemExit, match="is in more than one file"):
        main(["--merge", str(first), str(first), "--out", str(tmp_path), "--tag", "twice"])
    assert not (tmp_path / "twice.md").exists()


def test_the_table_shows_the_targets_exposure_only_under_an_attack(tmp_path: Path) -> None:
    """A run under a malicious attack adds ER@10 at the best round, its largest and each
    evaluated round's; a file without one keeps its columns."""
    runs = json.loads((COMMITTED / "secure-aggregation-audit.json").read_text())["runs"][:1]
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"command": "one", "runs": runs}))
    main(["--merge", str(plain), "--out", str(tmp_path), "--tag", "plain"])
    assert "ER@10" not in (tmp_path / "plain.md").read_text()
    attacked = {
        **runs[0],
        "config": "attacked",
        "exposure": {"best": 0.0, "max": 0.25, "rounds": {"1": 0.25, "2": 0.0}},
    }
    both = tmp_path / "both.json"
    both.write_text(json.dumps({"command": "two", "runs": [*runs, attacked]}))
    main(["--merge", str(both), "--out", str(tmp_path), "--tag", "both"])
    table = (tmp_path / "both.md").read_text()
    row = next(line for line in table.splitlines() if "| attacked |" in line)
    assert "| 0.00 ± 0.00 | 25.00 ± 0.00 |" in row
    method = runs[0]["method"]
    assert f"| round | {method} attacked ER@10 (%) |" in table
    assert "| 1 | 25.00 ± 0.00 |" in table and "| 2 | 0.00 ± 0.00 |" in table
