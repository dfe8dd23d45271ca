"""What a study leaves: its report (Markdown and JSON) and its best setting as a preset."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from fedrec_flwr.schema import Dim

#: Run-config keys a written preset never holds (machine paths, the study's own scratch).
NOT_IN_PRESET = ("data-dir", "results-dir", "run-name", "checkpoint-every", "seed")


def write_preset(path: Path, params: dict[str, Any], note: str) -> None:
    """Set ``params`` in a preset file, keeping its other lines and comments."""
    from fedrec_lab.presets import set_keys

    set_keys(path, params, note=note)


def write_tuned_preset(path: Path, config: dict[str, Any], header: list[str]) -> Path:
    """A new preset file: ``header`` as comment lines, then the run-config keys of
    ``config`` (a flat TOML that ``fedrec run`` and ``flwr run --run-config`` read)."""
    keys = {key: value for key, value in config.items() if key not in NOT_IN_PRESET}
    text = "".join(f"# {line}\n" for line in header)
    text += "".join(f"{key} = {json.dumps(value)}\n" for key, value in keys.items())
    if tomllib.loads(text) != keys:
        raise ValueError(f"{path}: a value does not render as TOML: {keys}")
    path.write_text(text)
    return path


def cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def trial_record(trial) -> dict[str, Any]:
    """A finished trial as the JSON report holds it."""
    return {"number": trial.number, "params": trial.params, "val_hr@10": trial.value}


def report(
    study, space: dict[str, Dim], fixed: dict, command: str, budget: dict | None = None
) -> tuple[str, dict]:
    """Markdown and JSON of a study: space, budget, every complete trial best first, then
    the stopped ones (pruned on validation, or at the end of the budget)."""
    import optuna

    state = optuna.trial.TrialState
    trials = [t for t in study.trials if t.state == state.COMPLETE]
    trials.sort(key=lambda t: (-t.value, t.number))
    stopped = [t for t in study.trials if t.state == state.PRUNED]
    at_budget = [t for t in stopped if t.user_attrs.get("stopped") == "budget"]
    failed = sum(t.state == state.FAIL for t in study.trials)
    keys = list(space)
    best = trials[0] if trials else None
    lines = [
        f"# Tuning study `{study.study_name}`",
        "",
        f"`{command}`",
        "",
        "Objective: best validation HR@10 (seed 0); test metrics shown, never used. "
        f"Fixed: {', '.join(f'`{k} = {v}`' for k, v in fixed.items())}. "
        f"Complete trials: {len(trials)} (of {len(study.trials)} started); pruned on "
        f"validation HR@10: {len(stopped) - len(at_budget)}; stopped at the end of the "
        f"budget (counted as pruned): {len(at_budget)}; failed: {failed}."
        + (
            ""
            if any(t.user_attrs.get("preset") for t in study.trials)
            else " The start setting (the preset's, or the method's defaults) is not among them "
            "(it lies outside the space)."
        ),
        "",
    ]
    if budget:
        lines += [
            f"Budget: {budget['limit']}; wall time used {budget['used_s'] / 60:.1f} min over "
            f"{budget['invocations']} invocation(s).",
            "",
        ]
    if best is not None:
        test = best.user_attrs.get("test", {})
        lines += [
            f"Best trial: {best.number}, validation HR@10 {percent(best.value)}, test HR@10 "
            f"{percent(test.get('hr@10'))} (round {best.user_attrs.get('best_round')}).",
            "",
        ]
    lines += [
        "Search space: " + "; ".join(f"`{k}` {d.describe()}" for k, d in space.items()),
        "",
        "| trial | " + " | ".join(keys) + " | val HR@10 | test HR@10 | test NDCG@10 | best round |",
        "|---" * (len(keys) + 5) + "|",
    ]
    for t in trials:
        test = t.user_attrs.get("test", {})
        lines.append(
            f"| {t.number}{' (preset)' if t.user_attrs.get('preset') else ''} | "
            + " | ".join(cell(t.params[k]) for k in keys)
            + f" | {percent(t.value)} | {percent(test.get('hr@10'))} | "
            f"{percent(test.get('ndcg@10'))} | {t.user_attrs.get('best_round')} |"
        )
    if stopped:
        lines += [
            "",
            "Stopped trials (best validation HR@10 of the rounds they ran):",
            "",
            "| trial | " + " | ".join(keys) + " | val HR@10 so far | rounds run | why |",
            "|---" * (len(keys) + 4) + "|",
        ]
        for t in sorted(stopped, key=lambda t: t.number):
            val = t.user_attrs.get("val", {}).get("hr@10")
            lines.append(
                f"| {t.number} | "
                + " | ".join(cell(t.params[k]) for k in keys if k in t.params)
                + f" | {percent(val)} | {t.user_attrs.get('rounds')} | "
                f"{t.user_attrs.get('stopped', 'pruned')} |"
            )
    best_record = None
    if best is not None:
        best_record = {
            "trial": best.number,
            "params": best.params,
            "val_hr@10": best.value,
            "test_hr@10": best.user_attrs.get("test", {}).get("hr@10"),
            "best_round": best.user_attrs.get("best_round"),
        }
    data = {
        "study": study.study_name,
        "command": command,
        "fixed": fixed,
        "space": {k: d.describe() for k, d in space.items()},
        "budget": budget,
        "counts": {
            "complete": len(trials),
            "pruned": len(stopped) - len(at_budget),
            "stopped_at_budget": len(at_budget),
            "failed": failed,
        },
        "best": best_record,
        "trials": [{**trial_record(t), **t.user_attrs} for t in trials],
        "stopped_trials": [{**trial_record(t), **t.user_attrs} for t in stopped],
    }
    return "\n".join(lines) + "\n", data
