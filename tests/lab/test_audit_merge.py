"""`fedrec audit --merge` reads result files in both recorded forms (one command, or a merged
file's list of commands)."""

from __future__ import annotations

import json
from pathlib import Path

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
