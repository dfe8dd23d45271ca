"""``python -m fedrec_lab.configref``: Flower's key table and the reference, from the keys."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from fedrec_flwr.schema import POSITIVE, Group, Range, key
from fedrec_lab import configref


class ToyKeys(Group):
    title = "Toy"
    owner = "tests.toy"

    toy_rate: float = key(
        default=1e-5, help="a rate | with a pipe", range=Range(0, 1, low_included=False)
    )
    toy_name: str = key(default='a "b"', help="a name")
    toy_on: bool = key(default=True, help="a switch")
    toy_size: int = key(default=3, help="a size", range=POSITIVE)


GROUP = ToyKeys
PYPROJECT = '[project]\nname = "x"\n\n[tool.flwr.app.config]\nold = 1\n\n[tool.ruff]\nx = 1\n'


def test_defaults_are_written_as_toml_literals():
    table = configref.flower_table([GROUP])
    assert tomllib.loads(table)["tool"]["flwr"]["app"]["config"] == {
        "toy-rate": 1e-5,
        "toy-name": 'a "b"',
        "toy-on": True,
        "toy-size": 3,
    }
    assert "toy-rate = 1e-5\n" in table and configref.toml_value(1e20) == "1e20"


def test_the_flower_table_is_replaced_and_nothing_else():
    text = configref.with_flower_table(PYPROJECT, configref.flower_table([GROUP]))
    assert text.startswith('[project]\nname = "x"\n\n[tool.flwr.app.config]\n# Generated')
    assert text.endswith("toy-size = 3\n\n[tool.ruff]\nx = 1\n")
    assert "old" not in text
    last = configref.with_flower_table("[tool.flwr.app.config]\nold = 1\n", "[t]\n")
    assert last == "[t]\n"
    with pytest.raises(ValueError, match="add the line"):
        configref.with_flower_table("[project]\n", "")


def test_the_reference_has_a_row_per_key_with_its_owner():
    text = configref.reference([GROUP], {})
    assert "## Toy\n\nDeclared in `tests.toy`." in text
    assert "| `toy-rate` | float | `1e-5` | in (0, 1] | a rate \\| with a pipe |" in text
    assert "| `toy-size` | int | `3` | > 0 | a size |" in text


def test_check_and_write_agree(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    assert len(configref.problems(tmp_path)) == 2
    assert configref.main(["--project", str(tmp_path), "--check"]) == 1
    assert configref.main(["--project", str(tmp_path)]) == 0
    assert configref.problems(tmp_path) == []
    table = tomllib.loads((tmp_path / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    assert table["config"]["method"] == "pfedrec"
