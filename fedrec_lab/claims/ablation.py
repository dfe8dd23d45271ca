"""PLGC's parts, each switched off (the ``plgc-ablation-strict`` table of
:mod:`fedrec_lab.experiments.tables`): does each part lift the base's recommendations, and does
the contrastive term lift the effective rank of the personal rows, as the abstract says?"""

from __future__ import annotations

import csv
import json
import statistics

from fedrec_lab.claims.sources import Runs
from fedrec_lab.claims.verdicts import NOT_REPRODUCED, REPRODUCED, Claim, Measure, Measured, better
from fedrec_lab.experiments.report import NAMES
from fedrec_lab.experiments.tables import ABLATION_ROUNDS

#: The bases whose ablation rows are committed on each dataset (strict, seeds 0-2).
BASES = {
    "ml-100k": ("fedrap", "pfedrec", "fedmf-dual", "fedncf-dual", "fedrecon-dual"),
    "lastfm-2k": ("fedrap", "pfedrec", "fedmf-dual", "fedncf-dual", "fedrecon-dual"),
}
PROTOCOL = "strict"


def row(base: str, part: str = "plgc", dataset: str = "ml-100k") -> Runs:
    return Runs(f"{base}+{part}-r{ABLATION_ROUNDS}", dataset, PROTOCOL)


def erank_at_best(runs: Runs) -> float:
    """Mean over the seeds of ``erank-personal`` at each run's best validation round."""
    values = []
    for folder in runs.folders():
        best = json.loads((folder / "summary.json").read_text())["best_round"]
        with (folder / "rounds.csv").open() as f:
            (found,) = [r for r in csv.DictReader(f) if int(r["round"]) == best]
        values.append(float(found["erank-personal"]))
    return statistics.mean(values)


def higher_erank(a: Runs, b: Runs, what: str) -> Measure:
    """The claim: A's personal rows have a higher effective rank than B's (no interval: the
    seeds' means, as the structure table's rows)."""

    def measure() -> Measured:
        ea, eb = erank_at_best(a), erank_at_best(b)
        files = tuple(r.files("rounds.csv") for r in (a, b))
        verdict = REPRODUCED if ea > eb else NOT_REPRODUCED
        seeds = f"mean over {len(a.seeds)} seeds"  # Runs reads every one of its seeds
        return Measured(f"{what}: {eb:.1f} -> {ea:.1f}", files, verdict, seeds)

    return measure


def plgc_parts() -> list[Claim]:
    return [c for dataset, bases in BASES.items() for base in bases for c in _parts(base, dataset)]


def _parts(base: str, dataset: str) -> list[Claim]:
    full = row(base, dataset=dataset)
    where = (
        f"abstract (ours: {NAMES[dataset]} strict, {ABLATION_ROUNDS} rounds, "
        f"{len(full.seeds)} seeds)"
    )
    out = []
    for part, name in (
        ("plgc-nobalance", "balancing"),
        ("plgc-nocontrast", "contrastive term"),
    ):
        out.append(
            Claim(
                "PLGC",
                where,
                f"PLGC's {name} lifts its recommendations ({base}; off: "
                f"`{base}+{part}-r{ABLATION_ROUNDS}`)",
                "each part helps",
                better(full, row(base, part, dataset), f"with minus without its {name}"),
            )
        )
    out.append(
        Claim(
            "PLGC",
            where,
            f"PLGC's contrastive term alleviates dimensional collapse ({base}: effective "
            "rank of the personal rows at the best round)",
            "mitigates",
            higher_erank(full, row(base, "plgc-nocontrast", dataset), "without -> with"),
        )
    )
    return out
