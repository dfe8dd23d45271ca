"""The SAM table: each method with and without SAM, both datasets and protocols, seeds 0-2.

Per cell (:mod:`fedrec_lab.analysis.cells`): its run's test HR@10 (``summary.json``), and at
its best round the generalization gap (mean over users of ``val-loss - fit-loss``), the top
Hessian eigenvalue of the local loss and the rho-sharpness (means over the sampled users;
:mod:`fedrec_lab.analysis.landscape`). A pair (without, with SAM) measures its rho-sharpness
at the radii of its SAM run. Per row: mean ± std over the seeds of each run's figure, and the
difference SAM minus no SAM with a paired bootstrap interval over users (each user's value
averaged over the seeds: every user for HR@10 and the gap, the sampled users for the
sharpness measures; :func:`fedrec_lab.stats.paired_difference`). Each side's devices are
its runs' (:mod:`fedrec_lab.analysis.devices`), and the pairs that mix them are named.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from fedrec_lab import stats
from fedrec_lab.analysis import devices, rejections
from fedrec_lab.analysis.cells import DATASETS, PAIRS, PROTOCOLS, SEEDS, SamCell
from fedrec_lab.analysis.early import EARLY_MARK, early_lines, is_early
from fedrec_lab.experiments.report import NAMES

#: The table's measures: (record key of a run's figure, per-user key, label, scale).
MEASURES = (
    ("hr@10", "hr", "test HR@10 (%)", 100.0),
    ("gap", "gap", "gap (val - fit BCE)", 1.0),
    ("mean_lambda_max", "lambda_max", "top Hessian eigenvalue", 1.0),
    ("mean_rho_sharpness", "rho_sharpness", "rho-sharpness", 1.0),
)


def record_path(records: Path, cell: SamCell) -> Path:
    return records / f"{cell.name}.json"


def user_test_hr(run_dir: Path, record: dict[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """Each user's test HR@10 at the run's best round: its ``per-user.csv``, else the one its
    record took from a replay that gave the run's test HR@10 exactly (``user_test_hr``), else
    None (the row then has no HR@10 interval)."""
    if (run_dir / stats.PER_USER_FILE).exists():
        users, columns = stats.read_per_user(run_dir)
        return users, columns["test-hr@10"]
    taken = record.get("user_test_hr")
    if taken is None:
        return None
    return np.asarray(taken["users"]), np.asarray(taken["test-hr@10"])


def run_figures(cell: SamCell, runs: Path, records: Path) -> dict[str, Any] | None:
    """A cell's figures and per-user values, or None while its record is missing."""
    path = record_path(records, cell)
    summary_file = runs / cell.name / "summary.json"
    if not path.exists() or not summary_file.exists():
        return None
    record = json.loads(path.read_text())
    summary = json.loads(summary_file.read_text())
    sampled = record["sampled"]
    return {
        "hr@10": summary["test"]["hr@10"],
        "gap": record["gap"],
        "mean_lambda_max": record["mean_lambda_max"],
        "mean_rho_sharpness": record["mean_rho_sharpness"],
        "best_round": summary["best_round"],
        "rounds": summary["rounds"],
        "device": devices.run_device(runs / cell.name),
        "per_user": {
            "hr": user_test_hr(runs / cell.name, record),
            "gap": (np.asarray(record["users"]), np.asarray(record["user_gap"])),
            "lambda_max": (
                np.array([m["user"] for m in sampled]),
                np.array([m["lambda_max"] for m in sampled]),
            ),
            "rho_sharpness": (
                np.array([m["user"] for m in sampled]),
                np.array([m["rho_sharpness"] for m in sampled]),
            ),
        },
        "radii": record["radii"],
        "replay": record.get("replay"),
        "hr_from_replay": replay_hr_only(run_dir=runs / cell.name, record=record),
    }


