"""``fedrec tune``: hyperparameter tuning on validation HR@10 with Optuna (TPE), through the
same ServerApp and ClientApp as ``flwr run`` (an in-process grid of one node, a fresh process
per trial), pruned round by round, within a budget of trials or wall time.

A study starts from a method on a dataset (its reference defaults, the search space its
method and plug-ins declare, :func:`space_for`) or from a preset, seed 0, with early
stopping. Each trial's ``rounds.csv`` is read as it runs: its best validation HR@10 so far
is reported to Optuna's pruner, and a trial the pruner drops has its process killed. Only
validation HR@10 is optimised; test metrics are recorded beside it and never read by the
search. The study lives in ``<out>/<name>.journal`` (Optuna's journal file): running the
same command again continues it (``--trials`` counts finished trials in all, ``--budget``
the wall time of every run of it). ``<out>/<name>.md`` and ``.json`` report every trial;
``<out>/<name>-tuned.toml`` is the best setting as a preset (``fedrec run`` reads it);
``--write-preset`` also copies it into the preset tuned::

    fedrec tune --method fedmf --dataset lastfm-2k --protocol strict --budget 2h --out DIR
    fedrec tune --method pfedrec --dataset file data-file='logs/clicks.csv' user-column='visitor'
    fedrec tune conf/pfedrec-ml100k-strict.toml --trials 20 --rounds 60 --patience 10

Without ``--out`` the study goes to ``./fedrec-out/tune`` (:mod:`fedrec_lab.scratch`).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from fedrec_flwr.schema import Dim
from fedrec_lab.tuning.report import report, write_preset, write_tuned_preset
from fedrec_lab.tuning.setup import Setup, parse
from fedrec_lab.tuning.space import by_key_name, preset_point, space_for, suggest
from fedrec_lab.tuning.trial import finished_rounds, partial_summary, run_trial, running_best

__all__ = [
    "by_key_name",
    "main",
    "objective_for",
    "preset_point",
    "report",
    "run_trial",
    "space_for",
    "suggest",
    "write_preset",
    "write_tuned_preset",
]


class Watcher:
    """What a running trial's rounds tell the study: each round's best validation HR@10 so
    far goes to the pruner, which is asked after every round in turn, so that its decision
    does not depend on how many rounds one look at ``rounds.csv`` finds (nor on the
    machine's speed); the trial stops when it prunes, or when the deadline passes."""

    def __init__(self, trial, deadline: float | None, prune: bool, tick=None) -> None:
        self.trial, self.deadline, self.prune, self.tick = trial, deadline, prune, tick
        self.reported = 0
        self.best: float | None = None
        self.pruned_at: int | None = None  # the round the pruner stopped the trial at

    def report(self, rows: list[dict[str, str]]) -> bool:
        """Report the rounds not reported yet, in order, asking the pruner after each;
        whether it pruned the trial (at ``pruned_at``: later rounds are not reported)."""
        for step, value in running_best(rows):
            if step <= self.reported:
                continue
            self.trial.report(value, step)
            self.reported, self.best = step, value
            if self.prune and self.trial.should_prune():
                self.pruned_at = step
                return True
        return False

    def finish(self, rows: list[dict[str, str]], rounds: int) -> bool:
        """A trial whose process ended: its last rounds reported as if seen one by one
        (True: the pruner stops it at one of them, as it would have on a slower machine),
        then its best held up to ``rounds``. Early stopping ended it, and later rounds would
        not have raised its best so far: so the pruner compares a later trial at round r
        with every complete trial, not only with those that ran r rounds (the best ones,
        which would make it prune too much)."""
        if self.report(rows):
            return True
        if self.prune and self.best is not None:
            for step in range(self.reported + 1, rounds + 1):
                self.trial.report(self.best, step)
        return False

    def until_pruned(self, rows: list[dict[str, str]]) -> list[dict[str, str]]:
        """The rows up to the round the trial was pruned at (the rounds its process ran
        past it, before it was stopped, are not the trial's)."""
        if self.pruned_at is None:
            return rows
        return [row for row in rows if int(row["round"]) <= self.pruned_at]

    def __call__(self, rows: list[dict[str, str]]) -> str | None:
        if self.tick is not None:
            self.tick()
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "budget"
        return "pruned" if self.report(rows) else None


def objective_for(
    preset: dict,
    space: dict[str, Dim],
    fixed: dict[str, Any],
    scratch: Path,
    deadline: float | None = None,
    prune: bool = False,
    tick=None,
):
    """Optuna's objective: best validation HR@10 of one run (test metrics as attributes); a
    trial pruned, or stopped at ``deadline``, raises ``optuna.TrialPruned``."""
    import optuna

    def objective(trial) -> float:
        params = {key: suggest(dim, trial, key) for key, dim in space.items()}
        config = {
            **preset,
            **fixed,
            **params,
            "results-dir": str(scratch),
            "run-name": f"trial{trial.number}",
        }
        watcher = Watcher(trial, deadline, prune, tick)
        summary = run_trial(config, watcher)
        if "error" in summary:
            raise RuntimeError(f"trial {trial.number} failed: {summary['error']}")
        rows = finished_rounds(scratch / config["run-name"])
        rounds = int(fixed.get("num-server-rounds", 0))
        if "stopped" not in summary and watcher.finish(rows, rounds):
            summary = {"stopped": "pruned"}
        if summary.get("stopped") == "pruned":
            summary = {**partial_summary(watcher.until_pruned(rows)), "stopped": "pruned"}
        trial.set_user_attr("best_round", summary["best_round"])
        trial.set_user_attr("rounds", summary.get("rounds"))
        trial.set_user_attr("test", summary["test"])
        if "stopped" in summary:
            trial.set_user_attr("stopped", summary["stopped"])
            trial.set_user_attr("val", summary["val"])
            raise optuna.TrialPruned(f"{summary['stopped']} after {summary['rounds']} rounds")
        trial.set_user_attr("diverged_round", summary.get("diverged_round"))
        value = float(summary.get("val", {}).get("hr@10", float("nan")))
        return value if math.isfinite(value) else 0.0  # diverged before a valid round

    return objective


def trial_line(trial) -> str:
    """One line for a finished trial (printed as the study goes)."""
    val = (
        trial.user_attrs.get("val", {}).get("hr@10")
        if trial.user_attrs.get("stopped")
        else trial.value
    )
    test = trial.user_attrs.get("test", {}).get("hr@10")
    state = trial.user_attrs.get("stopped") or trial.state.name.lower()
    shown = f"val HR@10 {100 * val:.2f}" if val is not None else "no value"
    if test is not None:
        shown += f", test {100 * test:.2f}"
    params = ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in trial.params.items()
    )
    rounds = trial.user_attrs.get("rounds")
    return f"trial {trial.number} {state}: {shown} after {rounds} rounds ({params})"


