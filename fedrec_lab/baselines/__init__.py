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

    fedrec baselines --dataset ml-100k --protocol strict --data-dir DIR \\
        [--rows popularity itemknn ease bpr als local-pfedrec local-fedmf] [--out DIR]

The parts: :mod:`.scoring` (evaluation through the methods' code), :mod:`.models`,
:mod:`.rows` (grids, tuning, local-only rows), :mod:`.report` (Markdown and JSON) and
:mod:`.command` (``fedrec baselines``, or ``python -m fedrec_lab.baselines``).
"""

from fedrec_lab.baselines.command import main
from fedrec_lab.baselines.models import (
    ALS_ITERATIONS,
    FACTORS,
    ease_scores,
    implicit_scores,
    itemknn_scorer,
    knn_neighbours,
    matrix_scorer,
    train_matrix,
)
from fedrec_lab.baselines.report import LABELS, markdown, on_grid_edge, write
from fedrec_lab.baselines.rows import (
    CENTRAL,
    GRIDS,
    LOCAL,
    LOCAL_ONLY_PATIENCE,
    NEEDS_IMPLICIT,
    ROWS,
    TITLES,
    Row,
    central_row,
    implicit_available,
    local_only_config,
    local_row,
    method_preset,
    reference_rows,
    tune,
)
from fedrec_lab.baselines.scoring import (
    USERS_PER_NODE,
    Metrics,
    PerUser,
    Scorer,
    evaluate_scores,
    evaluate_scores_per_user,
    popularity,
)
from fedrec_lab.project import lazy_paths

__getattr__ = lazy_paths(__name__, "CONF")

__all__ = [
    "ALS_ITERATIONS",
    "CENTRAL",
    "FACTORS",
    "GRIDS",
    "LABELS",
    "LOCAL",
    "LOCAL_ONLY_PATIENCE",
    "NEEDS_IMPLICIT",
    "ROWS",
    "TITLES",
    "USERS_PER_NODE",
    "Metrics",
    "PerUser",
    "Row",
    "Scorer",
    "central_row",
    "ease_scores",
    "evaluate_scores",
    "evaluate_scores_per_user",
    "implicit_available",
    "implicit_scores",
    "itemknn_scorer",
    "knn_neighbours",
    "local_only_config",
    "local_row",
    "main",
    "markdown",
    "matrix_scorer",
    "method_preset",
    "on_grid_edge",
    "popularity",
    "reference_rows",
    "train_matrix",
    "tune",
    "write",
]
