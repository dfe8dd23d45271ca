"""``fedrec tune`` on a method and a dataset: pruning kills a trial's process, the wall-time
budget stops a running trial, a study resumes from its journal, and the preset it writes
reruns its best trial."""

from __future__ import annotations

import json
import time
import tomllib
from pathlib import Path

import pytest

from fedrec_flwr.config import RunConfig
from fedrec_lab import tuning
from fedrec_lab.presets import preset_problems, resolve
from fedrec_lab.project import ENVIRONMENT, project_root
from fedrec_lab.tuning.setup import seconds
from fedrec_lab.tuning.trial import partial_summary, running_best

optuna = pytest.importorskip("optuna")
TINY = ["synthetic-users=30", "synthetic-items=200", "synthetic-mean-degree=8"]


def tune(tmp_path: Path, *extra: str) -> dict:
    """A FedMF study on a tiny synthetic dataset; its JSON report."""
    out = tmp_path / "out"
    tuning.main(
        ["--method", "fedmf", "--dataset", "synthetic", *TINY, "--data-dir", str(tmp_path),
         "--out", str(out), *extra]
    )  # fmt: skip
    return json.loads((out / "fedmf-synthetic-strict.json").read_text())


def test_durations_read_as_seconds():
    assert [seconds(t) for t in ("2h", "90m", "1h30m", "45s", "600", "0.5h")] == [
        7200, 5400, 5400, 45, 600, 1800,
    ]  # fmt: skip
    for bad in ("", "2d", "h", "1m2h"):
        with pytest.raises(Exception, match="no duration"):
            seconds(bad)


def test_a_stopped_trial_keeps_the_best_round_it_ran():
    rows = [
        {"round": "1", "val-hr@10": "0.1", "test-hr@10": "0.05", "val-ndcg@10": "0.05"},
        {"round": "2", "val-hr@10": "0.3", "test-hr@10": "0.2", "val-ndcg@10": "0.1"},
        {"round": "3", "val-hr@10": "0.3", "test-hr@10": "0.1", "val-ndcg@10": "0.1"},
        {"round": "4", "val-hr@10": "nan", "test-hr@10": "nan", "val-ndcg@10": "nan"},
    ]
    assert running_best(rows) == [(1, 0.1), (2, 0.3), (3, 0.3)]
    summary = partial_summary(rows)
    assert summary["best_round"] == 2 and summary["rounds"] == 4
    assert summary["test"]["hr@10"] == 0.2


def test_what_to_tune_is_asked_for_and_bad_settings_fail_before_a_trial(tmp_path, capsys):
    with pytest.raises(SystemExit):
        tuning.main(["--dataset", "synthetic", "--out", str(tmp_path)])
    assert "--method M --dataset D" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tuning.main(["--method", "fedmf", "--dataset", "synthetic", "lr=-1.0",
                     "--out", str(tmp_path)])  # fmt: skip
    assert "lr" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tuning.main(["--method", "fedmf", "--dataset", "synthetic", "no-such-key=1",
                     "--out", str(tmp_path)])  # fmt: skip
    assert "no-such-key" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.journal"))


class PruneAtRound(optuna.pruners.BasePruner):
    """Prunes trial ``number`` once it has reported ``step`` (the others never)."""

    def __init__(self, number: int, step: int) -> None:
        self.number, self.step = number, step

    def prune(self, study, trial) -> bool:
        return trial.number == self.number and (trial.last_step or 0) >= self.step


