"""The defaults on generated shapes (``bench/defaults.py``, :mod:`fedrec_lab.transfer.defaults`):
their paired differences to the centralized rows, the two checks and the report, on fake
cells (no run here)."""

from __future__ import annotations

import pytest
from transfer_cells import finished_cell

from fedrec_lab.transfer import cells as transfer_cells
from fedrec_lab.transfer import defaults


def cell(method: str, target: str, rate: float, candidate: str = "default") -> dict:
    """A fake finished cell of ``method``'s default (or ``candidate``) on ``target``."""
    return finished_cell(method, candidate, target, rate)


CENTRAL = {
    "small-dense": {
        "popularity": cell("popularity", "small-dense", 0.20, ""),
        "itemknn": cell("itemknn", "small-dense", 0.25, "k=20"),
        "ease": cell("ease", "small-dense", 0.30, "lambda=500.0"),
    }
}
CELLS = [
    cell("pfedrec", "small-dense", 0.18),
    cell("fedmf", "small-dense", 0.22),
    cell("itemitem", "small-dense", 0.30),
]


def test_differences_are_paired_and_the_checks_name_what_fails():
    summary = defaults.summarise(CELLS, CENTRAL, seed=0)
    rows = {r["method"]: r for r in summary["rows"]}
    # the same users, the first 36 hit against the first 40: exactly -2 points
    assert rows["pfedrec"]["minus"]["popularity"]["mean"] == pytest.approx(-0.02)
    assert rows["fedmf"]["minus"]["itemknn"]["mean"] == pytest.approx(-0.03)
    assert rows["itemitem"]["minus"]["ease"]["mean"] == pytest.approx(0.0)
    (verdict,) = summary["verdicts"]
    assert verdict["below_popularity"] == ["pfedrec"]
    assert verdict["best"] == "itemitem"
    assert verdict["best_minus_itemknn"] == pytest.approx(0.05)


def test_the_report_shows_each_row_and_the_checks():
    summary = defaults.summarise(CELLS, CENTRAL, seed=0)
    settings = {"seed": 0, "rounds": 40, "patience": 0, "targets": ["small-dense"]}
    text = defaults.markdown(summary, "python bench/defaults.py --data-dir DIR", settings)
    assert "### generated small-dense 1336 x 2071, 26 per user" in text
    assert "`synthetic-users = 1336`" in text
    assert "| pfedrec-default | 18.00 |" in text
    assert "| -2.00 [" in text.split("| pfedrec-default |")[1].splitlines()[0]
    assert "| ItemKNN, cosine (centralized, k=20) | 25.00 |" in text
    assert "| popularity (centralized) | 20.00 |" in text
    assert "| pfedrec | itemitem-default | +5.00 |" in text


def test_the_default_candidate_reads_the_default_preset():
    keys = transfer_cells.candidate_keys("pfedrec", transfer_cells.DEFAULT)
    assert keys["method"] == "pfedrec" and "dataset" not in keys
    assert set(defaults.default_methods()) >= {"pfedrec", "fedmf", "itemitem"}
    assert set(transfer_cells.SHAPES) == {"small-dense", "long-tail", "large"}


def test_a_cell_cached_under_other_limits_is_refused(tmp_path):
    import argparse
    import json

    name = transfer_cells.cell_name("fedmf", transfer_cells.DEFAULT, "long-tail")
    (tmp_path / "cells").mkdir()
    record = {**cell("fedmf", "long-tail", 0.2), "max_rounds": 100, "patience": 0}
    record["eval_every"] = 1
    (tmp_path / "cells" / f"{name}.json").write_text(json.dumps(record))
    same = argparse.Namespace(rounds=100, patience=0, seed=0, data_dir=str(tmp_path))
    assert defaults.default_cell("fedmf", "long-tail", same, tmp_path) == record
    other = argparse.Namespace(rounds=30, patience=10, seed=0, data_dir=str(tmp_path))
    with pytest.raises(
        SystemExit, match="100 rounds, patience 0, evaluated every 1, not 30, 10 and 1"
    ):
        defaults.default_cell("fedmf", "long-tail", other, tmp_path)


def test_the_checks_need_popularity_and_itemknn():
    import argparse

    args = argparse.Namespace(central=["popularity", "ease"], targets=["long-tail"])
    with pytest.raises(SystemExit, match="must include itemknn"):
        defaults.measure(args, cache=None)


