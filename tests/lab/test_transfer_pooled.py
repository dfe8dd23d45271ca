"""The defaults on generated shapes over several seeds (``bench/defaults.py --seeds``,
:mod:`fedrec_lab.transfer.pooled`): the mean over seeds, intervals over the users of every
seed, and one seed giving exactly the one-seed report, on fake cells (no run here)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest
from transfer_cells import finished_cell

from fedrec_lab.transfer import cells as transfer_cells
from fedrec_lab.transfer import defaults, pooled
from fedrec_lab.transfer.cells import PER_USER

BENCH = Path(__file__).resolve().parents[2] / "bench"
TARGET = "long-tail"
LIMITS = {"max_rounds": 40, "patience": 0, "eval_every": 5}


def cell(method: str, rate: float, candidate: str = "default") -> dict:
    """A fake cell on the long-tail shape whose first users hit, with their NDCG@10."""
    record = finished_cell(method, candidate, TARGET, rate)
    record["ndcg"] = [h / 2 for h in record["hits"]]
    return record


CENTRAL = {
    TARGET: {"popularity": cell("popularity", 0.20, ""), "itemknn": cell("itemknn", 0.10, "k=5")}
}


def seed_cells(rate: float) -> tuple[list[dict], pooled.Central]:
    """One seed's cells: FedMF's default hitting at ``rate``; popularity at 0.20 and
    ItemKNN at 0.10."""
    return [cell("fedmf", rate)], CENTRAL


def test_two_seeds_give_the_mean_and_an_interval_around_it():
    summary = pooled.pool({0: [cell("fedmf", 0.18)], 1: [cell("fedmf", 0.26)]}, CENTRAL)
    (row,) = summary["rows"]
    assert summary["seeds"] == [0, 1]
    assert row["per_seed_hr10"] == [pytest.approx(0.18), pytest.approx(0.26)]
    assert row["test_hr10"] == pytest.approx(0.22)
    assert row["ci"][0] < 0.22 < row["ci"][1]
    minus = row["minus"]["popularity"]
    # each user's difference averaged over the seeds: +0.02 on the same 200 users
    assert minus["mean"] == pytest.approx(0.02) and minus["users"] == 200
    assert minus["low"] < 0.02 < minus["high"]
    assert row["minus"]["itemknn"]["mean"] == pytest.approx(0.12)
    assert row["minus_ndcg"]["popularity"]["mean"] == pytest.approx(0.01)
    assert row["best_round"] == [40, 40]
    (verdict,) = summary["verdicts"]
    assert verdict["below_popularity"] == [] and verdict["best"] == "fedmf"
    assert verdict["best_minus_itemknn"] == pytest.approx(0.12)


def test_a_row_below_popularity_on_average_is_named():
    summary = pooled.pool({0: [cell("fedmf", 0.16)], 1: [cell("fedmf", 0.22)]}, CENTRAL)
    (row,) = summary["rows"]
    assert row["minus"]["popularity"]["mean"] == pytest.approx(-0.01)
    assert summary["verdicts"][0]["below_popularity"] == ["fedmf"]


def test_one_seed_gives_the_one_seed_figures():
    rng = np.random.default_rng(3)

    def unsorted(record: dict) -> dict:
        """The record with values of every size, its users in another order than sorted (as
        a run's nodes may list them)."""
        order = rng.permutation(len(record["users"]))
        hits = rng.random(len(order)) * np.asarray(record["hits"])
        out = {**record, "hits": hits.tolist(), "test_hr10": float(hits.mean())}
        return {**out, **{k: [out[k][i] for i in order] for k in PER_USER}}

    cells = [unsorted(cell("fedmf", 0.18))]
    central = {TARGET: {n: unsorted(c) for n, c in CENTRAL[TARGET].items()}}
    one = defaults.summarise(cells, central, seed=0)
    summary = pooled.pool({0: cells}, central, seed=0)
    (row,) = summary["rows"]
    assert row["test_hr10"] == one["rows"][0]["test_hr10"]
    assert row["ci"] == one["rows"][0]["ci"]
    assert row["minus"] == one["rows"][0]["minus"]
    for name, central_row in one["central"][TARGET].items():
        assert summary["central"][TARGET][name]["ci"] == central_row["ci"]


def test_seeds_with_other_rows_are_refused():
    with pytest.raises(ValueError, match="seed 1 holds other rows than seed 0"):
        pooled.pool({0: [cell("fedmf", 0.18)], 1: []}, CENTRAL)


@pytest.fixture
def bench_defaults():
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCH))
        yield importlib.import_module("defaults")


def cache_seed(cache: Path, seed: int, rate: float, central: bool = True) -> None:
    """Write one seed's fake cells where ``bench/defaults.py`` reads them (the centralized
    rows too, with ``central``)."""
    folder = transfer_cells.seed_cache(cache, seed) / "cells"
    folder.mkdir(parents=True)
    cells, rows = seed_cells(rate)
    for name, record in rows[TARGET].items() if central else ():
        (folder / f"{name}--on-{TARGET}.json").write_text(json.dumps(record))
    name = transfer_cells.cell_name("fedmf", transfer_cells.DEFAULT, TARGET)
    (folder / f"{name}.json").write_text(json.dumps({**cells[0], **LIMITS}))


def run(bench_defaults, cache: Path, *seeds: str) -> tuple[str, dict]:
    stem = cache / "report"
    argv = ["--data-dir", str(cache), "--cache", str(cache), "--targets", TARGET]
    argv += ["--rounds", "40", "--eval-every", "5", "--methods", "fedmf"]
    argv += ["--central", "popularity", "itemknn", *seeds, "--write", str(stem)]
    assert bench_defaults.main(argv) == 0
    text = stem.with_suffix(".md").read_text()
    record = json.loads(stem.with_suffix(".json").read_text())
    return text.replace(record["command"], "COMMAND"), {**record, "command": "COMMAND"}


def test_the_command_pools_cached_seeds_and_one_seed_is_the_old_report(bench_defaults, tmp_path):
    cache_seed(tmp_path, 0, 0.18)
    cache_seed(tmp_path, 1, 0.26, central=False)  # the first seed's centralized rows serve
    text, record = run(bench_defaults, tmp_path, "--seeds", "1", "0")
    assert "Strict protocol, seeds 0, 1, one node, at most 40 rounds" in text
    assert "| fedmf-default | 22.00 | [" in text
    line = text.split("| fedmf-default |")[1].splitlines()[0]
    assert "| 18.00, 26.00 |" in line and "| +2.00 [" in line and "| 40, 40 / 50 |" in line
    assert record["settings"]["seeds"] == [0, 1]
    kept = [*record["rows"], *record["central"][TARGET].values()]
    assert not [k for row in kept for k in row if k in transfer_cells.PER_USER]
    assert "| popularity (centralized) | 20.00 | [" in text
    one_text, one_record = run(bench_defaults, tmp_path, "--seeds", "0")
    assert (one_text, one_record) == run(bench_defaults, tmp_path, "--seed", "0")
    assert "Strict protocol, seed 0, one node" in one_text
    assert np.isclose(one_record["rows"][0]["test_hr10"], 0.18)
