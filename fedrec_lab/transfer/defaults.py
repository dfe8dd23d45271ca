"""The defaults on data no preset was tuned on: each ``conf/<method>-default.toml`` on a
generated shape (:data:`~fedrec_lab.transfer.cells.SHAPES`), against the centralized
popularity, ItemKNN and EASE rows of the same split (``bench/defaults.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from fedrec_lab.project import conf_dir
from fedrec_lab.transfer.cells import (
    CELL_ONLY,
    DEFAULT,
    TARGETS,
    cached_cell,
    candidate_keys,
    cell_config,
    cell_name,
    central_cell,
    finish,
    per_user_of,
    run_config,
    setting_of,
)

#: The centralized rows each default is compared with (:mod:`fedrec_lab.baselines`).
CENTRAL = ("popularity", "itemknn", "ease")
TITLES = {"popularity": "popularity", "itemknn": "ItemKNN, cosine", "ease": "EASE"}


def default_methods() -> list[str]:
    """The registered methods with a ``conf/<method>-default.toml``, in registry order."""
    from fedrec_flwr.methods import methods

    return [name for name in methods() if (conf_dir() / f"{name}-default.toml").is_file()]


def default_cell(method: str, target: str, args: argparse.Namespace, cache: Path) -> dict:
    """One default on one target: its cached record, else a run (in a fresh process). The
    run has at most ``args.rounds`` rounds, and no more than the preset sets. A cached cell
    run under other limits or with another setting (the preset changed) is refused."""
    import json

    name = cell_name(method, DEFAULT, target)
    path = cache / "cells" / f"{name}.json"
    every = getattr(args, "eval_every", 1)
    limits = {"max_rounds": args.rounds, "patience": args.patience, "eval_every": every}
    if path.exists():
        record = json.loads(path.read_text())
        unset = {"max_rounds": 100, "patience": 0, "eval_every": 1}
        made = {k: record.get(k, v) for k, v in unset.items()}
        if made != limits:
            raise SystemExit(
                f"{path} was run with at most {made['max_rounds']} rounds, patience "
                f"{made['patience']}, evaluated every {made['eval_every']}, not "
                f"{args.rounds}, {args.patience} and {every}: give those, or another --cache"
            )
    keys = candidate_keys(method, DEFAULT)
    config = cell_config(method, DEFAULT, target, args, cache / "runs", keys)
    config["num-server-rounds"] = min(args.rounds, int(keys.get("num-server-rounds", args.rounds)))
    config["eval-every"] = every
    cached = cached_cell(path, config)
    if cached is not None:
        return cached
    print(f"{name}: running", flush=True)
    summary = run_config(name, config)
    users, hits, ndcg = per_user_of(cache / "runs" / name)
    return finish(path, name, method, DEFAULT, target, summary, users, hits, "", limits, ndcg,
                  setting=setting_of(config))  # fmt: skip


def measure(args: argparse.Namespace, cache: Path) -> dict[str, Any]:
    """Every default and the centralized rows ``args.central`` (popularity and ItemKNN, the
    two the checks read, at least) on every target, each with its interval and its paired
    difference to the centralized rows."""
    return summarise(*measure_cells(args, cache), args.seed)


def measure_cells(
    args: argparse.Namespace, cache: Path, central: dict[str, dict[str, dict]] | None = None
) -> tuple[list[dict], dict[str, dict[str, dict]]]:
    """The finished cells of :func:`measure` (cached, else run) and the centralized rows of
    each target (``central`` where given), per-user values included."""
    rows = getattr(args, "central", CENTRAL)
    missing = {"popularity", "itemknn"} - set(rows)
    if missing:
        raise SystemExit(f"--central must include {' and '.join(sorted(missing))}: the checks")
    if central is None:
        central = {t: {n: central_cell(n, t, args, cache) for n in rows} for t in args.targets}
    cells = [default_cell(m, t, args, cache) for t in args.targets for m in args.methods]
    return cells, central


def summarise(cells: list[dict], central: dict[str, dict[str, dict]], seed: int) -> dict:
    """The rows of the report: each cell with its 95 % user interval and its paired
    differences to each centralized row of its target."""
    from fedrec_lab.stats import bootstrap_ci, paired_difference

    def arrays(cell: dict) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(cell["users"]), np.asarray(cell["hits"], dtype=np.float64)

    def row(cell: dict, target: str) -> dict[str, Any]:
        low, high = bootstrap_ci(arrays(cell)[1], seed=seed)
        out = {k: v for k, v in cell.items() if k not in CELL_ONLY}
        out["ci"] = [low, high]
        out["minus"] = {
            name: paired_difference(*arrays(cell), *arrays(other), seed=seed)
            for name, other in central[target].items()
            if name != cell["method"]
        }
        return out

    rows = [row(cell, cell["target"]) for cell in cells]
    baselines = {t: {n: row(c, t) for n, c in rows_of.items()} for t, rows_of in central.items()}
    return {"rows": rows, "central": baselines, "verdicts": verdicts(rows, baselines)}


def verdicts(rows: list[dict], central: dict[str, dict[str, dict]]) -> list[dict[str, Any]]:
    """Per target: the defaults below popularity, and the best default's distance to
    ItemKNN (the two checks the defaults are held to)."""
    out = []
    for target, baseline in central.items():
        mine = [r for r in rows if r["target"] == target]
        if not mine:
            continue
        best = max(mine, key=lambda r: r["test_hr10"])
        popularity = baseline["popularity"]["test_hr10"]
        out.append(
            {
                "target": target,
                "below_popularity": [r["method"] for r in mine if r["test_hr10"] < popularity],
                "best": best["method"],
                "best_minus_itemknn": best["test_hr10"] - baseline["itemknn"]["test_hr10"],
            }
        )
    return out


def pct(value: float) -> str:
    return f"{100 * value:.2f}"


def signed(d: dict[str, float]) -> str:
    return f"{100 * d['mean']:+.2f} [{100 * d['low']:+.2f}, {100 * d['high']:+.2f}]"


def schedule(settings: dict[str, Any]) -> str:
    """How often the runs were evaluated and when they stopped, as the reports word it."""
    evaluated = (
        f"evaluated every {settings['eval_every']} rounds and after the last, "
        if settings.get("eval_every", 1) > 1
        else "every round evaluated, "
    )
    stopping = (
        f"early stopping after {settings['patience']} evaluated rounds without a better "
        "validation HR@10"
        if settings["patience"]
        else "no early stopping"
    )
    return evaluated + stopping


def heading(target: str) -> list[str]:
    """A target's section heading in the reports: its label, then its dataset keys."""
    keys = ", ".join(f"`{k} = {v}`" for k, v in TARGETS[target]["keys"].items())
    return ["", f"### {TARGETS[target]['label']}", "", keys, ""]


