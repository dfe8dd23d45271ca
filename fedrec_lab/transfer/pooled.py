"""The defaults on generated shapes over several seeds (``bench/defaults.py --seeds``): each
row's mean over the seeds, and its intervals from the users' per-user values kept in each
seed's cells (:mod:`fedrec_lab.transfer.defaults` is the one-seed report).

The generated data and its leave-one-out split do not depend on the run seed, so every seed
evaluates the same users: the interval of a row's mean draws users with replacement, the same
users for every seed (:func:`fedrec_lab.stats.seeds_bootstrap_ci`), and a difference to a
centralized row is paired over the users both evaluated in every seed, each user's
difference averaged over the seeds (:func:`fedrec_lab.stats.seed_averaged`, then
:func:`fedrec_lab.stats.paired_difference`). The seeds themselves are not resampled: the
intervals are the uncertainty from the finite set of users; the per-seed figures show the
spread over seeds beside them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedrec_lab.transfer.cells import CELL_ONLY
from fedrec_lab.transfer.defaults import TITLES, checks, heading, pct, schedule, signed, verdicts

Central = dict[str, dict[str, dict]]


def pool(per_seed: dict[int, list[dict]], central: Central, seed: int = 0) -> dict[str, Any]:
    """The rows of the pooled report from each seed's cells and the centralized rows of each
    target (what :func:`fedrec_lab.transfer.defaults.measure_cells` returns): every seed must
    hold the same rows. The centralized rows are one per target: popularity, ItemKNN and
    EASE draw nothing from the seed, and the generated data and its split do not depend on
    it. ``seed`` keys the bootstrap draws."""
    if not per_seed:
        raise ValueError("pool: no seeds given")
    seeds = sorted(per_seed)
    keyed = {s: {(c["method"], c["target"]): c for c in per_seed[s]} for s in seeds}
    first = keyed[seeds[0]]
    for s in seeds[1:]:
        if set(keyed[s]) != set(first):
            raise ValueError(f"pool: seed {s} holds other rows than seed {seeds[0]}")
    rows = [
        pooled_row([keyed[s][key] for s in seeds], central[key[1]], seeds, seed) for key in first
    ]
    baselines = {
        target: {name: pooled_row([cell], of, [], seed) for name, cell in of.items()}
        for target, of in central.items()
    }
    return {
        "seeds": seeds,
        "rows": rows,
        "central": baselines,
        "verdicts": verdicts(rows, baselines),
    }


def pooled_row(
    cells: list[dict], central: dict[str, dict], seeds: list[int], seed: int
) -> dict[str, Any]:
    """One row over the seeds (``cells``: its cell of each seed; a centralized row: its one
    cell): the means over seeds, the per-seed figures, its interval over users and its paired
    differences to each other centralized row (HR@10; NDCG@10 too, under ``minus_ndcg``, when
    every cell kept its users' NDCG@10)."""
    from fedrec_lab.stats import (
        bootstrap_ci,
        paired_difference,
        seed_averaged,
        seeds_bootstrap_ci,
    )

    def values(of: list[dict], key: str) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(np.asarray(c["users"]), np.asarray(c[key], dtype=np.float64)) for c in of]

    out = {k: v for k, v in cells[0].items() if k not in CELL_ONLY}
    for key in ("best_round", "rounds", "val_hr10", "seconds"):
        if key in out:
            out[key] = [c[key] for c in cells]
    if seeds:
        out["seeds"] = seeds
    out["per_seed_hr10"] = [c["test_hr10"] for c in cells]
    out["test_hr10"] = float(np.mean(out["per_seed_hr10"]))
    out["test_ndcg10"] = float(np.mean([c["test_ndcg10"] for c in cells]))
    # one cell: the one-seed report's interval (its users in the cell's order), to the digit
    hits = values(cells, "hits")
    one = len(cells) == 1
    out["ci"] = list(
        bootstrap_ci(hits[0][1], seed=seed) if one else seeds_bootstrap_ci(hits, seed=seed)
    )
    others = {n: c for n, c in central.items() if n != cells[0]["method"]}
    metrics = {"minus": "hits"}
    if all("ndcg" in c for c in [*cells, *others.values()]):
        metrics["minus_ndcg"] = "ndcg"
    for name, key in metrics.items():
        mine = seed_averaged(values(cells, key))  # once per metric, not per centralized row
        out[name] = {
            n: paired_difference(*mine, *values([c], key)[0], seed=seed) for n, c in others.items()
        }
    return out


def markdown(summary: dict[str, Any], command: str, settings: dict[str, Any]) -> str:
    """The pooled report: one table per target, then the two checks (on the means)."""
    seeds = ", ".join(str(s) for s in summary["seeds"])
    out = [
        "# The defaults on generated data no preset was tuned on, over seeds",
        "",
        "```bash",
        command,
        "```",
        "",
        f"Strict protocol, seeds {seeds}, one node, at most {settings['rounds']} rounds (no "
        "more than the preset sets), "
        + schedule(settings)
        + "; test HR@10 / NDCG@10 (%) at each run's best validation round, the mean over the "
        "seeds (each seed's test HR@10 beside it). Each row is `conf/<method>-default.toml` "
        "with the dataset's keys; the centralized rows are `fedrec baselines`' on the same "
        "split. Intervals: 95 % bootstrap over users, the same users drawn for every seed "
        "(the split does not depend on the seed); differences paired over the same users, "
        "each user's difference averaged over the seeds. The seeds are not resampled. The "
        "centralized rows draw nothing from the seed: measured once, with the first seed.",
    ]
    for target, baseline in summary["central"].items():
        out += [
            *heading(target),
            "| row | test HR@10 | 95 % CI | per seed | NDCG@10 | minus popularity [95 % CI] "
            "| minus ItemKNN [95 % CI] | best rounds / rounds |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in [r for r in summary["rows"] if r["target"] == target]:
            rounds = ", ".join(str(b) for b in row["best_round"])
            out.append(
                f"| {row['method']}-default | {pct(row['test_hr10'])} "
                f"| [{pct(row['ci'][0])}, {pct(row['ci'][1])}] | {per_seed(row)} "
                f"| {pct(row['test_ndcg10'])} | {signed(row['minus']['popularity'])} "
                f"| {signed(row['minus']['itemknn'])} | {rounds} / {row['rounds'][0]} |"
            )
        for name, row in baseline.items():
            chosen = f", {row['candidate']}" if row["candidate"] else ""
            out.append(
                f"| {TITLES[name]} (centralized{chosen}) | {pct(row['test_hr10'])} "
                f"| [{pct(row['ci'][0])}, {pct(row['ci'][1])}] | - "
                f"| {pct(row['test_ndcg10'])} | - | - | - |"
            )
    return "\n".join(out + checks(summary)) + "\n"


def per_seed(row: dict[str, Any]) -> str:
    return ", ".join(pct(v) for v in row["per_seed_hr10"])
