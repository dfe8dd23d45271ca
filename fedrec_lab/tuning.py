"""Hyperparameter tuning on validation HR@10 with Optuna (TPE), through the same ServerApp and
ClientApp as ``flwr run`` (an in-process grid of one node, a fresh process per trial).

A study tunes one preset (``conf/<preset>.toml``) over the search space its method and
plug-ins declare (:func:`space_for`, stated in the report), seed 0, with early stopping. Only
validation HR@10 is optimised; test metrics are recorded beside it and never read by the
search. The study lives in ``<out>/<name>.journal`` (Optuna's journal file): running the same
command again continues it up to ``--trials`` complete trials. ``<out>/<name>.md`` and
``.json`` report every trial; ``--write-preset`` copies the best setting into the preset::

    python -m fedrec_lab.tuning conf/pfedrec-ml100k-strict.toml --data-dir DIR \\
        --trials 20 --rounds 60 --patience 10 --out bench/results/tuning-strict

Without ``--out`` the study goes to ``./fedrec-out/tune`` (:mod:`fedrec_lab.scratch`).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fedrec_flwr.schema import Dim, KeyGroup
from fedrec_lab.experiments.cells import RUNNER
from fedrec_lab.presets import resolve
from fedrec_lab.project import project_root
from fedrec_lab.scratch import HelpFormatter, add_data_dir, add_out, wrote


def suggest(dim: Dim, trial: Any, key: str) -> Any:
    """Optuna's suggestion for one tuned key."""
    if dim.choices:
        return trial.suggest_categorical(key, list(dim.choices))
    if dim.integer:
        return trial.suggest_int(key, int(dim.low), int(dim.high), log=dim.log)
    return trial.suggest_float(key, dim.low, dim.high, log=dim.log)


def space_for(preset: dict[str, Any], plugin_only: bool = False) -> dict[str, Dim]:
    """The search space of a preset, from the declarations: its method's own
    (``search_space`` of the method class, in its order), then, by key name, those of the
    enabled plug-ins (PLGC, SAM) and of the other key groups tuned for this method
    (``keep-personal-rows`` where the method keeps personal rows it only evaluates with, the
    rule :class:`~fedrec_flwr.config.RunConfig` enforces). ``plugin_only``: the plug-ins'
    alone, the method's keys held at the preset's (a plug-in preset's base, tuned)."""
    from fedrec_flwr.config import RunConfig, key_groups
    from fedrec_flwr.methods import METHODS, build_method, enabled_plugins

    config = RunConfig.from_mapping(preset)
    method = build_method(config, num_items=1)
    enabled = {plugin.name for plugin in enabled_plugins(config)}

    def tuned(group: KeyGroup) -> bool:
        if group.plugin is not None:
            return group.plugin in enabled
        return group.tuned is None or group.tuned(config, method)

    groups = [group for group in key_groups() if group.search_space and tuned(group)]
    plugins = by_key_name(group for group in groups if group.plugin is not None)
    if plugin_only:
        if not plugins:
            with_knobs = sorted(g.plugin for g in key_groups() if g.plugin and g.search_space)
            raise ValueError(
                "--plugin-only: no enabled plug-in of this preset has a knob to tune (those "
                f"with knobs: {', '.join(with_knobs)}; DualPer has none: its preset is its "
                "base's with personalization = 'dual'). Tune the base preset instead."
            )
        return plugins
    space = {**METHODS[config.method].search_space, **by_key_name(groups)}
    if not space:
        raise ValueError(
            f"method '{config.method}' has no search space: give its class a search_space "
            "(run-config key -> fedrec_flwr.schema.Dim)."
        )
    return space


def by_key_name(groups: Iterable[KeyGroup]) -> dict[str, Dim]:
    """The search spaces of ``groups`` in one, ordered by key name (the order Optuna draws
    them in, whatever the order the groups were registered in)."""
    dims = [item for group in groups for item in group.search_space.items()]
    return dict(sorted(dims, key=lambda item: item[0]))


