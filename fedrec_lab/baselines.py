"""Reference rows a federated method is read against, on the same split and evaluation code.

Centralized models (one server sees every user's train rows; not federated methods):

- ``popularity``: every user gets the items ranked by their number of train rows over all
  users: the floor any recommender must beat.
- ``itemknn``: item-item cosine similarity on the binary train matrix; an item's score for a
  user is the sum of its similarities to the user's train items among its ``k`` nearest
  neighbours (ties between neighbours: lower item id first).
- ``ease``: EASE (Steck, WWW 2019), the closed-form item-item model
  ``B = argmin ||X - XB||^2 + lambda ||B||^2`` with ``diag(B) = 0``; computed through the
  Woodbury identity on the users x users Gram matrix (the item Gram matrix of Last.fm-2K is
  12,454 x 12,454, its users 1,600), exact in float64.
- ``bpr``, ``als``: BPR-MF and implicit ALS from the ``implicit`` library
  (``pip install -e ".[baselines]"``), d = 32, one thread, seeded.

Each is tuned on **validation HR@10 only** over the small grid stated in ``GRIDS`` (the first
best cell in grid order wins); the test metrics reported are those of that cell. The train
matrix is the split's train rows binarised (an item a user has several train rows of counts
once; the ``paper`` split keeps Last.fm-2K's repeated rows, so a user's test item can be one
of its train items there).

Local-only rows (the no-federation sanity check): a federated method's preset
(``conf/<method>-<dataset>-<protocol>.toml``) run with ``server-optimizer = "sgd-momentum"``
and ``server-lr = 0``: the server never moves the global item table (or shared-dense
parameters), so every user trains from the initial random table every round with only its
own data, and keeps only what the method keeps on the device (PFedRec: its score function and
its latest tuned rows; FedMF: its user vector, evaluated on the initial table). Nothing
learned by one user reaches another. Run in-process (one node) with
``early-stopping-patience = 10``.

Scoring: every row goes through :meth:`NodeRuntime.evaluate`, the code that evaluates the
federated methods, so ``paper`` (1 held-out item + 99 sampled negatives) and ``strict`` (all
items except the user's train positives) are exactly the protocols the methods get. A model's
user x item score matrix ``S`` is a dot-product model: node ``p`` holds users ``u = p mod N``,
each user vector is a one-hot vector of the node's users and the item table is
``S[node users].T``, so the logits are ``S`` bit for bit.

    python -m fedrec_lab.baselines --dataset ml-100k --protocol strict --data-dir DIR \\
        [--rows popularity itemknn ease bpr als local-pfedrec local-fedmf] [--out DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import PreparedData, prepare
from fedrec_flwr.evaluation import metric_names
from fedrec_flwr.node.personal import PersonalRows
from fedrec_flwr.node.runtime import NodeRuntime, NodeState
from fedrec_flwr.partition import users_of_partition
from fedrec_flwr.results import write_per_user_csv
from fedrec_lab.presets import resolve

CONF = Path(__file__).resolve().parents[1] / "conf"
USERS_PER_NODE = 128  # users scored by one NodeRuntime: the one-hot vectors are this wide

#: The tuning grids (validation HR@10 picks one cell of each).
GRIDS: dict[str, dict[str, list]] = {
    "itemknn": {"k": [5, 10, 20, 50, 100, 200, 500, 1000]},
    "ease": {"lambda": [1.0, 10.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 3000.0]},
    "bpr": {
        "learning_rate": [0.001, 0.0025, 0.005, 0.01, 0.02],
        "regularization": [0.01, 0.03],
        "iterations": [50, 200, 800],
    },
    "als": {
        "regularization": [0.1, 1.0, 10.0, 100.0, 1000.0],
        "alpha": [0.5, 2.0, 5.0, 20.0, 50.0, 200.0],
    },
}
FACTORS = 32  # d of BPR-MF and ALS, as the federated methods' embedding-dim
ALS_ITERATIONS = 15
LOCAL_ONLY_PATIENCE = 10
CENTRAL = ("popularity", "itemknn", "ease", "bpr", "als")
LOCAL = ("local-pfedrec", "local-fedmf")
ROWS = CENTRAL + LOCAL
NEEDS_IMPLICIT = ("bpr", "als")
TITLES = {
    "popularity": "popularity (centralized)",
    "itemknn": "ItemKNN, cosine (centralized)",
    "ease": "EASE (centralized)",
    "bpr": "BPR-MF d=32, implicit (centralized)",
    "als": "ALS d=32, implicit (centralized)",
    "local-pfedrec": "local-only PFedRec (no federation)",
    "local-fedmf": "local-only FedMF (no federation)",
}

LABELS = {
    "hr@10": "HR@10",
    "ndcg@10": "NDCG@10",
    "recall@20": "Recall@20",
    "ndcg@20": "NDCG@20",
    "mrr": "MRR",
}

Metrics = dict[str, dict[str, float]]
Scorer = Callable[[np.ndarray], np.ndarray]  # users -> [len(users), num_items] scores


@dataclass(frozen=True)
class PerUser:
    """Each evaluated user's metrics, as a federated run's ``per-user.csv`` holds them:
    ``values[i]`` are user ``users[i]``'s ``names`` (the ``val-*`` metrics, then ``test-*``)."""

    users: np.ndarray  # int64 [n]
    names: tuple[str, ...]
    values: np.ndarray  # float64 [n, len(names)]

    @classmethod
    def read(cls, folder: Path) -> PerUser:
        """From ``<folder>/per-user.csv``."""
        from fedrec_lab.stats import read_per_user

        users, columns = read_per_user(folder)
        names = tuple(columns)
        return cls(np.asarray(users), names, np.stack([columns[n] for n in names], axis=1))

    def write(self, folder: Path) -> None:
        """``<folder>/per-user.csv``, as a federated run writes it."""
        write_per_user_csv(folder, self.users, self.names, self.values)


