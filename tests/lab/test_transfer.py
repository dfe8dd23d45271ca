"""The transfer study (``bench/transfer.py``, :mod:`fedrec_lab.transfer`): its reference per
dataset, its leave-one-dataset-out choice and its report, on fake cells (no run here)."""

from __future__ import annotations

import pytest
from transfer_cells import finished_cell as cell

from fedrec_lab.transfer import choice as study
from fedrec_lab.transfer import report


def knn(target: str, rate: float) -> dict:
    out = cell("itemknn", "k=50", target, rate)
    return {k: out[k] for k in ("method", "candidate", "target", "test_hr10", "users", "hits")}


# fedmf: the ML-100K setting is best at home but falls to half on Last.fm-2K; the Last.fm-2K
# setting keeps 0.9 of ML-100K's tuned score: its worst held-out ratio is higher.
CELLS = [
    cell("fedmf", "ml100k", "ml100k", 0.20),
    cell("fedmf", "lastfm2k", "ml100k", 0.18),
    cell("fedmf", "ml100k", "lastfm2k", 0.10),
    cell("fedmf", "lastfm2k", "lastfm2k", 0.20),
    cell("fedmf", "ml100k", "synthetic", 0.40),
    cell("fedmf", "lastfm2k", "synthetic", 0.30),
]
KNN = {
    "ml100k": knn("ml100k", 0.15),
    "lastfm2k": knn("lastfm2k", 0.12),
    "synthetic": knn("synthetic", 0.5),
}


def test_the_reference_is_the_tuned_preset_else_the_best_measured():
    own, tuned = study.reference_cell(CELLS, "fedmf", "lastfm2k")
    assert (own["candidate"], tuned) == ("lastfm2k", True)
    best, tuned = study.reference_cell(CELLS, "fedmf", "synthetic")
    assert (best["candidate"], tuned) == ("ml100k", False)


def test_the_default_has_the_best_worst_held_out_ratio():
    summary = study.summarise(CELLS, KNN)
    (choice,) = summary["choices"]
    scores = {c["candidate"]: c for c in choice["candidates"]}
    # ml100k held out on lastfm2k (0.10 / 0.20) and synthetic (0.40 / 0.40)
    assert scores["ml100k"]["worst_ratio"] == pytest.approx(0.5)
    assert scores["ml100k"]["held_out"] == ["lastfm2k", "synthetic"]
    # lastfm2k held out on ml100k (0.18 / 0.20) and synthetic (0.30 / 0.40)
    assert scores["lastfm2k"]["worst_ratio"] == pytest.approx(0.75)
    assert choice["default"] == "lastfm2k"


def test_ties_on_the_worst_case_go_to_the_higher_mean_ratio():
    rows = [
        {"method": "m", "candidate": "a", "target": "b", "ratio": 0.8},
        {"method": "m", "candidate": "a", "target": "c", "ratio": 0.9},
        {"method": "m", "candidate": "b", "target": "a", "ratio": 0.8},
        {"method": "m", "candidate": "b", "target": "c", "ratio": 1.0},
        {"method": "m", "candidate": "a", "target": "a", "ratio": 1.0},  # at home: not scored
    ]
    assert study.choose(rows, "m")["default"] == "b"


def test_a_method_without_a_held_out_score_is_refused():
    rows = [{"method": "m", "candidate": "a", "target": "a", "ratio": 1.0}]
    with pytest.raises(ValueError, match="not tuned on"):
        study.choose(rows, "m")


def test_differences_are_paired_and_the_report_names_reference_and_itemknn():
    summary = study.summarise(CELLS, KNN)
    rows = {(r["candidate"], r["target"]): r for r in summary["rows"]}
    moved = rows[("ml100k", "lastfm2k")]
    assert moved["ratio"] == pytest.approx(0.5)
    # the same users, the first 20 hit against the first 40: a difference of exactly -10 points
    assert moved["vs_reference"]["mean"] == pytest.approx(-0.10)
    assert moved["vs_reference"]["low"] == pytest.approx(-0.10 - 0.05, abs=0.05)
    assert moved["vs_itemknn"]["mean"] == pytest.approx(-0.02)
    low, high = moved["ci"]
    assert low < 0.10 < high
    settings = {"seed": 0, "rounds": 50, "patience": 10}
    text = report.markdown(summary, "python bench/transfer.py --data-dir DIR", settings)
    assert "| fedmf | Last.fm-2K | tuned on ML-100K | 10.00 |" in text
    assert (
        "| fedmf | synthetic 1500 x 500, 15 per user | tuned on ML-100K (best measured) |" in text
    )
    assert (
        "| fedmf | tuned on Last.fm-2K | ML-100K, synthetic 1500 x 500, 15 per user | 0.750" in text
    )
    assert "| Last.fm-2K | fedmf | tuned on Last.fm-2K (own) | 20.00 | 12.00 | +8.00" in text
    assert text.count("ItemKNN, cosine (centralized, k=50)") == 3
    # the best default per dataset; on its own dataset the default is not transferred
    assert "| Last.fm-2K | fedmf (tuned on Last.fm-2K) | 20.00 | +8.00" in text
    assert (
        text.split("| Last.fm-2K | fedmf (tuned on Last.fm-2K) |")[1]
        .splitlines()[0]
        .endswith("| - | - | - |")
    )
    assert "| 18.00 | +3.00 [" in text.split("| ML-100K | fedmf (tuned on Last.fm-2K) |")[1]