def check_arguments(argv: list[str]) -> Setup:
    """The study ``fedrec tune ARGV`` would run, checked (a user's file read and split),
    running no trial; SystemExit with the reason if it would be refused."""
    return parse(list(argv))


def main(argv: list[str] | None = None) -> None:
    import tempfile

    import optuna

    from fedrec_lab.scratch import wrote
    from fedrec_lab.tuning.bar import StudyBar

    setup: Setup = parse(argv)
    args = setup.args
    if args.check:
        print("fedrec tune: checked: the settings and the data are good", file=sys.stderr)
        return
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = setup.study()
    setup.check_resumable(study)
    state = optuna.trial.TrialState
    if not study.trials and (point := preset_point(setup.config, setup.space)) is not None:
        study.enqueue_trial(point, user_attrs={"preset": True})

    def finished() -> int:
        return sum(t.state in (state.COMPLETE, state.PRUNED) for t in study.trials)

    spent = float(study.user_attrs.get("wall-seconds", 0.0))
    invocations = int(study.user_attrs.get("invocations", 0)) + 1
    study.set_user_attr("invocations", invocations)
    limit = setup.limit_s(spent)
    started = time.monotonic()
    deadline = None if limit is None else started + limit
    bar = StudyBar(setup.trials, finished(), limit)

    def after_trial(study, trial) -> None:
        study.set_user_attr("wall-seconds", spent + time.monotonic() - started)
        complete = [t.value for t in study.trials if t.state == state.COMPLETE]
        pruned = sum(t.state == state.PRUNED for t in study.trials)
        bar.finished(trial_line(trial), max(complete, default=None), pruned)

    try:  # the time spent is recorded even when the study is interrupted (Ctrl-C)
        with tempfile.TemporaryDirectory(prefix="fedrec-tuning-") as scratch:
            objective = objective_for(
                setup.trial_config, setup.space, setup.fixed, Path(scratch),
                deadline, setup.prune, bar.tick,
            )  # fmt: skip
            while finished() < setup.trials and (limit is None or limit > 0):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break  # out of time: the report says how many trials finished
                study.optimize(
                    objective,
                    n_trials=setup.trials - finished(),
                    n_jobs=args.jobs,
                    timeout=left,
                    catch=(RuntimeError,),
                    callbacks=[after_trial],
                )
                if deadline is not None and time.monotonic() >= deadline:
                    break
                if all(t.state == state.FAIL for t in study.trials[-3:]):
                    break  # the last trials all failed: stop rather than loop
    finally:
        bar.close()
        study.set_user_attr("wall-seconds", spent + time.monotonic() - started)
    budget = setup.budget_record(study.user_attrs["wall-seconds"], invocations)
    markdown, data = report(study, setup.space, setup.fixed_shown, setup.command, budget)
    name = setup.name
    (args.out / f"{name}.md").write_text(markdown)
    (args.out / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
    if data["best"]:
        tuned = setup.write_tuned(data["best"])
        print(f"best setting written to {tuned} (fedrec run {tuned})")
        if args.write_preset and setup.preset is not None:
            note = f"tuned: {args.out.name}/{name}.md ({setup.command})"
            write_preset(setup.preset, data["best"]["params"], note)
    print(markdown)
    wrote(args.out, f"study {name}")