def preset_point(preset: dict[str, Any], space: dict[str, Dim]) -> dict[str, Any] | None:
    """The preset's own values of the tuned keys (defaults where it sets none), if they lie
    in the space: the study's first trial, so tuning cannot end below the preset."""
    from fedrec_flwr.config import RunConfig

    defaults = RunConfig().to_mapping()
    point = {key: preset.get(key, defaults[key]) for key in space}
    if any(point[key] not in dim for key, dim in space.items()):
        return None
    return point


def run_trial(run_config: dict[str, Any]) -> dict[str, Any]:
    """One run on one in-process node, in a fresh process; its summary, or
    ``{"error": ...}``."""
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(run_config), "1"],
        capture_output=True,
        text=True,
        cwd=project_root(),
    )
    for line in done.stdout.splitlines():
        if line.startswith("SUMMARY "):
            return json.loads(line[len("SUMMARY ") :])
    return {"error": (done.stderr or done.stdout)[-2000:]}


def objective_for(preset: dict, space: dict[str, Dim], fixed: dict[str, Any], scratch: Path):
    """Optuna's objective: best validation HR@10 of one run (test metrics as attributes)."""

    def objective(trial) -> float:
        params = {key: suggest(dim, trial, key) for key, dim in space.items()}
        config = {
            **preset,
            **fixed,
            **params,
            "results-dir": str(scratch),
            "run-name": f"trial{trial.number}",
        }
        summary = run_trial(config)
        if "error" in summary:
            raise RuntimeError(f"trial {trial.number} failed: {summary['error']}")
        trial.set_user_attr("best_round", summary["best_round"])
        trial.set_user_attr("rounds", summary.get("rounds"))
        trial.set_user_attr("test", summary["test"])
        trial.set_user_attr("diverged_round", summary.get("diverged_round"))
        value = float(summary.get("val", {}).get("hr@10", float("nan")))
        return value if math.isfinite(value) else 0.0  # diverged before a valid round

    return objective


def write_preset(path: Path, params: dict[str, Any], note: str) -> None:
    """Set ``params`` in a preset file, keeping its other lines and comments."""
    from fedrec_lab.presets import set_keys

    set_keys(path, params, note=note)


def report(study, space: dict[str, Dim], fixed: dict, command: str) -> tuple[str, dict]:
    """Markdown and JSON of a study: space, budget, every complete trial best first."""
    import optuna

    trials = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    trials.sort(key=lambda t: (-t.value, t.number))
    keys = list(space)
    lines = [
        f"# Tuning study `{study.study_name}`",
        "",
        f"`{command}`",
        "",
        "Objective: best validation HR@10 (seed 0); test metrics shown, never used. "
        f"Fixed: {', '.join(f'`{k} = {v}`' for k, v in fixed.items())}. "
        f"Complete trials: {len(trials)} (of {len(study.trials)} started)."
        + (
            ""
            if any(t.user_attrs.get("preset") for t in study.trials)
            else " The preset's own setting is not among them (it lies outside the space)."
        ),
        "",
        "Search space: " + "; ".join(f"`{k}` {d.describe()}" for k, d in space.items()),
        "",
        "| trial | " + " | ".join(keys) + " | val HR@10 | test HR@10 | test NDCG@10 | best round |",
        "|---" * (len(keys) + 5) + "|",
    ]
    for t in trials:
        test = t.user_attrs.get("test", {})
        cells = [
            f"{t.params[k]:.4g}" if isinstance(t.params[k], float) else str(t.params[k])
            for k in keys
        ]
        lines.append(
            f"| {t.number}{' (preset)' if t.user_attrs.get('preset') else ''} | "
            + " | ".join(cells)
            + f" | {100 * t.value:.2f} | "
            f"{100 * test.get('hr@10', float('nan')):.2f} | "
            f"{100 * test.get('ndcg@10', float('nan')):.2f} | {t.user_attrs.get('best_round')} |"
        )
    data = {
        "study": study.study_name,
        "command": command,
        "fixed": fixed,
        "space": {k: d.describe() for k, d in space.items()},
        "best": {"params": trials[0].params, "val_hr@10": trials[0].value} if trials else None,
        "trials": [
            {"number": t.number, "params": t.params, "val_hr@10": t.value, **t.user_attrs}
            for t in trials
        ],
    }
    return "\n".join(lines) + "\n", data


