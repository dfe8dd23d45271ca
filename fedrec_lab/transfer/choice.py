"""The study's choice, plain functions of its cells: each cell's reference, ratio and paired
differences, the leave-one-dataset-out default per method, and where early stopping would
have ended each tuned preset's committed run."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedrec_lab.project import project_root
from fedrec_lab.transfer.cells import CELL_ONLY, SOURCES


def reference_cell(cells: list[dict], method: str, target: str) -> tuple[dict, bool]:
    """The reference of a method on a target: the preset tuned on it (True), else the best
    candidate measured there (False)."""
    mine = [c for c in cells if c["method"] == method and c["target"] == target]
    own = [c for c in mine if c["candidate"] == target]
    if own:
        return own[0], True
    return max(mine, key=lambda c: c["test_hr10"]), False


def choose(rows: list[dict], method: str) -> dict[str, Any]:
    """Leave-one-dataset-out: each candidate's worst ratio to the reference over the targets
    it was not tuned on; the best worst case (ties: the higher mean ratio) is the default."""
    scores = []
    for candidate in sorted({r["candidate"] for r in rows if r["method"] == method}):
        held = [
            r
            for r in rows
            if r["method"] == method and r["candidate"] == candidate and r["target"] != candidate
        ]
        if not held:
            continue
        ratios = [r["ratio"] for r in held]
        scores.append(
            {
                "candidate": candidate,
                "worst_ratio": min(ratios),
                "mean_ratio": float(np.mean(ratios)),
                "held_out": [r["target"] for r in held],
            }
        )
    if not scores:
        raise ValueError(f"{method}: no candidate was scored on a dataset it was not tuned on")
    best = max(scores, key=lambda s: (s["worst_ratio"], s["mean_ratio"]))
    return {"method": method, "default": best["candidate"], "candidates": scores}


def summarise(cells: list[dict], knn: dict[str, dict], seed: int = 0) -> dict[str, Any]:
    """Every cell with its interval, its ratio and paired difference to the reference; the
    ItemKNN rows; the default chosen per method and how it compares with ItemKNN."""
    from fedrec_lab.stats import bootstrap_ci, paired_difference

    def arrays(cell: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(cell["users"]), np.asarray(cell["hits"], dtype=np.float64)

    rows = []
    for cell in cells:
        ref, tuned = reference_cell(cells, cell["method"], cell["target"])
        low, high = bootstrap_ci(arrays(cell)[1], seed=seed)
        row = {k: v for k, v in cell.items() if k not in CELL_ONLY}
        row.update(
            ci=[low, high],
            reference=ref["candidate"],
            reference_tuned=tuned,
            ratio=cell["test_hr10"] / ref["test_hr10"] if ref["test_hr10"] else float("nan"),
            vs_reference=paired_difference(*arrays(cell), *arrays(ref), seed=seed),
            vs_itemknn=paired_difference(*arrays(cell), *arrays(knn[cell["target"]]), seed=seed),
        )
        rows.append(row)
    baselines = {}
    for target, cell in knn.items():
        low, high = bootstrap_ci(arrays(cell)[1], seed=seed)
        baselines[target] = {
            **{k: v for k, v in cell.items() if k not in CELL_ONLY},
            "ci": [low, high],
        }
    methods = list(dict.fromkeys(r["method"] for r in rows))
    return {"rows": rows, "itemknn": baselines, "choices": [choose(rows, m) for m in methods]}


#: Patiences whose effect on the tuned presets the report shows.
PATIENCES = (10, 20, 30)


def early_stopped(val: list[float], patience: int) -> tuple[int, int]:
    """(rounds run, best round) of a run whose validation HR@10 per round is ``val`` under
    ``early-stopping-patience`` (fedrec_flwr/server/stopping.py: strictly better resets)."""
    best, best_round, since = -1.0, 0, 0
    for index, value in enumerate(val, start=1):
        if value > best:
            best, best_round, since = value, index, 0
        else:
            since += 1
            if patience and since >= patience:
                return index, best_round
    return len(val), best_round


def early_stopping(methods: list[str], seed: int) -> list[dict[str, Any]]:
    """Each tuned strict preset's committed run (every round evaluated, no early stopping) and
    where early stopping would have ended it: a stopped run is the same run cut short."""
    import csv

    out = []
    for method in methods:
        for source in SOURCES:
            run = project_root() / "bench/results/runs" / f"{method}-{source}-strict-seed{seed}"
            if not (run / "rounds.csv").is_file():
                continue
            with open(run / "rounds.csv") as f:
                rows = list(csv.DictReader(f))
            val = [float(r["val-hr@10"]) for r in rows]
            test = [float(r["test-hr@10"]) for r in rows]
            row: dict[str, Any] = {"method": method, "dataset": source, "run": run.name}
            row["patience"] = {}
            for patience in (0, *PATIENCES):
                stop, best = early_stopped(val, patience)
                row["patience"][str(patience)] = {
                    "rounds": stop,
                    "best_round": best,
                    "test_hr10": test[best - 1],
                }
            out.append(row)
    return out
