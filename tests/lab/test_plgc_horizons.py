"""``fedrec analyze plgc-horizons``: the ablation's cells read as if stopped earlier pick the
runner's best round within each horizon, refuse a rounds.csv that disagrees with its summary,
and pair the rows of each comparison on their shared seeds."""

import csv
import json

import pytest

from fedrec_lab.analysis import horizon
from fedrec_lab.analysis.command import main
from fedrec_lab.experiments.cells import Cell
from fedrec_lab.experiments.tables import ABLATION_ROUNDS, plgc_ablation_rows


def write_cell(runs, key, seed, val, test, summary_best=None):
    """A finished cell of ML-100K's strict ablation: per-round validation and test HR@10."""
    spec = next(s for s in plgc_ablation_rows("strict", ("ml-100k",)) if s.key == key)
    folder = runs / Cell(spec, seed).name
    folder.mkdir(parents=True)
    with (folder / "rounds.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "val-hr@10", "test-hr@10"])
        for k, (v, t) in enumerate(zip(val, test, strict=True), start=1):
            w.writerow([k, v, t])
    best = max(range(len(val)), key=lambda k: val[k])  # first of ties
    summary = {
        "rounds": len(val),
        "best_round": summary_best or best + 1,
        "test": {"hr@10": test[best]},
    }
    (folder / "summary.json").write_text(json.dumps(summary))


def flat(n, value):
    return [value] * n


def test_best_within_takes_the_first_of_ties_among_the_first_rounds():
    rows = [
        {"round": "1", "val-hr@10": "0.2"},
        {"round": "2", "val-hr@10": "0.3"},
        {"round": "3", "val-hr@10": "0.3"},
        {"round": "4", "val-hr@10": "0.5"},
    ]
    assert horizon.best_within(rows, 3)["round"] == "2"
    assert horizon.best_within(rows, 4)["round"] == "4"


def test_a_rounds_file_that_disagrees_with_its_summary_is_refused(tmp_path):
    n = ABLATION_ROUNDS
    write_cell(tmp_path, "pfedrec+r30", 0, flat(n, 0.1), flat(n, 0.1), summary_best=n)
    with pytest.raises(ValueError, match="is not summary"):
        horizon.finished(tmp_path, plgc_ablation_rows("strict", ("ml-100k",))[0])


def test_each_comparison_pairs_shared_seeds_at_every_horizon(tmp_path):
    n = ABLATION_ROUNDS
    # The base peaks at round 5 (test 0.10); PLGC climbs to its last round (test 0.20 at n).
    base_val = [0.1] * 4 + [0.5] + [0.1] * (n - 5)
    base_test = [0.0] * 4 + [0.10] + [0.0] * (n - 5)
    plgc_val = [k / n for k in range(1, n + 1)]
    plgc_test = [0.05] * (n - 1) + [0.20]
    for seed in (0, 1):
        write_cell(tmp_path, "pfedrec+r30", seed, base_val, base_test)
    write_cell(tmp_path, "pfedrec+plgc-r30", 0, plgc_val, plgc_test)
    (record,) = horizon.comparisons(tmp_path, "strict", ("ml-100k",))
    assert record["method"] == "pfedrec+plgc-r30" and record["against"] == "pfedrec+r30"
    assert record["seeds"] == 1 and record["cells"] == 2 and record["last"] == 1
    assert record["difference"][n] == pytest.approx(10.0)
    assert record["difference"][horizon.HORIZONS[-2]] == pytest.approx(-5.0)
    assert horizon.flips(record) and horizon.moved_by(record) == pytest.approx(15.0)

    out = tmp_path / "out"
    argv = ["plgc-horizons", "--runs", str(tmp_path), "--out", str(out)]
    assert main(argv) == 0
    text = (out / "plgc-ablation-strict-horizons.md").read_text()
    assert "| ML-100K | pfedrec+plgc-r30 | pfedrec+r30 | 1 | 1 of 2 |" in text
    assert "1 of 1 differences change sign (ML-100K pfedrec+plgc-r30)" in text