def replay_hr_only(run_dir: Path, record: dict[str, Any]) -> bool:
    """Whether a run's users' test HR@10 come from a replay that gave the run's test HR@10
    exactly but another of its metrics only to the last digits."""
    taken = record.get("user_test_hr") or {}
    return not (run_dir / stats.PER_USER_FILE).exists() and taken.get("equal") == "test-hr@10"


def _mean_std(values: list[float], scale: float) -> str:
    if not values:
        return "-"
    scaled = [scale * v for v in values]
    if len(scaled) == 1:
        return f"{scaled[0]:.3g}" if scale == 1.0 else f"{scaled[0]:.2f}"
    mean, std = statistics.mean(scaled), statistics.stdev(scaled)
    if scale == 1.0:
        return f"{mean:.3g} ± {std:.2g}"
    return f"{mean:.2f} ± {std:.2f}"


def row(
    method: str,
    dataset: str,
    protocol: str,
    runs: Path,
    records: Path,
    seeds: Iterable[int] = SEEDS,
) -> dict[str, Any]:
    """One row: both sides' figures over the seeds that have both, and the paired intervals.
    A seed left out for a node's reply left out is replaced by the next seed after ``seeds`` whose
    records exist (:mod:`fedrec_lab.analysis.rejections`)."""
    sides: dict[bool, list[dict]] = {False: [], True: []}
    seeds_done: list[int] = []
    recorded = []
    left_out: list[dict[str, Any]] = []
    base = tuple(seeds)
    after = max(base, default=-1) + 1
    for seed in (*base, *range(after, after + len(base))):
        extra = seed not in base
        replaced = sum(d not in base for d in seeds_done)
        if extra and replaced >= len(rejections.seeds(left_out)):
            break  # every seed left out is replaced (or none is)
        cells = [SamCell(method, sam, dataset, protocol, seed) for sam in (False, True)]
        found = [run_figures(c, runs, records) for c in cells]
        if extra and None in found:
            break  # the next seed's records are not there
        recorded += [
            {"side": "with" if sam else "without", "seed": seed}
            for sam, figures in zip((False, True), found, strict=True)
            if figures is not None
        ]
        rejected = [rejections.first_partial_round(runs / c.name) for c in cells]
        left_out += [
            {"side": "with" if c.sam else "without", "seed": seed, "round": at}
            for c, at in zip(cells, rejected, strict=True)
            if at is not None
        ]
        pair = [figures for figures in found if figures is not None]
        if len(pair) == len(found) and rejected == [None, None]:
            seeds_done.append(seed)
            for sam, figures in zip((False, True), pair, strict=True):
                sides[sam].append(figures)
    out: dict[str, Any] = {
        "method": method,
        "dataset": dataset,
        "protocol": protocol,
        "seeds": seeds_done,
        "recorded": recorded,
        "left_out": left_out,
        "radii": sides[True][0]["radii"] if seeds_done else None,
        "rounds": sorted({f["rounds"] for side in sides.values() for f in side}),
        "best_rounds": {
            "without": [f["best_round"] for f in sides[False]],
            "with": [f["best_round"] for f in sides[True]],
        },
        "devices": {
            "without": [f["device"] for f in sides[False]],
            "with": [f["device"] for f in sides[True]],
        },
        "replays": [f["replay"] for side in sides.values() for f in side],
        "hr_from_replays": [
            {"side": "with" if sam else "without", "seed": seed}
            for sam in (False, True)
            for seed, f in zip(seeds_done, sides[sam], strict=True)
            if f["hr_from_replay"]
        ],
        "early_best": [
            {"side": "with" if sam else "without", "seed": seed, "round": f["best_round"]}
            for sam in (False, True)
            for seed, f in zip(seeds_done, sides[sam], strict=True)
            if is_early(f["best_round"], f["rounds"])
        ],
    }
    out["mixed_devices"] = devices.mixed_seeds(out["devices"], seeds_done)
    seeds_sides = sides[False] + sides[True]
    for key, per_user, _, scale in MEASURES:
        out[key] = {
            "without": [f[key] for f in sides[False]],
            "with": [f[key] for f in sides[True]],
        }
        if seeds_done and all(f["per_user"][per_user] is not None for f in seeds_sides):
            a = stats.seed_averaged([f["per_user"][per_user] for f in sides[True]])
            b = stats.seed_averaged([f["per_user"][per_user] for f in sides[False]])
            d = stats.paired_difference(*a, *b)
            out[key]["difference"] = {
                k: (scale * v if k in ("mean", "low", "high") else v) for k, v in d.items()
            }
    return out


