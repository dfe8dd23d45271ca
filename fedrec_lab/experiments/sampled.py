"""Leakage: the same model scored by full ranking and by 100 sampled candidates.

Centralized models: a model trained on the ``strict`` split is scored twice through the
methods' evaluation code (:func:`fedrec_lab.baselines.evaluate_scores`): ``strict`` (every
item but the user's train positives) and ``paper``'s candidates (the held-out item among 99
sampled never-interacted items) on the same split, refitted from the setting their strict cell
chose. Cached as ``<out>/runs/sampled100-<dataset>-strict-seed<s>/summary.json``.

Federated models: a run keeps no model, but its strict evaluation reports both from the same
score row (``test-hr@10`` and ``test-s100-hr@10``, ...; :mod:`fedrec_flwr.node.protocols`), so they
are read from the strict cells' ``summary.json``; runs written before the ``s100-*`` metrics
existed show '-'.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedrec_lab.experiments.cells import SHORT

MODELS = ("popularity", "itemknn", "ease")


def _scorer(name: str, chosen: dict, prepared):
    from fedrec_lab import baselines

    train = baselines.train_matrix(prepared)
    if name == "popularity":
        counts = np.bincount(prepared.train_items, minlength=prepared.num_items)
        return lambda users: np.broadcast_to(counts.astype(np.float32), (len(users), len(counts)))
    if name == "itemknn":
        ids, sims = baselines.knn_neighbours(train, chosen["k"])
        return baselines.itemknn_scorer(train, ids, sims, chosen["k"])
    scores = baselines.ease_scores(train, chosen["lambda"])
    return lambda users: scores[users]


def sampled_vs_full(
    runs: Path, dataset: str, seed: int, data_dir, extra: dict, compute: bool = True
) -> dict | None:
    """{model: {"full": test metrics, "sampled": test metrics}} of the reference models the
    strict table has chosen (their cells must be done); None if none is (or if it is not
    cached and ``compute`` is false)."""
    folder = runs / f"sampled100-{SHORT[dataset]}-strict-seed{seed}"
    if (folder / "summary.json").exists():
        return json.loads((folder / "summary.json").read_text())
    if not compute:
        return None
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.data.prepared import prepare
    from fedrec_lab.baselines import evaluate_scores

    mapping = {k: v for k, v in extra.items() if k.startswith("synthetic-")}
    mapping |= {"dataset": dataset, "protocol": "strict", "seed": seed}
    mapping["data-dir"] = str(Path(data_dir).resolve()) if dataset != "synthetic" else ""
    config = RunConfig.from_mapping(mapping)
    prepared = prepare(config)
    out = {}
    for name in MODELS:
        cell = runs / f"{name}-{SHORT[dataset]}-strict-seed{seed}" / "summary.json"
        if not cell.exists():
            continue
        scorer = _scorer(name, json.loads(cell.read_text())["chosen"], prepared)
        out[name] = {
            "full": evaluate_scores(config, prepared, scorer)["test"],
            "sampled": evaluate_scores(config.replace(protocol="paper"), prepared, scorer)["test"],
        }
    if not out:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


SAMPLED = ("s100-hr@10", "s100-ndcg@10")


def federated_rows(results) -> dict[str, list[tuple[str, dict, dict | None, int]]]:
    """Per dataset, each federated strict row of ``results`` (report.RowResult) with a
    finished seed: (label, full, sampled, seeds) with test HR@10 / NDCG@10 means over the
    seeds whose summary has the ``s100-*`` metrics (``sampled`` None and ``full`` over every
    finished seed when none has them)."""
    out: dict[str, list] = {}
    for r in results:
        if r.spec.kind != "federated" or r.spec.protocol != "strict" or not r.summaries:
            continue
        having = [s["test"] for s in r.summaries if all(m in s["test"] for m in SAMPLED)]
        tests = having or [s["test"] for s in r.summaries]

        def mean(metric: str, tests=tests) -> float:
            return sum(t[metric] for t in tests) / len(tests)

        full = {m: mean(m) for m in ("hr@10", "ndcg@10")}
        sampled = {m: mean(f"s100-{m}") for m in ("hr@10", "ndcg@10")} if having else None
        out.setdefault(r.spec.dataset, []).append((r.label, full, sampled, len(tests)))
    return out


def _row(dataset: str, label: str, full: dict, sampled: dict | None) -> str:
    if sampled is None:
        return f"| {dataset} | {label} | {_pair(full)} | - | - |"
    ratio = sampled["hr@10"] / full["hr@10"] if full["hr@10"] else float("nan")
    return f"| {dataset} | {label} | {_pair(full)} | {_pair(sampled)} | {ratio:.1f}x |"


def _pair(metrics: dict) -> str:
    return f"{100 * metrics['hr@10']:.2f} / {100 * metrics['ndcg@10']:.2f}"


def section(per_dataset: dict[str, dict | None], names: dict[str, str], results=()) -> list[str]:
    """The sampled-100 against full-ranking table: the centralized models of
    ``per_dataset`` (:func:`sampled_vs_full`) and the federated strict rows of ``results``."""
    lines = [
        "Sampled-100 against full ranking, same model (strict split, test HR@10 / NDCG@10 %):",
        "",
        "| dataset | model | full ranking | 100 sampled candidates | inflation (HR@10) |",
        "|---|---|---|---|---|",
    ]
    federated = federated_rows(results)
    predates = False
    for dataset in dict.fromkeys([*per_dataset, *federated]):
        name = names.get(dataset, dataset)
        for model, m in (per_dataset.get(dataset) or {}).items():
            lines.append(_row(name, f"{model} (centralized)", m["full"], m["sampled"]))
        for label, full, sampled, seeds in federated.get(dataset, []):
            predates |= sampled is None
            plural = "s" if seeds > 1 else ""
            lines.append(_row(name, f"{label} (federated, {seeds} seed{plural})", full, sampled))
    lines += [
        "",
        "Centralized models are refitted from the setting their strict cell chose and scored "
        "both ways. Federated models: both from the same score row of each strict evaluation "
        "(`test-hr@10` and `test-s100-hr@10` of the cell's summary.json, at its best validation "
        "round; the 99 negatives are drawn as the paper protocol draws them, on the strict split).",
    ]
    if predates:
        lines.append(
            "'-': the run predates the `s100-*` metrics (its summary.json has none); run the "
            "cell again to get them."
        )
    return lines