def markdown(summary: dict[str, Any], command: str, settings: dict[str, Any]) -> str:
    """The report: one table per target, then the two checks."""
    out = [
        "# The defaults on generated data no preset was tuned on",
        "",
        "```bash",
        command,
        "```",
        "",
        f"Strict protocol, seed {settings['seed']}, one node, at most {settings['rounds']} "
        "rounds (no more than the preset sets), "
        + schedule(settings)
        + "; test HR@10 / NDCG@10 (%) at the best validation round. Each row is "
        "`conf/<method>-default.toml` with the dataset's keys. The centralized rows are "
        "`fedrec baselines`' (their grid tuned on validation HR@10) on the same split. "
        "Intervals: 95 % bootstrap over users; differences paired over the same users.",
    ]
    for target, baseline in summary["central"].items():
        out += [
            *heading(target),
            "| row | test HR@10 | 95 % CI | NDCG@10 | minus popularity [95 % CI] "
            "| minus ItemKNN [95 % CI] | best round / rounds |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in [r for r in summary["rows"] if r["target"] == target]:
            out.append(
                f"| {row['method']}-default | {pct(row['test_hr10'])} "
                f"| [{pct(row['ci'][0])}, {pct(row['ci'][1])}] | {pct(row['test_ndcg10'])} "
                f"| {signed(row['minus']['popularity'])} | {signed(row['minus']['itemknn'])} "
                f"| {row['best_round']} / {row['rounds']} |"
            )
        for name, row in baseline.items():
            chosen = f", {row['candidate']}" if row["candidate"] else ""
            out.append(
                f"| {TITLES[name]} (centralized{chosen}) | {pct(row['test_hr10'])} "
                f"| [{pct(row['ci'][0])}, {pct(row['ci'][1])}] | {pct(row['test_ndcg10'])} "
                "| - | - | - |"
            )
    return "\n".join(out + checks(summary)) + "\n"


def checks(summary: dict[str, Any]) -> list[str]:
    """The lines of the two checks, one table row per target."""
    out = [
        "",
        "The checks: every default at or above popularity; the best default within 2 points "
        "of ItemKNN.",
        "",
        "| dataset | defaults below popularity | best default | best minus ItemKNN, points |",
        "|---|---|---|---|",
    ]
    for v in summary["verdicts"]:
        below = ", ".join(v["below_popularity"]) or "none"
        out.append(
            f"| {TARGETS[v['target']]['label']} | {below} | {v['best']}-default "
            f"| {100 * v['best_minus_itemknn']:+.2f} |"
        )
    return out