@dataclass
class Row:
    """One reference row: the setting chosen on validation and its metrics (and, where it
    was computed in this process, each user's)."""

    name: str
    title: str
    chosen: dict[str, Any]
    val: dict[str, float]
    test: dict[str, float]
    seconds: float
    grid: list[dict[str, Any]] = field(default_factory=list)  # every cell's val HR@10
    note: str = ""
    per_user: PerUser | None = field(default=None, repr=False, compare=False)

    def record(self) -> dict[str, Any]:
        """The row as JSON data (the per-user values stay out: they go to ``per-user.csv``)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "per_user"}


# ------------------------------------------------------------------ evaluation
def evaluate_scores(config: RunConfig, prepared: PreparedData, scores_of: Scorer) -> Metrics:
    """Validation and test metrics (means over users) of the score matrix ``scores_of``
    gives, through the methods' evaluation code (:meth:`NodeRuntime.evaluate`)."""
    return evaluate_scores_per_user(config, prepared, scores_of)[0]


def evaluate_scores_per_user(
    config: RunConfig, prepared: PreparedData, scores_of: Scorer
) -> tuple[Metrics, PerUser]:
    """:func:`evaluate_scores`'s means and each user's values."""
    num_nodes = max(1, math.ceil(prepared.num_users / USERS_PER_NODE))
    totals: dict[str, float] = {}
    users_seen, values_seen, names = [], [], ()
    for node in range(num_nodes):
        users = users_of_partition(node, num_nodes, prepared.num_users)
        node_config = config.replace(
            method="fedmf", personalization="none", plgc=False, embedding_dim=len(users)
        )
        runtime = NodeRuntime(node_config, prepared, node, num_nodes)
        scores = np.asarray(scores_of(runtime.users), dtype=np.float32)
        if scores.shape != (len(users), prepared.num_items):
            raise ValueError(f"scores of shape {scores.shape}, expected ({len(users)}, items)")
        state = NodeState(
            private={"user-embedding": torch.eye(len(users))},
            personal=PersonalRows.empty(len(users), len(users)),
        )
        sums, ids, values = runtime.evaluate_users(state, None, np.ascontiguousarray(scores.T))
        for name, value in sums.items():
            totals[name] = totals.get(name, 0.0) + value
        users_seen.append(ids)
        values_seen.append(values)
        names = _per_user_names(runtime)
    return _means(totals), PerUser(np.concatenate(users_seen), names, np.concatenate(values_seen))


