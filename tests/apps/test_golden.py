"""Golden regression: a short fixed-seed run of every method preset family reproduces the
numbers stored in ``tests/golden.json`` (see ``tests/golden.py``; regenerate deliberately
with ``python tests/golden.py --update``)."""

import json

import pytest
from golden import FAMILIES, GOLDEN, REGENERATE, differences, message, run_family


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN.read_text())


def test_every_family_has_golden_numbers(golden):
    assert list(golden) == list(FAMILIES), (
        f"tests/golden.json holds {list(golden)}, tests/golden.py runs {list(FAMILIES)}: "
        f"regenerate with `{REGENERATE}`"
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_family_reproduces_its_golden_numbers(family, golden, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path / "cache"))
    got = run_family(family, tmp_path / "results")
    lines = differences(family, golden[family], got)
    assert not lines, message(lines)
