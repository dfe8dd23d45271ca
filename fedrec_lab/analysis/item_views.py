"""``fedrec analyze item-views``: PFedRec's Figure 3, a user's own item rows against the global
ones and a random user's, at evaluation time.

At a run's best round every user is evaluated three times with its own private parameters
(its score function), under the run's protocol and by the node's own evaluation code:

- ``own``: its personal rows where it holds them, else the global rows (the run's evaluation);
- ``global``: the global rows only (its personal and private rows dropped);
- ``random``: the personal and private rows of another user, ``pi(u)``, where that user holds
  them, else the global rows; ``pi`` a permutation of the users without fixed point, keyed by
  the seed (``keyed_rng(seed, "item-views")``).

``own`` must equal the run's best-round metrics (checked, to the last digits of a mean).
Under ``strict`` with ``keep-personal-rows = "positives"`` (PFedRec's strict presets) a user
keeps only its train positives' rows, which the full ranking leaves out: ``own`` then equals
``global`` by construction. Under ``paper`` a user keeps only
the rows of its candidates unless the run kept every tuned row (``eval-loss``, as a replay
does): the random view needs the other user's whole tuned set, so a paper run without it is
refused.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from fedrec_flwr.node.personal import PersonalRows
from fedrec_flwr.node.state import NodeState
from fedrec_flwr.seeding import keyed_rng
from fedrec_lab.analysis.state import BestState

VIEWS = ("own", "global", "random")
METRICS = ("hr@10", "ndcg@10")


def derangement(seed: int, num_users: int) -> np.ndarray:
    """``pi[u]``: the user whose rows user ``u`` takes (never itself; keyed by the seed)."""
    order = keyed_rng(seed, "item-views").permutation(num_users)
    pi = np.empty(num_users, dtype=np.int64)
    pi[order] = np.roll(order, 1)  # each user takes the rows of the previous one in the cycle
    return pi


def _store(parts: list[tuple[np.ndarray, np.ndarray]], row_dim: int) -> PersonalRows:
    counts = [len(items) for items, _ in parts]
    items = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, np.int64)
    rows = np.concatenate([p[1] for p in parts]) if parts else np.empty((0, row_dim), np.float32)
    return PersonalRows(
        indptr=np.r_[0, np.cumsum(counts)].astype(np.int64),
        items=np.asarray(items, np.int64),
        rows=np.asarray(rows, np.float32).reshape(-1, row_dim),
    )


def view_state(best: BestState, partition: int, view: str, pi: np.ndarray) -> NodeState:
    """The state node ``partition`` evaluates with under ``view``."""
    runtime, state = best.nodes[partition]
    if view == "own":
        return state
    row_dim = runtime.method.row_dim
    stores = {"personal": state.personal, **state.private_rows}
    if view == "global":
        empty = PersonalRows.empty(len(runtime.users), row_dim)
        return NodeState(state.private, empty, {n: empty for n in state.private_rows})
    swapped = {}
    for name in stores:
        parts = []
        for user in runtime.users:
            _, source_state, position = best.node_of(int(pi[user]))
            store = source_state.personal if name == "personal" else source_state.private_rows[name]
            parts.append(store.of(position))
        swapped[name] = _store(parts, row_dim)
    personal = swapped.pop("personal")
    return NodeState(state.private, personal, swapped)


def evaluate_view(best: BestState, view: str) -> dict[str, Any]:
    """Means and per-user values (test HR@10 and NDCG@10, validation too) under ``view``."""
    pi = derangement(best.config.training.seed, best.prepared.num_users)
    ids, values, names = [], [], None
    for partition, (runtime, _) in enumerate(best.nodes):
        state = view_state(best, partition, view, pi)
        _, users, per_user = runtime.evaluate_users(state, None, best.eval_table, best.dense)
        names = [f"{s}-{m}" for s in ("val", "test") for m in runtime.protocol.metrics]
        ids.append(users)
        values.append(per_user)
    users = np.concatenate(ids)
    table = np.concatenate(values)
    order = np.argsort(users)
    users, table = users[order], table[order]
    columns = {name: table[:, j] for j, name in enumerate(names or [])}
    return {
        "users": users,
        "means": {name: float(v.mean()) for name, v in columns.items()},
        "columns": columns,
    }


def keeps_every_tuned_row(best: BestState) -> bool:
    return best.config.training.protocol == "strict" or best.config.evaluation.eval_loss


def analyze(best: BestState, summary: dict[str, Any]) -> dict[str, Any]:
    """The record of one run: each view's means, the paired differences' per-user values."""
    if not keeps_every_tuned_row(best):
        raise ValueError(
            f"{best.run_dir.name}: under paper its users kept only their candidates' rows; "
            "the random view needs every tuned row: replay it (fedrec analyze replay), which "
            "keeps them"
        )
    views = {view: evaluate_view(best, view) for view in VIEWS}
    own = views["own"]["means"]
    check = {m: (own[f"test-{m}"], summary["test"][m]) for m in METRICS}
    return {
        "run": best.run_dir.name,
        "method": best.config.method_name,
        "dataset": best.config.data.dataset,
        "protocol": best.config.training.protocol,
        "seed": best.config.training.seed,
        "best_round": best.round,
        "own_equals_run": all(math.isclose(a, b, rel_tol=1e-12) for a, b in check.values()),
        "views": {
            view: {f"test-{m}": record["means"][f"test-{m}"] for m in METRICS}
            | {f"val-{m}": record["means"][f"val-{m}"] for m in METRICS}
            for view, record in views.items()
        },
        "users": [int(u) for u in views["own"]["users"]],
        "per_user_test_hr": {
            view: [float(v) for v in record["columns"]["test-hr@10"]]
            for view, record in views.items()
        },
    }


def write(record: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{record['run']}.json"
    path.write_text(json.dumps(record) + "\n")
    return path


# ----------------------------------------------------------------- PFedRec's Figure 3 report
#: The rows of the report: (run family, protocol). PFedRec's strict preset keeps only its train
#: positives' rows (``keep-personal-rows = "positives"``), which the full ranking leaves out;
#: ``pfedrec+keeptuned`` keeps every tuned row, as the paper protocol's runs do.
FIGURE3 = (("pfedrec", "paper"), ("pfedrec", "strict"), ("pfedrec+keeptuned", "strict"))
DATASETS = (("ml-100k", "ml100k"), ("lastfm-2k", "lastfm2k"))
SEEDS = (0, 1, 2)


def figure3_runs() -> list[tuple[str, str, str, list[str]]]:
    """(family, dataset, protocol, run names) of the report's rows."""
    return [
        (family, dataset, protocol, [f"{family}-{short}-{protocol}-seed{s}" for s in SEEDS])
        for family, protocol in FIGURE3
        for dataset, short in DATASETS
    ]


