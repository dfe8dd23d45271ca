"""How a claim is measured and judged: each helper reads our figure from its source files and
returns it with a verdict.

Verdicts: ``reproduced``; ``not reproduced`` (the effect claimed is not there beyond the
noise: a paired 95 % interval across 0); ``contradicted`` (the opposite beyond the noise, or a
figure a point or more away in the claim's disfavour); ``not measurable here`` (and why).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fedrec_lab.claims import sources
from fedrec_lab.claims.sources import Runs

REPRODUCED, NOT_REPRODUCED = "reproduced", "not reproduced"
CONTRADICTED, NOT_MEASURABLE = "contradicted", "not measurable here"


@dataclass(frozen=True)
class Measured:
    ours: str
    files: tuple[str, ...]
    verdict: str
    why: str


Measure = Callable[[], Measured]


@dataclass(frozen=True)
class Claim:
    paper: str
    where: str
    claim: str
    theirs: str
    measure: Measure


def _points(d: dict[str, float]) -> str:
    return f"{d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]"


def _judged(low: float, high: float) -> tuple[str, str]:
    if low > 0:
        return REPRODUCED, "above beyond the noise"
    if high < 0:
        return CONTRADICTED, "below beyond the noise"
    return NOT_REPRODUCED, "no difference beyond the interval"


def better(a: Runs, b: Runs, what: str, column: str = "test-hr@10") -> Measure:
    """The claim: A above B (``what`` names the pair). Paired over users when every run has
    its ``per-user.csv``: the mean difference and its bootstrap 95 % interval; else from the
    seeds' summaries: the difference of the seed means +- twice its standard error."""

    def measure() -> Measured:
        metric = column.removeprefix("test-").upper()
        if all((f / "per-user.csv").exists() for f in (*a.folders(), *b.folders())):
            d = sources.paired(a, b, column)
            verdict, why = _judged(d["low"], d["high"])
            ours = f"{what}: {_points(d)} {metric} points (paired over users, 3 seeds)"
            return Measured(ours, (a.files(), b.files()), verdict, why)
        d = sources.seed_difference(a, b, column)
        verdict, why = _judged(d["low"], d["high"])
        ours = f"{what}: {_points(d)} {metric} points (seed means, +- 2 standard errors)"
        return Measured(ours, (a.summaries(), b.summaries()), verdict, why)

    return measure


def close_to(
    theirs: tuple[float, float], path: str, filters: dict[str, str], tolerance: float = 1.0
) -> Measure:
    """The claim: the paper's HR@10 / NDCG@10; ours within ``tolerance`` points of both."""

    def measure() -> Measured:
        hr = sources.table_cell(path, filters, "test HR@10")
        ndcg = sources.table_cell(path, filters, "test NDCG@10")
        ours = (sources.first_number(hr), sources.first_number(ndcg))
        gaps = [o - t for o, t in zip(ours, theirs, strict=True)]
        text = f"{hr} / {ndcg}"
        why = f"ours minus the paper's: {gaps[0]:+.2f} / {gaps[1]:+.2f}"
        if all(abs(g) <= tolerance for g in gaps):
            return Measured(text, (path,), REPRODUCED, f"within {tolerance:g} point ({why})")
        if min(gaps) <= -tolerance:
            return Measured(text, (path,), CONTRADICTED, why)
        return Measured(text, (path,), REPRODUCED, f"ours higher ({why})")

    return measure


def cell(path: str, filters: dict[str, str], column: str, judge: Callable[[str], tuple]) -> Measure:
    """One cell of a results table, judged by ``judge(text) -> (verdict, why)``."""

    def measure() -> Measured:
        text = sources.table_cell(path, filters, column)
        verdict, why = judge(text)
        return Measured(text, (path,), verdict, why)

    return measure


def cells(
    reads: list[tuple[str, dict[str, str], str]],
    judge: Callable[[list[str]], tuple[str, str, str]],
) -> Measure:
    """Several cells of results tables, judged together by ``judge(texts) -> (ours,
    verdict, why)``."""

    def measure() -> Measured:
        texts = [sources.table_cell(p, f, c) for p, f, c in reads]
        ours, verdict, why = judge(texts)
        return Measured(ours, tuple(dict.fromkeys(p for p, _, _ in reads)), verdict, why)

    return measure


def json_values(
    path: str, keys: list[tuple], judge: Callable[[list], tuple[str, str, str]]
) -> Measure:
    """Values of a committed JSON file, judged by ``judge(values) -> (ours, verdict, why)``."""

    def measure() -> Measured:
        values = [sources.json_value(path, k) for k in keys]
        ours, verdict, why = judge(values)
        return Measured(ours, (path,), verdict, why)

    return measure


def not_measurable(why: str) -> Measure:
    return lambda: Measured("-", (), NOT_MEASURABLE, why)
