"""Leakage: the same model scored by full ranking and by 100 sampled candidates.

A model trained on the ``strict`` split is scored twice through the methods' evaluation code
(:func:`fedrec_flwr.baselines.evaluate_scores`): ``strict`` (every item but the user's train
positives) and ``paper``'s candidates (the held-out item among 99 sampled never-interacted
items) on the same split. This needs the model's scores, which the centralized reference
rows can recompute from their chosen setting; a federated run keeps no model after it ends,
so its sampled-100 metrics need an evaluation hook in the nodes (not produced here).
Cached as ``<out>/runs/sampled100-<dataset>-strict-seed<s>/summary.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedrec_flwr.experiments.cells import SHORT

MODELS = ("popularity", "itemknn", "ease")


def _scorer(name: str, chosen: dict, prepared):
    from fedrec_flwr import baselines

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
    from fedrec_flwr.baselines import evaluate_scores
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.data.prepared import prepare

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


def section(per_dataset: dict[str, dict | None], names: dict[str, str]) -> list[str]:
    lines = [
        "Sampled-100 against full ranking, same model (strict split, test HR@10 / NDCG@10 %):",
        "",
        "| dataset | model | full ranking | 100 sampled candidates | inflation (HR@10) |",
        "|---|---|---|---|---|",
    ]
    for dataset, models in per_dataset.items():
        for name, m in (models or {}).items():
            full, sampled = m["full"], m["sampled"]
            ratio = sampled["hr@10"] / full["hr@10"] if full["hr@10"] else float("nan")
            lines.append(
                f"| {names.get(dataset, dataset)} | {name} (centralized) "
                f"| {100 * full['hr@10']:.2f} / {100 * full['ndcg@10']:.2f} "
                f"| {100 * sampled['hr@10']:.2f} / {100 * sampled['ndcg@10']:.2f} | {ratio:.1f}x |"
            )
    lines += [
        "",
        "Federated models: not produced. A run keeps no model after it ends, so scoring a "
        "strict run's model with 100 sampled candidates needs an evaluation hook in the nodes "
        "(score the paper candidates beside the full ranking at each evaluation round). The "
        "centralized models above are refitted from the setting their strict cell chose.",
    ]
    return lines
