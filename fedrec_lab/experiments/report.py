"""A table's markdown and plot from its cells' run folders.

Per row: test HR@10 and NDCG@10 (mean ± std over the finished seeds), the user-bootstrap 95 %
interval of the seed-mean HR@10 (from each run's ``per-user.csv`` through
:mod:`fedrec_lab.stats`; '-' for runs written before per-user files existed), the paper's
value, the best validation rounds and the number of test users.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedrec_lab.experiments.cells import Cell, RowSpec, data_present
from fedrec_lab.experiments.tables import Table

NAMES = {"ml-100k": "ML-100K", "lastfm-2k": "Last.fm-2K", "ml-1m": "ML-1M"}
NAMES |= {"amazon-video": "Amazon-Video", "synthetic": "synthetic"}
PER_USER = "per-user.csv"


def stats_module():
    """:mod:`fedrec_lab.stats`, or None while it does not exist."""
    try:
        from fedrec_lab import stats
    except ImportError:
        return None
    return stats


@dataclass
class RowResult:
    spec: RowSpec
    cells: list[Cell]
    statuses: list[str]
    runs: Path
    summaries: list[dict] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        for cell, state in zip(self.cells, self.statuses, strict=True):
            if state == "done":
                folder = self.runs / cell.name
                self.summaries.append(json.loads((folder / "summary.json").read_text()))
                self.dirs.append(folder)

    @property
    def label(self) -> str:
        if self.spec.kind == "reference":
            from fedrec_lab.baselines import TITLES

            return TITLES.get(self.spec.preset, self.spec.preset)
        return self.spec.key

    def values(self, metric: str) -> list[float]:
        return [100 * s["test"][metric] for s in self.summaries]

    def mean(self, metric: str = "hr@10") -> float | None:
        values = self.values(metric)
        return statistics.mean(values) if values else None

    def per_user(self, metric: str = "test-hr@10") -> list[tuple[np.ndarray, np.ndarray]] | None:
        """Each finished seed's (users, values), or None unless every one has per-user.csv."""
        stats = stats_module()
        if stats is None or not self.dirs or not all((d / PER_USER).exists() for d in self.dirs):
            return None
        out = []
        for folder in self.dirs:
            users, values = stats.read_per_user(folder)
            out.append((np.asarray(users), np.asarray(values[metric], dtype=float)))
        return out

    def ci(self) -> tuple[float, float] | None:
        per_seed = self.per_user()
        if per_seed is None:
            return None
        low, high = stats_module().seeds_bootstrap_ci(per_seed)
        return 100 * low, 100 * high


def _mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def _state(result: RowResult) -> str:
    done = result.statuses.count("done")
    if done == len(result.cells):
        return f"{done}"
    if "no data" in result.statuses:
        return "no data"
    return f"{done}/{len(result.cells)}"