def _per_user_names(runtime: NodeRuntime) -> tuple[str, ...]:
    metrics = runtime.protocol.metrics
    return tuple(f"{split}-{m}" for split in ("val", "test") for m in metrics)


def _means(sums: dict[str, float]) -> Metrics:
    users = sums.pop("num-users")
    return {
        split: {
            name.split("-", 1)[1]: value / users
            for name, value in sums.items()
            if name.startswith(split + "-")
        }
        for split in ("val", "test")
    }


def popularity(config: RunConfig) -> tuple[Metrics, PerUser]:
    """Validation and test metrics of popularity ranking under ``config.protocol`` (means,
    and each user's): a one-dimensional item table holding the train counts and a user
    vector of 1."""
    prepared = prepare(config)
    counts = np.bincount(prepared.train_items, minlength=prepared.num_items)
    table = counts.astype(np.float32)[:, None]
    runtime = NodeRuntime(config.replace(method="fedmf", embedding_dim=1), prepared, 0, 1)
    state = NodeState(
        private={"user-embedding": torch.ones(len(runtime.users), 1)},
        personal=PersonalRows.empty(len(runtime.users), 1),
    )
    sums, users, values = runtime.evaluate_users(state, None, table)
    return _means(sums), PerUser(users, _per_user_names(runtime), values)


# ---------------------------------------------------------------------- models
def train_matrix(prepared: PreparedData):
    """The binary users x items train matrix (``scipy.sparse`` CSR, float32)."""
    import scipy.sparse as sp

    counts = np.diff(np.asarray(prepared.train_indptr))
    users = np.repeat(np.arange(prepared.num_users), counts)
    items = np.asarray(prepared.train_items)
    matrix = sp.csr_matrix(
        (np.ones(len(items), dtype=np.float32), (users, items)),
        shape=(prepared.num_users, prepared.num_items),
    )
    matrix.sum_duplicates()
    matrix.data[:] = 1.0
    return matrix