def test_a_pruned_trial_is_killed_after_the_rounds_it_ran(tmp_path, private_cache):
    config = {"method": "fedmf", "dataset": "synthetic", "data-dir": str(tmp_path)}
    config |= {key: int(value) for key, value in (item.split("=") for item in TINY)}
    space = tuning.space_for(config)
    fixed = {"seed": 0, "num-server-rounds": 5000, "checkpoint-every": 0}
    study = optuna.create_study(direction="maximize", pruner=PruneAtRound(0, 2))
    # the method's defaults, as `fedrec tune` runs first: a sampled point may diverge or stop
    # early and end its process before the watcher reads round 2
    point = tuning.preset_point(config, space)
    assert point is not None
    study.enqueue_trial(point)
    objective = tuning.objective_for(config, space, fixed, tmp_path / "runs", prune=True)
    study.optimize(objective, n_trials=1)
    trial = study.trials[0]
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert trial.user_attrs["stopped"] == "pruned"
    assert trial.user_attrs["rounds"] == 2  # its rounds up to the pruning round
    assert max(trial.intermediate_values) == 2
    run = tmp_path / "runs" / "trial0"
    assert not (run / "summary.json").exists()  # the process ended before finishing


@pytest.mark.slow  # an end-to-end lab run of 15-25 s: the slow tier
def test_a_trial_running_at_the_end_of_the_budget_is_stopped_as_pruned(tmp_path, private_cache):
    data = tune(tmp_path, "--rounds", "5000", "--patience", "0", "--budget", "15s")
    assert data["counts"]["complete"] == 0 and data["counts"]["stopped_at_budget"] == 1
    stopped = data["stopped_trials"][0]
    assert stopped["stopped"] == "budget" and stopped["rounds"] < 5000
    assert data["best"] is None and "--budget 15s" in data["command"]
    assert data["budget"]["invocations"] == 1 and data["budget"]["used_s"] >= 15
    # run again: the budget is spent, nothing starts, the journal's trial is kept
    again = tune(tmp_path, "--rounds", "5000", "--patience", "0", "--budget", "15s")
    assert again["budget"]["invocations"] == 2
    assert [t["number"] for t in again["stopped_trials"]] == [0]


@pytest.mark.slow
def test_a_method_study_resumes_and_its_preset_reruns_the_best_trial(
    tmp_path, private_cache, monkeypatch
):
    first = tune(tmp_path, "--trials", "2", "--rounds", "4")
    assert sorted(t["number"] for t in first["trials"]) == [0, 1]
    start = next(t for t in first["trials"] if t["number"] == 0)
    assert start["preset"] is True  # the method's own defaults come first
    second = tune(tmp_path, "--trials", "3", "--rounds", "4")
    assert sorted(t["number"] for t in second["trials"]) == [0, 1, 2]
    for before in first["trials"]:
        after = next(t for t in second["trials"] if t["number"] == before["number"])
        assert after["params"] == before["params"] and after["val_hr@10"] == before["val_hr@10"]
    preset = tmp_path / "out" / "fedmf-synthetic-strict-tuned.toml"
    text = preset.read_text()
    assert "fedmf-synthetic-strict.md" in text and second["command"] in text
    assert preset_problems(preset) == []
    values = tomllib.loads(text)
    assert values["num-server-rounds"] == 4 and "data-dir" not in values
    assert {k: values[k] for k in second["best"]["params"]} == second["best"]["params"]
    RunConfig.from_mapping(values)
    rerun = tuning.run_trial(
        {**resolve(preset), "data-dir": str(tmp_path), "results-dir": str(tmp_path / "rerun"),
         "run-name": "best"}
    )  # fmt: skip
    assert rerun["val"]["hr@10"] == second["best"]["val_hr@10"]
    assert rerun["test"]["hr@10"] == second["best"]["test_hr@10"]


def test_a_file_study_names_itself_after_the_file_and_keeps_its_relative_path(
    tmp_path, private_cache, monkeypatch
):
    lines = ["visitor,article,ts"]
    lines += [f"u{u},i{(u * 7 + k * 3) % 40},{k}" for u in range(12) for k in range(6)]
    (tmp_path / "clicks.csv").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv(ENVIRONMENT, str(project_root()))
    monkeypatch.chdir(tmp_path)
    tuning.main(
        ["--method", "fedmf", "--dataset", "file", "data-file='clicks.csv'",
         "user-column='visitor'", "item-column='article'", "timestamp-column='ts'",
         "--trials", "1", "--rounds", "2", "--out", "out"]
    )  # fmt: skip
    data = json.loads((tmp_path / "out" / "fedmf-file-clicks-strict.json").read_text())
    assert len(data["trials"]) == 1 and "data-file='clicks.csv'" in data["command"]
    tuned = tomllib.loads((tmp_path / "out" / "fedmf-file-clicks-strict-tuned.toml").read_text())
    assert tuned["data-file"] == "clicks.csv" and tuned["user-column"] == "visitor"


