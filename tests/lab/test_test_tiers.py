"""The test tiers' measurement (``bench/test_tiers.py``, :mod:`fedrec_lab.tiers`): its reading
of pytest's summary and its report, on a fake result (no pytest run here)."""

from __future__ import annotations

import json
from pathlib import Path

from fedrec_lab import tiers


def tier(name: str, seconds: float, failed_tests: list[str], **counts: int) -> dict:
    return {
        "tier": name,
        "command": "python -m pytest" + (" -m slow" if name == "slow" else ""),
        "exit_code": 1 if failed_tests else 0,
        "seconds": seconds,
        "counts": {outcome: counts.get(outcome, 0) for outcome in tiers.OUTCOMES},
        "failed_tests": failed_tests,
        "load_before": [1.5, 1.25, 1.0],
        "load_after": [3.25, 2.0, 1.5],
    }


FAKE = {
    "command": "python bench/test_tiers.py",
    "date": "2026-01-02 03:04 UTC",
    "commit": "abc1234",
    "uncommitted_changes": False,
    "nproc": 2,
    "python": "3.11.7",
    "data_dir": "../shared/datasets",
    "tiers": [
        tier("fast", 612.44, [], passed=900, skipped=3, deselected=40),
        tier("slow", 1234.5, ["tests/lab/test_x.py::test_y"], passed=38, failed=1, skipped=1),
    ],
}


def test_the_counts_are_those_of_pytests_last_summary_line() -> None:
    output = (
        "tests/a.py ....s\n"
        "SKIPPED [1] tests/a.py:3: no data\n"
        "FAILED tests/b.py::test_c - assert 1 == 2\n"
        "ERROR tests/d.py::test_e - RuntimeError\n"
        "=== 1 failed, 12 passed, 2 skipped, 5 deselected, 1 error, 1 xfailed in 9.1s ===\n"
    )
    assert tiers.counts(output) == {
        "passed": 12,
        "skipped": 2,
        "failed": 1,
        "errors": 1,
        "xfailed": 1,
        "xpassed": 0,
        "deselected": 5,
    }
    assert tiers.FAILED.findall(output) == ["tests/b.py::test_c", "tests/d.py::test_e"]
    assert tiers.counts("no tests ran\n") == dict.fromkeys(tiers.OUTCOMES, 0)


def test_the_report_states_the_command_the_machine_and_each_tier(tmp_path: Path) -> None:
    path = tiers.write(FAKE, tmp_path / "out")
    assert path == tmp_path / "out" / "test-tiers.md"
    assert json.loads((tmp_path / "out" / "test-tiers.json").read_text()) == FAKE
    text = path.read_text()
    assert text == tiers.markdown(FAKE)
    assert "```bash\npython bench/test_tiers.py\n```" in text
    assert "2026-01-02 03:04 UTC, commit abc1234, 2 cores, Python 3.11.7" in text
    assert "(with uncommitted changes)" not in text
    fast = "| fast | `python -m pytest` | 612 | 900 | 3 | 0 | 0 | 40 | 0 | 1.50 / 1.25 / 1.00 |"
    assert fast in text
    assert "| slow | `python -m pytest -m slow` | 1234 | 38 | 1 | 1 | 0 | 0 | 1 |" in text
    assert "Failed:\n\n- slow: `tests/lab/test_x.py::test_y`" in text
    assert "/tmp" not in text and str(tmp_path) not in text


def test_the_readme_sentence_gives_both_tiers_the_cores_and_the_load() -> None:
    assert tiers.sentence(FAKE) == (
        "fast tier 612 s, slow tier 1234 s on 2 cores, load 1.50 to 3.25: "
        "bench/results/test-tiers.md"
    )
    dirty = {**FAKE, "uncommitted_changes": True, "tiers": FAKE["tiers"][:1]}
    assert "commit abc1234 (with uncommitted changes)" in tiers.markdown(dirty)
    assert "Failed" not in tiers.markdown(dirty)
