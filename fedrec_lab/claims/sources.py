"""Where a claim's figure of ours comes from: a cell of a Markdown table in a committed results
file, a value of a committed JSON file, or a paired comparison of committed runs
(``bench/results/runs/<family>-<dataset>-<protocol>-seed<s>/per-user.csv``).

Each source reads the file when asked and says which file it read (the page's ``file``
column); nothing is typed by hand.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedrec_lab import stats
from fedrec_lab.project import project_root

NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
SHORT = {"ml-100k": "ml100k", "lastfm-2k": "lastfm2k"}


def root() -> Path:
    return project_root()


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def table_cell(path: str, filters: dict[str, str], column: str) -> str:
    """The ``column`` cell of the one row matching ``filters`` in the first table of the
    results file ``path`` (relative to the project) that has those columns."""
    text = (root() / path).read_text()
    wanted = {column, *filters}
    block: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if len(block) >= 2:
            header = _cells(block[0])
            if wanted <= set(header):
                index = {name: k for k, name in enumerate(header)}
                rows = [
                    _cells(row)
                    for row in block[2:]
                    if all(_cells(row)[index[c]] == v for c, v in filters.items())
                ]
                if len(rows) != 1:
                    raise ValueError(f"{path}: {len(rows)} rows match {filters}, expected 1")
                return rows[0][index[column]]
        block = []
    raise ValueError(f"{path} has no table with the columns {sorted(wanted)}")


def first_number(text: str) -> float:
    match = NUMBER.search(text)
    if match is None:
        raise ValueError(f"no number in {text!r}")
    return float(match.group())


def json_value(path: str, keys: tuple[Any, ...]) -> Any:
    value = json.loads((root() / path).read_text())
    for key in keys:
        value = value[key]
    return value


@dataclass(frozen=True)
class Runs:
    """The committed runs of one row: ``<family>-<short dataset>-<protocol>-seed<s>``."""

    family: str
    dataset: str
    protocol: str
    seeds: tuple[int, ...] = (0, 1, 2)

    def folders(self) -> list[Path]:
        base = root() / "bench" / "results" / "runs"
        short = SHORT[self.dataset]
        return [base / f"{self.family}-{short}-{self.protocol}-seed{s}" for s in self.seeds]

    def per_user(self, column: str = "test-hr@10") -> tuple[np.ndarray, np.ndarray]:
        per_seed = []
        for folder in self.folders():
            users, columns = stats.read_per_user(folder)
            per_seed.append((users, columns[column]))
        return stats.seed_averaged(per_seed)

    def summaries(self) -> str:
        short = SHORT[self.dataset]
        return f"bench/results/runs/{self.family}-{short}-{self.protocol}-seed*/summary.json"

    def test_values(self, metric: str) -> list[float]:
        return [
            json.loads((folder / "summary.json").read_text())["test"][metric]
            for folder in self.folders()
        ]

    def files(self, name: str = "per-user.csv") -> str:
        short = SHORT[self.dataset]
        return f"bench/results/runs/{self.family}-{short}-{self.protocol}-seed*/{name}"


def paired(a: Runs, b: Runs, column: str = "test-hr@10") -> dict[str, float]:
    """A minus B, points: mean per-user difference (values averaged over the seeds) with its
    paired bootstrap 95 % interval (:func:`fedrec_lab.stats.paired_difference`)."""
    d = stats.paired_difference(*a.per_user(column), *b.per_user(column))
    return {k: 100 * float(d[k]) for k in ("mean", "low", "high")}


def seed_difference(a: Runs, b: Runs, column: str = "test-hr@10") -> dict[str, float]:
    """A minus B, points, from the seeds' summaries: the difference of the seed means and
    +- twice its standard error (each side's seed variance over its seeds)."""
    metric = column.removeprefix("test-")
    va, vb = (np.asarray(r.test_values(metric)) * 100 for r in (a, b))
    mean = float(va.mean() - vb.mean())
    error = float(np.sqrt(va.var(ddof=1) / len(va) + vb.var(ddof=1) / len(vb)))
    return {"mean": mean, "low": mean - 2 * error, "high": mean + 2 * error}
