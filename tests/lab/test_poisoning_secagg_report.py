"""``bench/poisoning_secagg.py --table``: every committed report regenerates byte for byte
from its JSON and the last command it records (the report module is the script's)."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
REPORTS = sorted(p.with_suffix(".md") for p in RESULTS.glob("poisoning-secagg*.json"))


@pytest.fixture
def script(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import poisoning_secagg

    return poisoning_secagg


def test_there_are_reports():
    assert len(REPORTS) >= 5


@pytest.mark.parametrize("report", REPORTS, ids=lambda p: p.stem)
def test_report_regenerates(report: Path, script, tmp_path, monkeypatch):
    record = json.loads(report.with_suffix(".json").read_text())
    args = shlex.split(record["commands"][-1])[2:]  # after "python bench/poisoning_secagg.py"
    out = tmp_path / report.name
    shutil.copy(report.with_suffix(".json"), out.with_suffix(".json"))
    where = args.index("--out")
    args[where + 1] = str(out)
    monkeypatch.setattr(sys, "argv", ["poisoning_secagg.py", *args, "--table"])
    assert script.main() == 0
    assert out.read_text() == report.read_text()


def test_a_changed_run_changes_the_report(script, tmp_path, monkeypatch):
    report = RESULTS / "poisoning-secagg-fedmf.md"
    record = json.loads(report.with_suffix(".json").read_text())
    for entry in record["runs"][0]["history"]:
        entry["test-hr@10"] += 0.01
    out = tmp_path / report.name
    out.with_suffix(".json").write_text(json.dumps(record))
    args = shlex.split(record["commands"][-1])[2:]
    args[args.index("--out") + 1] = str(out)
    monkeypatch.setattr(sys, "argv", ["poisoning_secagg.py", *args, "--table"])
    assert script.main() == 0
    assert out.read_text() != report.read_text()