def figure3_rows(records: Path) -> list[dict[str, Any]]:
    """Per row: each view's test HR@10 and NDCG@10 over the seeds, and the paired
    differences own - global and own - random (per-user test HR@10 averaged over seeds)."""
    from fedrec_lab import stats

    out = []
    for family, dataset, protocol, names in figure3_runs():
        seeds = [s for s, n in zip(SEEDS, names, strict=True) if (records / f"{n}.json").exists()]
        found = [json.loads((records / f"{names[SEEDS.index(s)]}.json").read_text()) for s in seeds]
        if not found:
            continue
        row: dict[str, Any] = {
            "family": family,
            "dataset": dataset,
            "protocol": protocol,
            "seeds": seeds,
            "own_equals_run": all(r["own_equals_run"] for r in found),
        }
        for view in VIEWS:
            for metric in METRICS:
                row[f"{view} {metric}"] = [100 * r["views"][view][f"test-{metric}"] for r in found]
        for other in ("global", "random"):
            a = stats.seed_averaged(
                [(np.asarray(r["users"]), np.asarray(r["per_user_test_hr"]["own"])) for r in found]
            )
            b = stats.seed_averaged(
                [(np.asarray(r["users"]), np.asarray(r["per_user_test_hr"][other])) for r in found]
            )
            d = stats.paired_difference(*a, *b)
            row[f"own - {other}"] = {k: 100 * float(d[k]) for k in ("mean", "low", "high")}
        out.append(row)
    return out


def _ms(values: list[float]) -> str:
    import statistics

    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def figure3_markdown(rows: list[dict[str, Any]], command: str) -> str:
    lines = [
        "# PFedRec's Figure 3: a user's own item rows against the global and a random user's",
        "",
        "```bash",
        command,
        "```",
        "",
        "| run | dataset | protocol | seeds | own HR@10 | global HR@10 | random HR@10 | own "
        "NDCG@10 | global NDCG@10 | random NDCG@10 | own - global (HR@10) | own - random "
        "(HR@10) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        diffs = [
            f"{d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]"
            for d in (r["own - global"], r["own - random"])
        ]
        lines.append(
            f"| {r['family']} | {r['dataset']} | {r['protocol']} | "
            + ", ".join(map(str, r["seeds"]))
            + " | "
            + " | ".join(_ms(r[f"{v} {m}"]) for m in METRICS for v in VIEWS)
            + f" | {diffs[0]} | {diffs[1]} |"
        )
    lines += [
        "",
        "Test metrics (%) at each run's best validation round, every user evaluated with its "
        "own score function and: its own item rows (the run's evaluation, checked equal to "
        "it), the global rows only, or the rows of another user (a keyed permutation without "
        "fixed point), mean ± std over the seeds; the differences are paired over users "
        "(bootstrap 95 % interval). `pfedrec` under `strict` keeps only its train positives' "
        "rows, which the full ranking leaves out, so there own equals global; "
        "`pfedrec+keeptuned` keeps every tuned row.",
    ]
    return "\n".join(lines) + "\n"


def figure3_plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.4))
    width = 0.25
    labels = [f"{r['family']}\n{r['dataset']} {r['protocol']}" for r in rows]
    for k, view in enumerate(VIEWS):
        values = [np.mean(r[f"{view} hr@10"]) for r in rows]
        ax.bar(np.arange(len(rows)) + (k - 1) * width, values, width, label=view)
    ax.set_xticks(np.arange(len(rows)), labels, fontsize=7)
    ax.set_ylabel("test HR@10 (%)")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