def main_table(results: list[RowResult]) -> list[str]:
    lines = [
        "| dataset | protocol | method | seeds | test HR@10 | test NDCG@10 | HR@10 95 % CI "
        "(users) | paper (HR / NDCG) | best rounds | test users |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        spec, ci = r.spec, r.ci()
        paper = f"{spec.paper[0]:.2f} / {spec.paper[1]:.2f}" if spec.paper else "-"
        users = sorted({s.get("num_users", "-") for s in r.summaries}, key=str)
        lines.append(
            f"| {NAMES.get(spec.dataset, spec.dataset)} | {spec.protocol} | {r.label} "
            f"| {_state(r)} | {_mean_std(r.values('hr@10'))} | {_mean_std(r.values('ndcg@10'))} "
            f"| {f'[{ci[0]:.2f}, {ci[1]:.2f}]' if ci else '-'} | {paper} "
            f"| {', '.join(str(s.get('best_round', '-')) for s in r.summaries) or '-'} "
            f"| {', '.join(f'{u:,}' if isinstance(u, int) else str(u) for u in users) or '-'} |"
        )
    return lines


def _val(summary: dict) -> float:
    """Validation HR@10 of a run (-inf for a summary without one)."""
    return float(summary.get("val", {}).get("hr@10", float("-inf")))


def paired(
    results: list[RowResult], against: Callable[[RowSpec], str | None] | None = None
) -> list[str]:
    """Per dataset, on the users both evaluated (per-user values averaged over seeds): each
    federated row against the best federated row (highest mean validation HR@10) and against
    ItemKNN, or, given ``against``, against the row whose key it names."""
    stats = stats_module()
    lines = [
        "Paired comparisons (test HR@10 points, per-user values averaged over the seeds, "
        "bootstrap over users"
        + (
            "; each row against the row it is compared with: the base with PLGC against the "
            "base without it, each part switched off against the base with PLGC whole"
            if against is not None
            else ""
        )
        + "):",
        "",
        "| dataset | method | against | difference | 95 % CI | p | users |",
        "|---|---|---|---|---|---|---|",
    ]
    missing = []
    for dataset in dict.fromkeys(r.spec.dataset for r in results):
        rows = [r for r in results if r.spec.dataset == dataset and r.summaries]
        fed = [r for r in rows if r.spec.kind == "federated"]
        if not fed:
            continue
        # The reference row is the best on validation (test HR@10 never chooses anything).
        best = max(fed, key=lambda r: statistics.mean(_val(s) for s in r.summaries))
        knn = next((r for r in rows if r.spec.preset == "itemknn"), None)
        for r in fed:
            others: tuple[RowResult | None, ...]
            if against is None:
                others = (best, knn)
            else:
                key = against(r.spec)
                others = (next((o for o in rows if o.spec.key == key), None),)
            for other in others:
                if other is None or other is r:
                    continue
                a, b = r.per_user(), other.per_user()
                if stats is None or a is None or b is None:
                    missing.append(f"{NAMES.get(dataset, dataset)} {r.label} vs {other.label}")
                    continue
                d = stats.paired_difference(*stats.seed_averaged(a), *stats.seed_averaged(b))
                lines.append(
                    f"| {NAMES.get(dataset, dataset)} | {r.label} | {other.label} "
                    f"| {100 * d['mean']:+.2f} | [{100 * d['low']:+.2f}, {100 * d['high']:+.2f}] "
                    f"| {d['p_value']:.3f} | {d['users']:,} |"
                )
    if missing:
        lines += [
            "",
            f"Not compared ({len(missing)} pairs): a side has no `{PER_USER}` (cells made "
            "before per-user files existed, or reference rows taken from a "
            "`baselines-*.json` file; `--backfill-per-user` adds them) or fedrec_lab.stats "
            "is missing.",
        ]
    return lines


def pivot(results: list[RowResult]) -> list[str]:
    """Leakage: each method's test HR@10 under both protocols side by side."""
    lines = [
        "Side by side (test HR@10 / NDCG@10, mean over seeds; paper: 1 held-out item among 100 "
        "candidates, strict: every item not a train positive):",
        "",
        "| dataset | method | paper | strict | paper / strict (HR@10) |",
        "|---|---|---|---|---|",
    ]
    by_key: dict[tuple[str, str], dict[str, RowResult]] = {}
    for r in results:
        by_key.setdefault((r.spec.dataset, r.label), {})[r.spec.protocol] = r
    for (dataset, label), pair in by_key.items():
        cells = []
        for protocol in ("paper", "strict"):
            result = pair.get(protocol)
            m = result.mean("hr@10") if result else None
            cells.append(
                f"{m:.2f} / {result.mean('ndcg@10'):.2f}" if result and m is not None else "-"
            )
        paper, strict = (pair[p].mean("hr@10") if p in pair else None for p in ("paper", "strict"))
        ratio = f"{paper / strict:.1f}x" if paper is not None and strict else "-"
        name = NAMES.get(dataset, dataset)
        lines.append(f"| {name} | {label} | {cells[0]} | {cells[1]} | {ratio} |")
    return lines


def dataset_notes(datasets: list[str], data_dir: str | Path, extra: dict) -> list[str]:
    """Computed from the splits (:mod:`fedrec_flwr.data`): users each protocol evaluates,
    those dropped, and under ``paper`` the share of users whose test item is also a train
    positive."""
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.data.prepared import prepare

    notes = []
    for dataset in datasets:
        if not data_present(dataset, data_dir):
            continue
        mapping = {k: v for k, v in extra.items() if k.startswith("synthetic-")}
        mapping["data-dir"] = str(Path(data_dir).resolve()) if dataset != "synthetic" else ""
        split = {
            p: prepare(RunConfig.from_mapping({**mapping, "dataset": dataset, "protocol": p}))
            for p in ("strict", "paper")
        }
        strict, paper = split["strict"], split["paper"]
        dropped = strict.meta["dropped_users"]
        share = np.mean(
            [np.isin(paper.test_item[u], paper.train_positives(u)) for u in range(paper.num_users)]
        )
        name = NAMES.get(dataset, dataset)
        notes.append(
            f"- {name}: strict evaluates {strict.num_users:,} users ({dropped:,} of "
            f"{strict.num_users + dropped:,} have fewer than 3 distinct items after "
            f"de-duplication); under the paper protocol ({paper.num_users:,} users, repeated "
            f"rows kept) the test item is also a train positive for {100 * share:.0f} % of "
            "users."
        )
    return notes


def markdown(
    table: Table,
    results: list[RowResult],
    command: str,
    notes: list[str],
    sections: tuple[list[str], ...] = (),
) -> str:
    lines = [f"# {table.title}", "", "```bash", command, "```", ""]
    lines += main_table(results)
    if table.pivot:
        lines += ["", *pivot(results)]
    for section in sections:
        lines += ["", *section]
    if table.paired:
        lines += ["", *paired(results, table.against)]
    lines += [
        "",
        "Test metrics (%) at the round with the best validation HR@10; mean ± std over the "
        "seeds (seeds: how many finished; 'no data': the dataset's file is not in data-dir). "
        "CI: user-bootstrap 95 % interval of the seed-mean HR@10 ('-': no per-user.csv). "
        "Reference rows (centralized, local-only) are tuned on validation by "
        "`fedrec_lab.baselines`; under strict, popularity, ItemKNN and EASE do not depend on "
        "the seed (one cell).",
        *table.notes,
        "",
        "Data:",
        "",
        *notes,
    ]
    return "\n".join(lines) + "\n"
