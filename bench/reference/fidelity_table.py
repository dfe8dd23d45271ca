"""Side-by-side fidelity table: each reference run against our runs on the same data, seeds,
horizon and selection rule. Writes ``bench/results/fidelity.md`` (and ``fidelity.json``)::

    python bench/reference/fidelity_table.py

Inputs: the reference runs' JSONs (``bench/results/reference/*.json``, written by
``bench/reference/<method>.py``) and the ``rounds.csv`` of our runs (rows of
``fidelity_rows.COMPARISONS``, each with the command that makes its runs). Every run is cut to the
reference's logged rounds (a reference run stopped early is compared over the rounds it has;
our runs' first rounds do not depend on the rounds planned), then per seed the round with the
best validation HR@10 (the earliest among ties) gives the test metrics; mean ± std over the
seeds. ``Δ`` is ours minus the reference, in points; an ablation row's ``effect`` is that row
minus our run with the reference settings. The papers' own numbers stay in their column.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

from fidelity_rows import COMPARISONS, RESULTS, Comparison, Row

METRICS = ("hr@10", "ndcg@10")


def read_rounds(folder: Path) -> list[dict]:
    """Our run's rounds as the reference JSON has them (valid / test HR@10, NDCG@10)."""
    with (folder / "rounds.csv").open() as stream:
        return [
            {
                "round": int(row["round"]),
                "valid": {"hr@10": float(row["val-hr@10"]), "ndcg@10": float(row["val-ndcg@10"])},
                "test": {"hr@10": float(row["test-hr@10"]), "ndcg@10": float(row["test-ndcg@10"])},
            }
            for row in csv.DictReader(stream)
            if row["val-hr@10"]
        ]


def best(rounds: list[dict], split: str) -> dict:
    """The round with the best ``split`` HR@10, the earliest among ties."""
    chosen = rounds[0]
    for entry in rounds[1:]:
        if entry[split]["hr@10"] > chosen[split]["hr@10"]:
            chosen = entry
    return chosen


def summary(per_seed: list[list[dict]]) -> dict:
    """Mean / std (points) of the test metrics at the rounds chosen on validation and on
    test, and the chosen rounds."""
    out: dict = {"rounds_chosen": [best(r, "valid")["round"] for r in per_seed]}
    for split in ("valid", "test"):
        for metric in ("hr@10", "ndcg@10"):
            values = [100 * best(r, split)["test"][metric] for r in per_seed]
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            out[f"on-{split}-{metric}"] = (statistics.mean(values), std)
    return out


def cell(value: tuple[float, float]) -> str:
    return f"{value[0]:.2f} ± {value[1]:.2f}"


def signed(ours: dict, base: dict, key: str) -> str:
    return f"{ours[key][0] - base[key][0]:+.2f}"


def our_rounds(row: Row, seeds: list[int], horizon: int) -> list[list[dict]] | None:
    """Our run's first ``horizon`` rounds at each seed; None if a seed has fewer."""
    per_seed = []
    for seed in seeds:
        folder = RESULTS / row.runs.format(seed=seed)
        rounds = read_rounds(folder) if (folder / "rounds.csv").exists() else []
        if len(rounds) < horizon:
            return None
        per_seed.append(rounds[:horizon])
    return per_seed


def reference_rounds(record: dict, seeds: list[int], horizon: int) -> list[list[dict]]:
    by_seed = {s["seed"]: s["rounds"] for s in record["seeds"]}
    return [by_seed[seed][:horizon] for seed in seeds]


def line(parts: list[str], label: str, result: dict, delta: str, effect: str, paper: str):
    return [
        *parts,
        label,
        cell(result["on-valid-hr@10"]),
        cell(result["on-valid-ndcg@10"]),
        delta,
        effect,
        f"{result['on-test-hr@10'][0]:.2f} / {result['on-test-ndcg@10'][0]:.2f}",
        ", ".join(map(str, result["rounds_chosen"])),
        paper,
    ]


def difference(a: dict, b: dict) -> str:
    """``a - b`` on HR@10 / NDCG@10 chosen on validation."""
    return f"{signed(a, b, 'on-valid-hr@10')} / {signed(a, b, 'on-valid-ndcg@10')}"


def within_point(a: dict, b: dict) -> bool:
    """Are HR@10 and NDCG@10 chosen on validation within 1 point of each other?"""
    return all(abs(a[f"on-valid-{m}"][0] - b[f"on-valid-{m}"][0]) <= 1.0 for m in METRICS)


