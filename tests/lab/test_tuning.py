"""The Optuna tuner (``python -m fedrec_lab.tuning``): search spaces, preset writing, and a
tiny study that resumes instead of starting over."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.methods import method_card
from fedrec_flwr.methods.plgc import PlgcKeys
from fedrec_flwr.node.optim import SamKeys
from fedrec_lab import tuning
from fedrec_lab.presets import resolve

PRESETS = sorted((Path(__file__).resolve().parents[2] / "conf").glob("*-strict.toml"))


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_every_strict_preset_has_a_space_whose_keys_are_run_config_keys(preset):
    config = resolve(preset)
    space = tuning.space_for(config)
    assert space and set(space) <= set(RunConfig.key_names())
    personal = config["method"] == "pfedrec" or config.get("personalization") == "dual"
    assert ("keep-personal-rows" in space) == (personal and not config.get("plgc-persist"))
    assert ("plgc-alpha" in space) == config.get("plgc", False)


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_every_choice_and_bound_of_a_space_is_a_valid_run_config(preset):
    """A trial must never fail on a setting the space itself offers (FedRAP + PLGC once got
    keep-personal-rows = 'positives', which FedRAP refuses)."""
    config = resolve(preset)
    for key, dim in tuning.space_for(config).items():
        values = dim.choices or (dim.low, dim.high)
        for value in values:
            RunConfig.from_mapping({**config, key: int(value) if dim.integer else value})


def test_the_space_is_the_methods_then_the_other_tuned_keys_by_name():
    """The order Optuna draws them in (a study continued later draws the same)."""
    conf = Path(__file__).resolve().parents[2] / "conf"
    space = tuning.space_for(resolve(conf / "pfedrec-sam-plgc-ml100k-strict.toml"))
    own = list(method_card("pfedrec").search_space)
    assert list(space)[: len(own)] == own == ["lr", "item-lr", "num-negatives"]
    others = list(space)[len(own) :]
    assert others == sorted(others)
    assert {"plgc-alpha", "sam-rho-private", "keep-personal-rows"} <= set(others)


def test_a_preset_of_an_unknown_method_is_refused_saying_what_to_do():
    with pytest.raises(ConfigError, match=r"method='nope' is not known.*Choose one of: pfedrec"):
        tuning.space_for({"method": "nope"})


def test_write_preset_sets_and_adds_keys_and_keeps_comments(tmp_path):
    preset = tmp_path / "p.toml"
    preset.write_text('# why\nmethod = "pfedrec"\nlr = 0.1\n')
    tuning.write_preset(preset, {"lr": 0.25, "keep-personal-rows": "positives"}, "tuned: x")
    text = preset.read_text()
    assert text.startswith("# tuned: x\n# why\n")
    values = tomllib.loads(text)
    assert values == {"method": "pfedrec", "lr": 0.25, "keep-personal-rows": "positives"}


@pytest.mark.slow  # an end-to-end lab run of 15-25 s: the slow tier
def test_a_study_reports_every_trial_and_resumes(tmp_path, private_cache):
    pytest.importorskip("optuna")
    preset = tmp_path / "syn.toml"
    preset.write_text(
        'method = "fedmf"\ndataset = "synthetic"\nsynthetic-users = 30\n'
        "synthetic-items = 200\nsynthetic-mean-degree = 8\n"
    )
    out = tmp_path / "out"
    args = [str(preset), "--data-dir", str(tmp_path), "--rounds", "2", "--out", str(out)]
    tuning.main([*args, "--trials", "2"])
    first = json.loads((out / "syn.json").read_text())
    assert len(first["trials"]) == 2
    assert set(first["trials"][0]["params"]) == set(method_card("fedmf").search_space)
    assert first["best"]["val_hr@10"] == max(t["val_hr@10"] for t in first["trials"])
    preset_trial = next(t for t in first["trials"] if t["number"] == 0)  # the preset first
    assert preset_trial["preset"] is True
    assert preset_trial["params"] == {
        "lr": 0.1,
        "item-lr": 8.0,
        "init-std": 1.0,
        "num-negatives": 4,
    }
    tuning.main([*args, "--trials", "3"])  # one more trial, the first two kept
    second = json.loads((out / "syn.json").read_text())
    assert sorted(t["number"] for t in second["trials"]) == [0, 1, 2]
    for before in first["trials"]:
        after = next(t for t in second["trials"] if t["number"] == before["number"])
        assert after["params"] == before["params"] and after["val_hr@10"] == before["val_hr@10"]
    assert "| trial |" in (out / "syn.md").read_text()
    # out of time: no trial starts after --timeout, the report says what completed
    tuning.main([*args, "--trials", "10", "--timeout", "0.001"])
    third = json.loads((out / "syn.json").read_text())
    assert 3 <= len(third["trials"]) <= 4 and "--timeout 0.001" in third["command"]


def test_plugin_only_tunes_the_plugin_knobs_alone():
    conf = Path(__file__).resolve().parents[2] / "conf"
    sam_plgc = resolve(conf / "pfedrec-sam-plgc-ml100k-strict.toml")
    space = tuning.space_for(sam_plgc, plugin_only=True)
    assert set(space) == set(PlgcKeys.search_space) | set(SamKeys.search_space)
    dual = resolve(conf / "fedmf-dual-ml100k-strict.toml")
    with pytest.raises(ValueError, match="DualPer has none"):
        tuning.space_for(dual, plugin_only=True)


def test_a_plugin_only_study_says_when_the_preset_is_outside_its_space(tmp_path, private_cache):
    """FedMF + SAM on the shared rows only (private radius 0, outside the log space): the
    study tunes both radii, keeps FedMF's keys, and its report says the preset is no trial."""
    pytest.importorskip("optuna")
    preset = tmp_path / "syn-sam.toml"
    preset.write_text(
        'method = "fedmf"\ndataset = "synthetic"\nsynthetic-users = 30\n'
        "synthetic-items = 200\nsynthetic-mean-degree = 8\nlr = 0.3\n"
        "sam-rho-private = 0.0\nsam-rho-shared = 0.05\n"
    )
    out = tmp_path / "out"
    tuning.main(
        [
            str(preset),
            "--data-dir",
            str(tmp_path),
            "--rounds",
            "2",
            "--out",
            str(out),
            "--trials",
            "1",
            "--plugin-only",
        ]
    )
    data = json.loads((out / "syn-sam.json").read_text())
    assert set(data["trials"][0]["params"]) == set(SamKeys.search_space)
    assert "--plugin-only" in data["command"]
    assert "not among them" in (out / "syn-sam.md").read_text()