def table_rows(runs: Path, records: Path, seeds: Iterable[int] = SEEDS) -> list[dict[str, Any]]:
    """Every row of the table (method, dataset, protocol), each over the seeds of ``seeds``
    whose two records exist."""
    return [
        row(method, dataset, protocol, runs, records, tuple(seeds))
        for method, _, _ in PAIRS
        for dataset in DATASETS
        for protocol in PROTOCOLS
    ]


def _difference(d: dict | None, scale: float) -> str:
    if not d:
        return "-"
    fmt = "{:+.2f}" if scale != 1.0 else "{:+.3g}"
    return f"{fmt.format(d['mean'])} [{fmt.format(d['low'])}, {fmt.format(d['high'])}]"


def counts(rows: list[dict[str, Any]], key: str) -> tuple[int, int, int]:
    """(rows whose interval on SAM minus without lies below 0, above 0, across 0)."""
    below = above = across = 0
    for r in rows:
        d = r[key].get("difference")
        if not d:
            continue
        if d["high"] < 0:
            below += 1
        elif d["low"] > 0:
            above += 1
        else:
            across += 1
    return below, above, across


def verdict(rows: list[dict[str, Any]]) -> list[str]:
    """Per measure, the rows where SAM's interval lies below, above or across 0; then whether
    SAM finds flatter minima here and whether that buys accuracy."""
    lines = []
    for key, _, label, _ in MEASURES:
        below, above, across = counts(rows, key)
        lines.append(
            f"- {label}: SAM lower beyond the interval in {below} rows, higher in {above}, "
            f"within in {across} (of {below + above + across})."
        )
    measured = [r for r in rows if r["mean_lambda_max"].get("difference")]
    if not measured:
        return lines
    flat_below, flat_above, _ = counts(measured, "mean_lambda_max")
    flatter = [r for r in measured if r["mean_lambda_max"]["difference"]["high"] < 0]
    hr_below, hr_above, hr_across = counts(flatter, "hr@10")
    sentence = (
        f"SAM finds flatter minima here in {flat_below} of {len(measured)} measured rows "
        f"(a lower top Hessian eigenvalue beyond the interval), sharper in {flat_above}"
    )
    if flatter:
        sentence += (
            f"; in those {len(flatter)}, test HR@10 with SAM is higher beyond the interval in "
            f"{hr_above}, lower in {hr_below} and within it in {hr_across}"
        )
    early = [r for r in measured if r["early_best"]]
    if early:
        sentence += (
            f". Rows counted with a run whose best round is early ({EARLY_MARK}): "
            f"{len(early)} of {len(measured)}"
        )
    return [*lines, "", sentence + "."]


def _seeds(r: dict[str, Any]) -> str:
    return ", ".join(map(str, r["seeds"]))


def _rounds(r: dict[str, Any]) -> str:
    best = r["best_rounds"]
    early = {(e["side"], e["seed"]) for e in r["early_best"]}

    def side(name: str) -> str:
        return ", ".join(
            f"{b}{EARLY_MARK if (name, seed) in early else ''}"
            for seed, b in zip(r["seeds"], best[name], strict=True)
        )

    return f"{'/'.join(map(str, r['rounds']))}; best {side('without')} / {side('with')}"