def compare(comparison: Comparison) -> tuple[list[list[str]], dict, list[str]]:
    """The table rows of one comparison, its JSON entry and its notes."""
    reference = json.loads((RESULTS / "reference" / comparison.reference).read_text())
    seeds = [s["seed"] for s in reference["seeds"]]
    horizon = reference["rounds_logged"]
    if comparison.rows:  # our run with the reference settings may have fewer rounds
        available = [
            len(read_rounds(RESULTS / comparison.rows[0].runs.format(seed=seed)))
            if (RESULTS / comparison.rows[0].runs.format(seed=seed) / "rounds.csv").exists()
            else 0
            for seed in seeds
        ]
        horizon = min(horizon, min(available)) or horizon
    head = [comparison.method, comparison.dataset]
    ref_result = summary(reference_rounds(reference, seeds, horizon))
    lines = [
        line(
            [*head, str(horizon), str(len(seeds))],
            f"reference code ({reference['commit'][:7]})",
            ref_result,
            "-",
            "-",
            comparison.paper,
        )
    ]
    record: dict = {
        "method": comparison.method,
        "dataset": comparison.dataset,
        "rounds": horizon,
        "seeds": seeds,
        "reference": ref_result,
        "rows": {},
    }
    notes = [
        f"**{comparison.method}, {comparison.dataset}**: reference `{reference['command']}` "
        f"({reference['reference']} at {reference['commit']})"
        + (f"; {reference['stopped']}" if "stopped" in reference else "")
        + (
            f"; this table: rounds 1..{horizon}, the rounds our run has"
            if horizon < reference["rounds_logged"]
            else ""
        )
        + "."
    ]
    seed_list = " ".join(map(str, seeds))
    results = {}
    for row in comparison.rows:
        per_seed = our_rounds(row, seeds, horizon)
        kept = f"; kept: {row.reason}" if row.reason else ""
        notes.append(f"- {row.label}: `{row.command} --seeds {seed_list}`{kept}")
        if per_seed is None:
            notes[-1] += f" (not in the table: fewer than {horizon} rounds at some seed)"
            continue
        results[row] = summary(per_seed)
    base = results.get(comparison.rows[0])
    for row, result in results.items():
        effect = difference(result, base) if row.reason and base is not None else "-"
        lines.append(
            line(
                [*head, str(horizon), str(len(seeds))],
                row.label,
                result,
                difference(result, ref_result),
                effect,
                "-",
            )
        )
        record["rows"][row.label] = result
    if base is not None:
        verdict = "within" if within_point(base, ref_result) else "not within"
        notes[0] += (
            f" Ours with the reference settings is {verdict} 1 point of the reference run "
            f"(HR@10 / NDCG@10 {difference(base, ref_result)})."
        )
        within = [
            f"{row.label} ({difference(result, ref_result)})"
            for row, result in results.items()
            if row.reason and within_point(result, ref_result)
        ]
        if within and verdict == "not within":
            notes[0] += " Within 1 point of it: " + "; ".join(within) + "."
    for ablation in comparison.reference_ablations:
        path = RESULTS / "reference" / ablation.json
        if not path.exists():
            continue
        variant = json.loads(path.read_text())
        its_seeds = [s["seed"] for s in variant["seeds"]]
        its_horizon = min(horizon, variant["rounds_logged"])
        result = summary(reference_rounds(variant, its_seeds, its_horizon))
        same = summary(reference_rounds(reference, its_seeds, its_horizon))
        ours = None
        if comparison.rows:
            per_seed = our_rounds(comparison.rows[ablation.ours], its_seeds, its_horizon)
            ours = summary(per_seed) if per_seed is not None else None
        lines.append(
            line(
                [*head, str(its_horizon), str(len(its_seeds))],
                ablation.label,
                result,
                difference(ours, result) if ours is not None else "-",
                difference(result, same),
                "-",
            )
        )
        record["rows"][ablation.label] = result
        notes.append(
            f"- {ablation.label}: `{variant['command']}`"
            + (f"; {variant['stopped']}" if "stopped" in variant else "")
            + f"; {ablation.reason}"
        )
    return lines, record, notes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(RESULTS / "fidelity"), help="path without suffix")
    args = parser.parse_args(argv)
    header = (
        "| method | dataset | rounds | seeds | run | test HR@10 | test NDCG@10 "
        "| Δ vs reference (HR / NDCG) | effect (HR / NDCG) | chosen on test (HR / NDCG) "
        "| best rounds | paper (HR / NDCG) |"
    )
    table = [header, "|" + "---|" * 12]
    records, notes = [], []
    for comparison in COMPARISONS:
        if not (RESULTS / "reference" / comparison.reference).exists():
            continue
        lines, record, more = compare(comparison)
        table += ["| " + " | ".join(line) + " |" for line in lines]
        records.append(record)
        notes += ["", *more]
    text = "\n".join(
        [
            "Command: `python bench/reference/fidelity_table.py`",
            "",
            *table,
            "",
            "Test metrics (%) at the round with the best validation HR@10 (the earliest among "
            "ties), mean ± std over the seeds, every run cut to the rounds that the reference run "
            "and our run with the reference settings both logged; the same split, held-out "
            "items and evaluation negatives for the reference "
            "and for us at each seed. Δ: ours minus the reference run; effect: an ablation row "
            "minus our run with the reference settings (points). A reference-code ablation "
            "(the reference run with one of our choices) is measured at its own seeds and "
            "rounds: its effect is against the reference run there, its Δ is our run with the "
            "reference settings and the same choice minus it. Chosen on test: the means "
            "when each seed's round is picked on test HR@10 instead. Paper: the paper's own "
            "table, under its own split and selection.",
            *notes,
        ]
    )
    out = Path(args.out)
    out.with_suffix(".md").write_text(text + "\n")
    out.with_suffix(".json").write_text(json.dumps(records, indent=2) + "\n")
    print(text)


if __name__ == "__main__":
    main()
