"""``bench/poisoning_secagg_rows.py`` with the bound that follows the table (``--bound-scale``,
``--bound-floor``): each round's line gives the round's bound, the scale times the table's
median row norm as sent between the floor and ``--bound``; without a scale, ``--bound``."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import pytest

from fedrec_flwr.config import RunConfig
from fedrec_flwr.privacy.bounded.scaled import QUANTUM

BENCH = Path(__file__).resolve().parents[2] / "bench"
SMALL = {
    "method": "fedmf",
    "dataset": "synthetic",
    "synthetic-users": 30,
    "synthetic-items": 200,
    "synthetic-mean-degree": 10,
    "num-server-rounds": 2,
    "batch-size": 32,
    "malicious-attack": "promote",
    "malicious-scale": 100.0,
    "malicious-fraction": 0.1,
}
CEILING, SCALE, FLOOR = 8.0, 0.5, 2.0


@pytest.fixture(scope="module")
def rows():
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCH))
        return importlib.import_module("poisoning_secagg_rows")


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip("| ").split("|")]


def test_each_rounds_bound_follows_the_table_between_floor_and_ceiling(rows):
    config = RunConfig.from_mapping(SMALL)
    scaled = [cells(line) for line in rows.rows_of(config, CEILING, (SCALE, FLOOR))]
    fixed = [cells(line) for line in rows.rows_of(config, CEILING)]
    assert [line[2] for line in scaled] == ["1", "2"]
    assert [float(line[3]) for line in fixed] == [CEILING, CEILING]
    for line in scaled:
        bound, median = float(line[3]), float(line[4])
        want = min(CEILING, max(FLOOR, math.floor(SCALE * median / QUANTUM) * QUANTUM))
        assert FLOOR < bound < CEILING  # this table's median row norm puts it between them
        assert bound == pytest.approx(want, rel=2e-3)  # the line's 3 significant digits
    # a smaller bound clips the promoted target row's change more
    assert float(scaled[0][9].split(" / ")[0]) < float(fixed[0][9].split(" / ")[0])