def main(argv: list[str] | None = None) -> None:
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter
    )
    parser.add_argument("preset", type=Path, help="conf/<preset>.toml")
    add_data_dir(parser)
    parser.add_argument("--trials", type=int, default=20, help="complete trials in all")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--patience", type=int, default=10, help="early-stopping-patience")
    parser.add_argument("--jobs", type=int, default=1, help="trials at a time")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampler")
    parser.add_argument("--device", default="cpu", help="device of every trial (cpu, cuda)")
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds after which no trial starts"
    )
    add_out(parser, "tune", "the study's journal and its .md/.json report")
    parser.add_argument("--write-preset", action="store_true", help="copy the best setting")
    parser.add_argument(
        "--plugin-only",
        action="store_true",
        help="tune only the plug-ins' knobs (PLGC, SAM), the method's keys as in the preset",
    )
    args = parser.parse_args(argv)
    if not args.preset.is_file():
        parser.error(f"no preset {args.preset}: pass a conf/<preset>.toml file")
    preset = resolve(args.preset)
    try:
        space = space_for(preset, plugin_only=args.plugin_only)
    except ValueError as error:
        parser.error(str(error))
    fixed = {
        "seed": 0,
        "num-server-rounds": args.rounds,
        "early-stopping-patience": args.patience,
        "checkpoint-every": 0,
        **({"device": args.device} if args.device != "cpu" else {}),
        **({"data-dir": str(Path(args.data_dir).resolve())} if args.data_dir else {}),
    }
    name = args.preset.stem
    args.out.mkdir(parents=True, exist_ok=True)
    storage = JournalStorage(JournalFileBackend(str(args.out / f"{name}.journal")))
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        direction="maximize",
        load_if_exists=True,
        sampler=optuna.samplers.TPESampler(
            seed=args.seed, n_startup_trials=max(4, args.trials // 3), constant_liar=True
        ),
    )
    if not study.trials and (point := preset_point(preset, space)) is not None:
        study.enqueue_trial(point, user_attrs={"preset": True})
    done = sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    command = (
        f"python -m fedrec_lab.tuning conf/{args.preset.name} --data-dir DIR --trials "
        f"{args.trials} --rounds {args.rounds} --patience {args.patience} --seed {args.seed}"
        + (f" --device {args.device}" if args.device != "cpu" else "")
        + (" --plugin-only" if args.plugin_only else "")
        + (f" --timeout {args.timeout:g}" if args.timeout is not None else "")
    )
    with tempfile.TemporaryDirectory(prefix="fedrec-tuning-") as scratch:
        objective = objective_for(preset, space, fixed, Path(scratch))
        while done < args.trials:
            study.optimize(
                objective,
                n_trials=args.trials - done,
                n_jobs=args.jobs,
                timeout=args.timeout,
                catch=(RuntimeError,),
            )
            done = sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
            if args.timeout is not None:
                break  # out of time: the report says how many trials completed
            if not any(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials[-3:]):
                break  # the last trials all failed: stop rather than loop
    fixed_shown = {k: v for k, v in fixed.items() if k != "data-dir"}
    markdown, data = report(study, space, fixed_shown, command)
    (args.out / f"{name}.md").write_text(markdown)
    (args.out / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
    if args.write_preset and data["best"]:
        write_preset(
            args.preset, data["best"]["params"], f"tuned: {args.out.name}/{name}.md ({command})"
        )
    print(markdown)
    wrote(args.out, f"study {name}")


if __name__ == "__main__":
    main()