def knn_neighbours(train, max_k: int, block: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """Each item's ``max_k`` most cosine-similar other items, most similar first (ties: lower
    item id first): (ids [I, K], similarities [I, K] float32)."""
    train = train.tocsc().astype(np.float64)
    gram = (train.T @ train).tocsr()
    norms = np.sqrt(gram.diagonal())
    inverse = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    num_items = train.shape[1]
    k = min(max_k, num_items - 1)
    ids = np.empty((num_items, k), dtype=np.int64)
    sims = np.empty((num_items, k), dtype=np.float32)
    for lo in range(0, num_items, block):
        hi = min(lo + block, num_items)
        dense = gram[lo:hi].toarray() * inverse[lo:hi, None] * inverse[None, :]
        dense[np.arange(hi - lo), np.arange(lo, hi)] = -1.0  # never its own neighbour
        order = np.argsort(-dense, axis=1, kind="stable")[:, :k]
        ids[lo:hi] = order
        sims[lo:hi] = np.take_along_axis(dense, order, axis=1)
    return ids, sims


def itemknn_scorer(train, ids: np.ndarray, sims: np.ndarray, k: int) -> Scorer:
    """Scores ``sum_{i in N_k(j), i in train(u)} cos(i, j)`` from :func:`knn_neighbours`."""
    import scipy.sparse as sp

    k = min(k, ids.shape[1])
    num_items = ids.shape[0]
    neighbours = sp.csr_matrix(
        (sims[:, :k].ravel(), ids[:, :k].ravel(), np.arange(0, num_items * k + 1, k)),
        shape=(num_items, num_items),
    )  # row j: item j's neighbours i and cos(i, j)
    neighbours_t = neighbours.T.tocsr()
    return lambda users: (train[users] @ neighbours_t).toarray()


def ease_scores(train, lam: float) -> np.ndarray:
    """EASE scores ``X B`` (users x items), ``B = I - P / diag(P)``, ``P = (X^T X + lam I)^-1``.

    Woodbury: ``P = (I - X^T K^-1 X) / lam`` with ``K = X X^T + lam I`` (users x users), so
    ``X P = K^-1 X =: M``, ``diag(P) = (1 - sum_u X * M) / lam`` and ``X B = X - M / diag(P)``;
    ``diag(B) = 0`` holds by construction.
    """
    dense = train.toarray().astype(np.float64)
    gram = (train @ train.T).toarray().astype(np.float64)
    gram[np.diag_indices_from(gram)] += lam
    solved = np.linalg.solve(gram, dense)  # M = K^-1 X
    diag = (1.0 - (dense * solved).sum(axis=0)) / lam
    return dense - solved / diag


def implicit_scores(train, kind: str, seed: int, **params: Any) -> np.ndarray:
    """User x item scores (``user_factors @ item_factors.T``) of BPR-MF or ALS, one thread."""
    from threadpoolctl import threadpool_limits

    if kind == "bpr":
        from implicit.cpu.bpr import BayesianPersonalizedRanking as Model
    else:
        from implicit.cpu.als import AlternatingLeastSquares as Model

        params = {"iterations": ALS_ITERATIONS, **params}
    with threadpool_limits(1, "blas"):  # implicit warns about a multi-threaded BLAS
        model = Model(factors=FACTORS, num_threads=1, random_state=seed, **params)
        model.fit(train.tocsr(), show_progress=False)
    return np.asarray(model.user_factors) @ np.asarray(model.item_factors).T


def _matrix_scorer(scores: np.ndarray) -> Scorer:
    return lambda users: scores[users]


# ---------------------------------------------------------------------- tuning
def tune(
    name: str,
    config: RunConfig,
    prepared: PreparedData,
    grid: dict[str, list],
    make_scorer: Callable[..., Scorer],
) -> Row:
    """Evaluate every cell of ``grid``; keep the first with the best validation HR@10."""
    started = time.perf_counter()
    keys = list(grid)
    cells, best = [], None
    for values in itertools.product(*(grid[k] for k in keys)):
        params = dict(zip(keys, values, strict=True))
        metrics, per_user = evaluate_scores_per_user(config, prepared, make_scorer(**params))
        cells.append({**params, "val-hr@10": metrics["val"]["hr@10"]})
        if best is None or metrics["val"]["hr@10"] > best[1]["val"]["hr@10"]:
            best = (params, metrics, per_user)
        logging.getLogger(__name__).info(
            "%s %s: val HR@10 %.4f", name, params, cells[-1]["val-hr@10"]
        )
    params, metrics, per_user = best
    return Row(
        name,
        TITLES[name],
        params,
        metrics["val"],
        metrics["test"],
        round(time.perf_counter() - started, 1),
        cells,
        per_user=per_user,
    )


def central_row(name: str, config: RunConfig, prepared: PreparedData) -> Row:
    """One centralized row, tuned on validation HR@10 over ``GRIDS[name]``."""
    if name == "popularity":
        started = time.perf_counter()
        metrics, per_user = popularity(config)
        seconds = round(time.perf_counter() - started, 1)
        return Row(
            name, TITLES[name], {}, metrics["val"], metrics["test"], seconds, per_user=per_user
        )
    train = train_matrix(prepared)
    if name == "itemknn":
        ids, sims = knn_neighbours(train, max(GRIDS[name]["k"]))
        return tune(
            name, config, prepared, GRIDS[name], lambda k: itemknn_scorer(train, ids, sims, k)
        )
    if name == "ease":
        return tune(
            name,
            config,
            prepared,
            GRIDS[name],
            lambda **p: _matrix_scorer(ease_scores(train, p["lambda"])),
        )
    if name in NEEDS_IMPLICIT:
        return tune(
            name,
            config,
            prepared,
            GRIDS[name],
            lambda **p: _matrix_scorer(implicit_scores(train, name, config.seed, **p)),
        )
    raise ValueError(f"unknown reference row '{name}'; choose from {', '.join(ROWS)}")


def local_only_config(config: RunConfig, method: str, rounds: int | None = None) -> RunConfig:
    """The method's preset for this dataset and protocol (defaults if there is none) with the
    server's step set to zero: no federation."""
    preset = CONF / f"{method}-{config.dataset.replace('-', '')}-{config.protocol}.toml"
    mapping = resolve(preset) if preset.exists() else {"method": method}
    keep = ("dataset", "protocol", "data_dir", "seed", "synthetic_users", "synthetic_items")
    keep += ("synthetic_mean_degree", "torch_threads", "device")
    base = RunConfig.from_mapping(mapping)
    return base.replace(
        **{k: getattr(config, k) for k in keep},
        num_server_rounds=rounds or base.num_server_rounds,
        server_optimizer="sgd-momentum",
        server_lr=0.0,
        server_momentum=0.0,
        early_stopping_patience=LOCAL_ONLY_PATIENCE,
        eval_every=1,
    )


def local_row(name: str, config: RunConfig, rounds: int | None = None) -> Row:
    """A local-only row: the method's preset with the server never updating (in-process)."""
    from fedrec_flwr.client_app import app as client_app
    from fedrec_flwr.server_app import run_federation
    from fedrec_lab.local_grid import LocalGrid

    method = name.removeprefix("local-")
    run = local_only_config(config, method, rounds)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        run = run.replace(results_dir=folder, run_name="local-only")
        grid = LocalGrid(client_app, run.to_mapping(), num_nodes=1)
        summary = run_federation(grid, run)
        per_user = PerUser.read(Path(folder) / "local-only")
    seconds = round(time.perf_counter() - started, 1)
    preset = f"conf/{method}-{config.dataset.replace('-', '')}-{config.protocol}.toml"
    note = (
        f"{preset if (CONF.parent / preset).exists() else 'defaults'} with server-optimizer "
        f"sgd-momentum, server-lr 0 (the table never moves); best round {summary['best_round']}"
        f" of {summary['rounds']} run"
    )
    return Row(
        name,
        TITLES[name],
        {"best_round": summary["best_round"], "rounds_run": summary["rounds"]},
        summary["val"],
        summary["test"],
        seconds,
        note=note,
        per_user=per_user,
    )


def reference_rows(
    config: RunConfig, rows: tuple[str, ...] = ROWS, local_rounds: int | None = None
) -> list[Row]:
    """Every requested row, in order."""
    prepared = prepare(config)
    out = []
    for name in rows:
        if name in LOCAL:
            out.append(local_row(name, config, local_rounds))
        else:
            out.append(central_row(name, config, prepared))
    return out


def implicit_available() -> bool:
    try:
        import implicit  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------- output
def on_grid_edge(row: Row) -> list[str]:
    """The tuned values of ``row`` chosen at the smallest or largest value of their grid."""
    grid = GRIDS.get(row.name, {})
    return [
        key
        for key, value in row.chosen.items()
        if len(grid.get(key, [])) > 1 and value in (min(grid[key]), max(grid[key]))
    ]


def _pct(value: float) -> str:
    return f"{100 * value:.2f}"


def markdown(config: RunConfig, prepared: PreparedData, rows: list[Row], command: str) -> str:
    metrics = metric_names(config.protocol)
    lines = [
        f"# Reference rows: {config.dataset}, {config.protocol} protocol",
        "",
        "```bash",
        command,
        "```",
        "",
        f"{prepared.num_users:,} users evaluated x {prepared.num_items:,} items, "
        f"{prepared.num_train_rows:,} train rows; seed {config.seed}. Test metrics (%) of the "
        "setting with the best validation HR@10 (grids below; centralized rows see every "
        "user's train rows, they are ceilings, not federated methods). A value chosen at the "
        "edge of its grid is flagged: that row may be a lower bound of what the model can do.",
    ]
    if config.protocol == "paper":
        share = np.mean(
            [
                prepared.test_item[u] in set(prepared.train_positives(u).tolist())
                for u in range(prepared.num_users)
            ]
        )
        lines += [
            "",
            f"Paper protocol: 1 held-out item + 99 sampled negatives; the test item is also a "
            f"train item of {100 * share:.1f} % of the users (repeated rows are kept).",
        ]
    lines += [
        "",
        "| row | chosen on validation | val HR@10 | "
        + " | ".join(f"test {LABELS[m]}" for m in metrics)
        + " | seconds |",
        "|---|---|---|" + "---|" * len(metrics) + "---|",
    ]
    for row in rows:
        chosen = ", ".join(f"{k}={v}" for k, v in row.chosen.items()) or "-"
        edges = on_grid_edge(row)
        if edges:
            chosen += f" (edge of the grid: {', '.join(edges)})"
        lines.append(
            f"| {row.title} | {chosen} | {_pct(row.val['hr@10'])} | "
            + " | ".join(_pct(row.test[m]) for m in metrics)
            + f" | {row.seconds:.1f} |"
        )
    lines += ["", "Grids (validation HR@10, %):", ""]
    for row in rows:
        if row.grid:
            cells = "; ".join(
                ", ".join(f"{k}={v}" for k, v in c.items() if k != "val-hr@10")
                + f": {_pct(c['val-hr@10'])}"
                for c in row.grid
            )
            lines.append(f"- {row.title}: {cells}")
        elif row.note:
            lines.append(f"- {row.title}: {row.note}")
    lines += [
        "",
        "BPR-MF and ALS: `implicit` (CPU, one thread, random_state = seed), d = 32, ALS "
        f"{ALS_ITERATIONS} iterations. ItemKNN: cosine on the binary train matrix. EASE: "
        "closed form, exact. Local-only: the method's preset with the server's step set to "
        "zero (no federation), early-stopping-patience 10. See `fedrec_lab/baselines.py`.",
    ]
    return "\n".join(lines) + "\n"


def write(folder: Path, config: RunConfig, prepared: PreparedData, rows: list[Row], command: str):
    """``baselines-<dataset>-<protocol>.md`` and ``.json`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"baselines-{config.dataset}-{config.protocol}"
    record = {
        "dataset": config.dataset,
        "protocol": config.protocol,
        "seed": config.seed,
        "command": command,
        "num_users": prepared.num_users,
        "num_items": prepared.num_items,
        "grids": {name: GRIDS[name] for name in GRIDS if any(r.name == name for r in rows)},
        "rows": [row.record() for row in rows],
    }
    stem.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(config, prepared, rows, command))
    return stem


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Reference rows (centralized models tuned on validation, local-only "
        "training) on the split and evaluation code of the federated methods."
    )
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--protocol", default="strict")
    parser.add_argument("--data-dir", default="")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the paper negatives and models"
    )
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=None, help="default: all")
    parser.add_argument(
        "--local-rounds", type=int, default=None, help="rounds of the local-only rows (preset's)"
    )
    parser.add_argument(
        "--out", default="", help="write baselines-<dataset>-<protocol>.md/json here"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    config = RunConfig(
        dataset=args.dataset, protocol=args.protocol, data_dir=args.data_dir, seed=args.seed
    )
    rows = tuple(args.rows or ROWS)
    if not implicit_available():
        missing = [r for r in rows if r in NEEDS_IMPLICIT]
        if args.rows and missing:
            sys.exit(f"rows {missing} need the implicit library: pip install -e '.[baselines]'")
        if missing:
            print(
                f"implicit is not installed: rows {missing} skipped (pip install -e '.[baselines]')"
            )
        rows = tuple(r for r in rows if r not in NEEDS_IMPLICIT)
    prepared = prepare(config)
    results = reference_rows(config, rows, args.local_rounds)
    command = " ".join(
        [
            "python -m fedrec_lab.baselines",
            f"--dataset {args.dataset}",
            f"--protocol {args.protocol}",
        ]
        + (["--data-dir DIR"] if args.data_dir else [])
        + ([f"--seed {args.seed}"] if args.seed else [])
        + ([f"--rows {' '.join(args.rows)}"] if args.rows else [])
        + ([f"--local-rounds {args.local_rounds}"] if args.local_rounds else [])
        + ([f"--out {args.out}"] if args.out else [])
    )
    print(markdown(config, prepared, results, command))
    if args.out:
        print(f"written {write(Path(args.out), config, prepared, results, command)}.md/.json")


if __name__ == "__main__":
    main()
