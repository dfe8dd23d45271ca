"""Early stopping on validation (``early-stopping-patience``): the run stops once validation
HR@10 has not improved for that many evaluated rounds, and reports the best round's metrics."""

import csv

import pytest

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.server_app import run_federation
from fedrec_lab.local_grid import LocalGrid

SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 30,
    "synthetic-items": 400,
    "synthetic-mean-degree": 12,
    "num-server-rounds": 10,
    "batch-size": 32,
    "item-lr": 0.5,
}


pytestmark = pytest.mark.usefixtures("private_cache")


def run(folder, **overrides):
    run_config = {**SMALL, "results-dir": str(folder), **overrides}
    summary = run_federation(
        LocalGrid(client_app, run_config, num_nodes=2), RunConfig.from_mapping(run_config)
    )
    (run_dir,) = folder.iterdir()
    with open(run_dir / "rounds.csv") as f:
        return summary, list(csv.DictReader(f))


def expected_stop(values, patience):
    """Index (0-based) of the evaluated round the run must stop at, or None."""
    best, since = None, 0
    for index, value in enumerate(values):
        if best is None or value > best:
            best, since = value, 0
        else:
            since += 1
            if since >= patience:
                return index
    return None


def test_the_run_stops_where_validation_stopped_improving(tmp_path):
    full, full_rows = run(tmp_path / "full")
    assert full["stopped_early_round"] is None and full["rounds"] == 10
    values = [float(r["val-hr@10"]) for r in full_rows]
    stop = expected_stop(values, patience=2)
    assert stop is not None and stop < 9, f"this setting no longer plateaus: {values}"

    summary, rows = run(tmp_path / "early", **{"early-stopping-patience": 2})
    assert summary["stopped_early_round"] == stop + 1
    assert summary["rounds"] == stop + 1 and len(rows) == stop + 1
    for name in ("train-loss", "val-hr@10", "val-ndcg@10", "test-hr@10", "test-ndcg@10"):
        assert [r[name] for r in rows] == [r[name] for r in full_rows[: stop + 1]], name
    # The test metrics are those of the best validation round among the rounds run.
    best = max(rows, key=lambda r: (float(r["val-hr@10"]), -int(r["round"])))
    assert summary["best_round"] == int(best["round"])
    assert summary["test"]["hr@10"] == pytest.approx(float(best["test-hr@10"]), rel=1e-12)
    assert summary["final_val"]["hr@10"] == pytest.approx(float(rows[-1]["val-hr@10"]))


def test_patience_counts_evaluated_rounds_only(tmp_path):
    settings = {"eval-every": 2, "seed": 3}
    _, full_rows = run(tmp_path / "full", **settings)
    evaluated = [r for r in full_rows if r["val-hr@10"] != ""]
    stop = expected_stop([float(r["val-hr@10"]) for r in evaluated], patience=2)
    assert stop is not None and int(evaluated[stop]["round"]) < 10, "no plateau any more"
    summary, rows = run(tmp_path / "early", **settings, **{"early-stopping-patience": 2})
    assert summary["stopped_early_round"] == int(evaluated[stop]["round"])
    assert rows[-1]["round"] == evaluated[stop]["round"]


def test_a_plateau_at_the_last_round_is_no_early_stop(tmp_path):
    _, full_rows = run(tmp_path / "full", **{"num-server-rounds": 4})
    values = [float(r["val-hr@10"]) for r in full_rows]
    assert expected_stop(values, patience=1) == 3  # round 4 repeats round 3's best
    summary, rows = run(
        tmp_path / "early", **{"num-server-rounds": 4, "early-stopping-patience": 1}
    )
    assert summary["stopped_early_round"] is None and len(rows) == 4


def test_negative_patience_is_refused():
    with pytest.raises(ConfigError, match="early-stopping-patience=-1 must be >= 0"):
        RunConfig.from_mapping({"early-stopping-patience": -1})