def replayed_hr_lines(rows: list[dict[str, Any]], names: dict[str, str]) -> list[str]:
    """The note on the rows whose HR@10 interval pairs users' values from replays (runs
    made without ``per-user.csv``) that gave the run's test HR@10 but not every metric to the
    last digit (empty when none)."""
    flagged = [r for r in rows if r.get("hr_from_replays")]
    if not flagged:
        return []
    which = "; ".join(
        f"{r['method']} {names[r['dataset']]} {r['protocol']} ("
        + ", ".join(f"{e['side']} SAM seed {e['seed']}" for e in r["hr_from_replays"])
        + ")"
        for r in flagged
    )
    return [
        "",
        f"HR@10 intervals with users' values from replays: {which}. Those runs have no "
        "per-user file; each replay of their best round gives the run's test HR@10 exactly, "
        "its other metrics to the last digits only (its `replay` record says by how much), so "
        "the users' hits are the replayed model's.",
    ]


def recorded_note(r: dict[str, Any]) -> str:
    """The cells a row not measured already has (its run and its record), e.g.
    `` (cells recorded: without SAM seed 0)`` ("" when none)."""
    cells = r.get("recorded") or []
    if not cells:
        return ""
    return (
        " (cells recorded: " + ", ".join(f"{c['side']} SAM seed {c['seed']}" for c in cells) + ")"
    )


def row_command(r: dict[str, Any]) -> str:
    """The command that makes a row's records (runs or replays what is missing)."""
    seeds = sorted({*r["seeds"], *rejections.seeds(r.get("left_out", []))})
    return (
        f"python -m fedrec_lab.analysis sam-table --data-dir DIR --out bench/results "
        f"--methods {r['method']} --datasets {r['dataset']} --protocols {r['protocol']} "
        f"--seeds {' '.join(map(str, seeds))}"
    )


def replay_line(rows: list[dict[str, Any]]) -> str:
    checks = [c for r in rows for c in r["replays"] if c is not None]
    states = sum(len(r["replays"]) for r in rows)
    equal = sum(bool(c["metrics_equal"]) for c in checks)
    worst = max((c["max_abs"] for c in checks), default=0.0)
    return (
        f"Best-round models: {states - len(checks)} kept by their run "
        f"(`keep-best-state`), {len(checks)} replayed from their run's configuration; "
        f"{equal} of {len(checks)} replays give their run's validation and test metrics "
        f"exactly (largest difference in any metric or the train loss: {worst:.2g})."
    )


def markdown(rows: list[dict[str, Any]], command: str) -> str:
    """The table of the measured rows, what each row took, and the rows not measured."""
    done = [r for r in rows if r["seeds"]]
    header = ["method", "dataset", "protocol", "seeds", "rounds; best (without / with)"]
    header += ["radii (private / shared)", "devices (without / with)"]
    for _, _, label, _ in MEASURES:
        header += [f"{label}: without", "with", "SAM - without [95 % CI]"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in done:
        radii = " / ".join(f"{v:g}" for v in r["radii"])
        cells = [r["method"], NAMES[r["dataset"]], r["protocol"], _seeds(r), _rounds(r), radii]
        cells.append(devices.cell(r))
        for key, _, _, scale in MEASURES:
            cells += [
                _mean_std(r[key]["without"], scale),
                _mean_std(r[key]["with"], scale),
                _difference(r[key].get("difference"), scale),
            ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += early_lines(done, NAMES)
    lines += replayed_hr_lines(done, NAMES)
    lines += devices.lines(done, NAMES)
    lines += rejections.lines(rows, NAMES)
    missing = [
        f"{r['method']} {NAMES[r['dataset']]} {r['protocol']}{recorded_note(r)}"
        for r in rows
        if not r["seeds"]
    ]
    lines += ["", "Across the rows:", "", *verdict(done), ""]
    if done:
        lines += [replay_line(done), ""]
    if missing:
        lines += [f"Not measured ({len(missing)} of {len(rows)} rows): {'; '.join(missing)}.", ""]
    lines += ["Each row's records:", "", "```bash"]
    lines += [row_command(r) for r in done]
    lines += ["```", "", "The table, from the records:", "", "```bash", command, "```", ""]
    return "\n".join(lines)