def test_the_default_preset_scored_as_a_setting_is_held_out_everywhere(tmp_path, monkeypatch):
    # conf/fedmf-default.toml as a third setting, tuned on none of the datasets: every
    # dataset is held out for it, it is named by its preset, and it may win the choice
    cells = [
        *CELLS,
        cell("fedmf", "default", "ml100k", 0.20),
        cell("fedmf", "default", "lastfm2k", 0.20),
        cell("fedmf", "default", "synthetic", 0.42),
    ]
    summary = study.summarise(cells, KNN)
    (choice,) = summary["choices"]
    scores = {c["candidate"]: c for c in choice["candidates"]}
    assert scores["default"]["held_out"] == ["ml100k", "lastfm2k", "synthetic"]
    assert choice["default"] == "default"
    settings = {"seed": 0, "rounds": 50, "patience": 0}
    text = report.markdown(summary, "python bench/transfer.py --data-dir DIR", settings)
    assert "| fedmf | Last.fm-2K | `conf/fedmf-default.toml` | 20.00 |" in text
    assert "| fedmf | `conf/fedmf-default.toml` | ML-100K, Last.fm-2K, synthetic" in text
    assert "so every dataset is held out for it" in text
    # --presets leaves a default preset that is itself the best as it is
    monkeypatch.setattr(report, "conf_dir", lambda: tmp_path)
    assert report.write_default_presets(summary, "cmd", 0) == []
    assert not list(tmp_path.iterdir())


def test_presets_leave_a_default_of_its_own_that_the_study_did_not_score(
    tmp_path, monkeypatch, capsys
):
    # a study of the tuned presets alone picks Last.fm-2K's; a default preset that is no
    # tuned preset's setting (chosen by a study that scored it) must survive --presets
    monkeypatch.setattr(report, "conf_dir", lambda: tmp_path)
    (tmp_path / "fedmf-ml100k-strict.toml").write_text(
        'method = "fedmf"\ndataset = "ml-100k"\nlr = 1.0\n'
    )
    (tmp_path / "fedmf-lastfm2k-strict.toml").write_text(
        'method = "fedmf"\ndataset = "lastfm-2k"\nlr = 2.0\n'
    )
    own = tmp_path / "fedmf-default.toml"
    own.write_text('method = "fedmf"\nlr = 3.0\n')
    candidates = [
        {"candidate": "ml100k", "worst_ratio": 0.8, "mean_ratio": 0.8},
        {"candidate": "lastfm2k", "worst_ratio": 0.9, "mean_ratio": 0.9},
    ]
    summary = {"choices": [{"method": "fedmf", "default": "lastfm2k", "candidates": candidates}]}
    assert report.write_default_presets(summary, "cmd", 0) == []
    assert own.read_text() == 'method = "fedmf"\nlr = 3.0\n'
    assert "add `default` to --candidates" in capsys.readouterr().err
    # a default that is a tuned preset's setting is the study's to replace
    own.write_text('method = "fedmf"\nlr = 1.0\n')
    assert report.write_default_presets(summary, "cmd", 0) == [own]
    assert "conf/fedmf-lastfm2k-strict.toml (tuned on Last.fm-2K)" in own.read_text()


def test_early_stopping_cuts_a_run_where_the_server_would():
    val = [0.10, 0.05, 0.06, 0.10, 0.07, 0.20, 0.19]  # equal to the best is no improvement
    assert study.early_stopped(val, 0) == (7, 6)
    assert study.early_stopped(val, 3) == (4, 1)
    assert study.early_stopped(val, 5) == (7, 6)
