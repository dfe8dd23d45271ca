"""The run recorder's summary: selection on validation, the last round, divergence."""

from __future__ import annotations

import json

import pytest

from fedrec_flwr.config import RunConfig
from fedrec_flwr.results import RunRecorder


def _round(number: int, loss: float, val_hr: float) -> dict:
    return {
        "round": number,
        "train-loss": loss,
        "val-hr@10": val_hr,
        "val-ndcg@10": val_hr / 2,
        "test-hr@10": val_hr - 0.1,
        "test-ndcg@10": val_hr / 3,
        "bytes-down": 10,
        "bytes-up": 20,
    }


@pytest.fixture
def recorder(tmp_path, monkeypatch) -> RunRecorder:
    monkeypatch.setattr(RunRecorder, "plot", lambda self: None)
    config = RunConfig.from_fields(protocol="paper", dataset="synthetic")
    return RunRecorder(tmp_path, config, {"num_users": 3})


def test_a_diverged_run_says_where_and_keeps_the_best_round_before_it(recorder, tmp_path):
    for number, loss, hr in [
        (1, 0.6, 0.3),
        (2, 0.5, 0.5),
        (3, float("nan"), 0.0),
        (4, float("nan"), 0.0),
    ]:
        recorder.record_round(_round(number, loss, hr))
    summary = recorder.finish(1.0)
    assert summary["diverged_round"] == 3
    assert summary["best_round"] == 2
    assert summary["final_val"]["hr@10"] == 0.0
    assert json.loads((tmp_path / "summary.json").read_text())["diverged_round"] == 3


def test_a_finite_run_has_no_divergence_and_reports_its_last_validation(recorder):
    for number, hr in [(1, 0.3), (2, 0.5), (3, 0.4)]:
        recorder.record_round(_round(number, 0.5, hr))
    summary = recorder.finish(1.0)
    assert summary["diverged_round"] is None
    assert summary["best_round"] == 2
    assert summary["final_val"]["hr@10"] == 0.4