def test_a_key_value_setting_of_a_tuned_key_holds_it_out_of_the_space(tmp_path, private_cache):
    """Fewer free keys: ``init-std=0.1 num-negatives=2`` leave FedMF's two learning rates to
    tune, and every trial runs with the held values."""
    pytest.importorskip("optuna")
    out = tmp_path / "out"
    base = ["--method", "fedmf", "--dataset", "synthetic", "synthetic-users=30",
            "synthetic-items=200", "synthetic-mean-degree=8", "--data-dir", str(tmp_path),
            "--rounds", "2", "--out", str(out), "--trials", "2"]  # fmt: skip
    tuning.main([*base, "init-std=0.1", "num-negatives=2"])
    data = json.loads((out / "fedmf-synthetic-strict.json").read_text())
    assert list(data["space"]) == ["lr", "item-lr"]
    assert len(data["trials"]) == 2
    assert all(set(t["params"]) == {"lr", "item-lr"} for t in data["trials"])
    tuned = tomllib.loads((out / "fedmf-synthetic-strict-tuned.toml").read_text())
    assert tuned["init-std"] == 0.1 and tuned["num-negatives"] == 2


def test_every_key_held_is_refused_saying_which_to_leave_out(capsys):
    settings = ["lr=0.1", "item-lr=1.0", "num-negatives=2", "keep-personal-rows='tuned'"]
    with pytest.raises(SystemExit):
        tuning.parse(["--method", "pfedrec", "--dataset", "synthetic", *settings])
    assert "leave at least one of them out" in capsys.readouterr().err


def test_tune_outside_a_checkout_fails_before_any_trial(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FEDREC_PROJECT", raising=False)
    with pytest.raises(SystemExit):
        tuning.parse(["--method", "fedmf", "--dataset", "synthetic", "--out", "out"])
    assert "no fedrec-flwr project found" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_study_resumed_with_other_settings_is_refused(tmp_path, private_cache, capsys):
    """Trials with other held keys or rounds must not join a study's report."""
    pytest.importorskip("optuna")
    out = tmp_path / "out"
    base = ["--method", "fedmf", "--dataset", "synthetic", "synthetic-users=30",
            "synthetic-items=200", "synthetic-mean-degree=8", "--data-dir", str(tmp_path),
            "--out", str(out), "--trials", "1"]  # fmt: skip
    tuning.main([*base, "--rounds", "2", "init-std=0.1"])
    record = (out / "fedmf-synthetic-strict.json").read_bytes()
    with pytest.raises(
        SystemExit, match=r"init-std was 0.1, now tuned over \[0.01, 1\] log\).*another --out"
    ):
        tuning.main([*base, "--rounds", "2"])
    with pytest.raises(SystemExit, match=r"num-server-rounds was 2, now 3"):
        tuning.main([*base, "--rounds", "3", "init-std=0.1"])
    assert (out / "fedmf-synthetic-strict.json").read_bytes() == record  # no trial ran
    tuning.main([*base, "--rounds", "2", "init-std=0.1", "--trials", "2"])  # the same: resumed
    data = json.loads((out / "fedmf-synthetic-strict.json").read_text())
    assert len(data["trials"]) + len(data["stopped_trials"]) == 2


def test_a_study_may_go_on_on_another_device_or_data_folder(tmp_path):
    base = ["--method", "fedmf", "--dataset", "synthetic", "init-std=0.1"]
    here = tuning.parse([*base, "--data-dir", str(tmp_path)]).shared()
    there = tuning.parse([*base, "--device", "cuda", "--data-dir", str(tmp_path / "x")]).shared()
    assert here == there and "init-std" in here["start"] and "init-std" not in here["space"]