def test_the_report_says_how_often_the_runs_were_evaluated():
    summary = defaults.summarise(CELLS, CENTRAL, seed=0)
    settings = {"seed": 0, "rounds": 40, "patience": 0, "eval_every": 4, "targets": []}
    text = defaults.markdown(summary, "python bench/defaults.py --data-dir DIR", settings)
    assert "sets), evaluated every 4 rounds and after the last, no early stopping;" in text
    settings["eval_every"] = 1
    text = defaults.markdown(summary, "python bench/defaults.py --data-dir DIR", settings)
    assert "sets), every round evaluated, no early stopping;" in text


def test_a_cell_cached_under_one_seed_never_stands_for_another(tmp_path):
    """A cell's name holds no seed: each seed has a cache of its own (seed 0 the folder
    itself, as before), so a second seed runs instead of reading the first seed's cell."""
    import argparse
    import json

    name = transfer_cells.cell_name("fedmf", transfer_cells.DEFAULT, "long-tail")
    record = {**cell("fedmf", "long-tail", 0.2), "max_rounds": 100, "patience": 0}
    record["eval_every"] = 1
    seed_one = transfer_cells.seed_cache(tmp_path, 1)
    (seed_one / "cells").mkdir(parents=True)
    (seed_one / "cells" / f"{name}.json").write_text(json.dumps(record))
    args = argparse.Namespace(rounds=100, patience=0, seed=1, data_dir=str(tmp_path))
    assert defaults.default_cell("fedmf", "long-tail", args, seed_one) == record
    assert transfer_cells.seed_cache(tmp_path, 0) == tmp_path
    seed_two = transfer_cells.seed_cache(tmp_path, 2)
    assert seed_two != seed_one and not (seed_two / "cells" / f"{name}.json").exists()


def cached_default(tmp_path, edit=None) -> tuple:
    """A fake cell of FedMF's default on the long-tail shape, cached with the setting the
    default preset gives now (``edit``: changes to that setting first), and the args that
    read it back."""
    import argparse
    import json

    args = argparse.Namespace(rounds=100, patience=0, seed=0, data_dir=str(tmp_path))
    keys = transfer_cells.candidate_keys("fedmf", transfer_cells.DEFAULT)
    config = transfer_cells.cell_config(
        "fedmf", transfer_cells.DEFAULT, "long-tail", args, tmp_path / "runs", keys
    )
    config["num-server-rounds"] = min(100, int(keys["num-server-rounds"]))
    config["eval-every"] = 1
    setting = {**transfer_cells.setting_of(config), **(edit or {})}
    record = {**cell("fedmf", "long-tail", 0.2), "max_rounds": 100, "patience": 0}
    record.update(eval_every=1, setting=setting)
    name = transfer_cells.cell_name("fedmf", transfer_cells.DEFAULT, "long-tail")
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / f"{name}.json").write_text(json.dumps(record))
    return record, args


def test_a_cell_cached_with_the_presets_setting_is_read_back(tmp_path):
    record, args = cached_default(tmp_path)
    assert defaults.default_cell("fedmf", "long-tail", args, tmp_path) == record


def test_a_cell_cached_before_the_preset_changed_is_refused(tmp_path):
    """A cell's name holds no keys: a default preset changed since the cell ran must not
    hand back the old setting's figures."""
    _, args = cached_default(tmp_path, edit={"lr": 123.0})
    with pytest.raises(SystemExit, match=r"another setting \(lr = 123.0 there, .* now\)"):
        defaults.default_cell("fedmf", "long-tail", args, tmp_path)


def test_a_cell_cached_without_its_setting_is_read_with_a_warning(tmp_path, capsys):
    import json

    record, args = cached_default(tmp_path)
    del record["setting"]
    name = transfer_cells.cell_name("fedmf", transfer_cells.DEFAULT, "long-tail")
    path = tmp_path / "cells" / f"{name}.json"
    path.write_text(json.dumps(record))
    assert defaults.default_cell("fedmf", "long-tail", args, tmp_path) == record
    assert "cached without its setting" in capsys.readouterr().err


def test_the_setting_stays_out_of_the_reports_rows():
    summary = defaults.summarise([{**CELLS[0], "setting": {"lr": 1.0}}], CENTRAL, seed=0)
    assert all("setting" not in row for row in summary["rows"])