def test_fedrec_tune_is_the_command(capsys):
    from fedrec_lab import cli

    with pytest.raises(SystemExit) as done:
        cli.main(["tune", "--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    assert "--budget" in shown and "--method" in shown and "--pruner" in shown


class Reported:
    """A stand-in for an Optuna trial that keeps what is reported to it."""

    def __init__(self) -> None:
        self.values: dict[int, float] = {}

    def report(self, value: float, step: int) -> None:
        assert step not in self.values, f"round {step} reported twice"
        self.values[step] = value

    def should_prune(self) -> bool:
        return False


def test_a_trial_stopped_early_holds_its_best_to_the_last_round_for_the_pruner():
    """So that a later trial at round r is compared with every complete trial, not only with
    those early stopping let run r rounds."""
    rows = [{"round": str(r), "val-hr@10": str(v)} for r, v in ((1, 0.1), (2, 0.3), (3, 0.2))]
    trial = Reported()
    watch = tuning.Watcher(trial, deadline=None, prune=True)
    watch.report(rows[:2])  # rounds 1-2 seen while it ran
    watch.finish(rows, rounds=6)
    assert trial.values == {1: 0.1, 2: 0.3, 3: 0.3, 4: 0.3, 5: 0.3, 6: 0.3}


def test_an_interrupted_trial_takes_its_process_with_it(tmp_path, private_cache):
    config = {"method": "fedmf", "dataset": "synthetic", "data-dir": str(tmp_path)}
    config |= {key: int(value) for key, value in (item.split("=") for item in TINY)}
    config |= {"num-server-rounds": 5000, "results-dir": str(tmp_path), "run-name": "r"}
    seen = []

    def interrupt(rows):
        if rows:
            seen.append(len(rows))
            raise KeyboardInterrupt
        return None

    with pytest.raises(KeyboardInterrupt):
        tuning.run_trial(config, interrupt)
    rows = len((tmp_path / "r" / "rounds.csv").read_text().splitlines())
    time.sleep(3)  # a process still running would add rounds
    assert len((tmp_path / "r" / "rounds.csv").read_text().splitlines()) == rows
    assert seen and not (tmp_path / "r" / "summary.json").exists()


class Median(Reported):
    """A stand-in trial whose pruner stops it at the first round whose value is below 0.2
    from round 3 on (as a median pruner after its warm-up)."""

    def should_prune(self) -> bool:
        step = max(self.values)
        return step >= 3 and self.values[step] < 0.2


ROWS = [{"round": str(r), "val-hr@10": str(v)}
        for r, v in enumerate((0.1, 0.15, 0.18, 0.19, 0.3, 0.4), start=1)]  # fmt: skip


@pytest.mark.parametrize("looks", [[6], [2, 6], [1, 2, 3, 4, 5, 6], [4, 5, 6]])
def test_pruning_does_not_depend_on_how_many_rounds_each_look_finds(looks):
    """Rounds seen one by one or many at once (a fast or a slow machine), or only when the
    process ended: the trial is pruned at the same round, and its rounds past it are cut."""
    trial = Median()
    watch = tuning.Watcher(trial, deadline=None, prune=True)
    pruned = False
    for seen in looks[:-1]:  # the looks while the process runs, until one prunes it
        if pruned := watch(ROWS[:seen]) == "pruned":
            break
    pruned = pruned or watch.finish(ROWS[: looks[-1]], rounds=6)  # or when it has ended
    assert pruned and watch.pruned_at == 3
    assert sorted(trial.values) == [1, 2, 3]
    assert [row["round"] for row in watch.until_pruned(ROWS)] == ["1", "2", "3"]
