"""Item-item models over a sum of the users' co-occurrences: EASE, cosine ItemKNN, GF-CF.

No gradient step: each user uploads, once (the first round it is selected), its
co-occurrence contribution ``w_u x_u x_u^T`` and its items ``x_u`` (its train positives,
at most ``itemitem-max-degree`` of them, a subset keyed by (seed, user)); the server sums
them, optionally adds Gaussian noise calibrated to a user-level epsilon, and computes the
item-item matrix ``W`` from the sums (:mod:`fedrec_flwr.methods.cooccurrence`). The model is
shared; each user scores its own full history locally, ``x_u W``: the history is the
method's private parameter (``history``, the multi-hot train positives) and never leaves
the device.

As an item table, item ``j``'s row is column ``j`` of ``W`` (width: the number of items), so
the score function is the dot product of a user's history with the item's row, as FedMF's is
with a user vector. The node's upload and the server's sums are in
:mod:`fedrec_flwr.node.statistics` and :mod:`fedrec_flwr.server.statistics`;
``docs/methods/itemitem.md`` says what the server learns in each mode.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import TypeGuard

import numpy as np
import torch

from fedrec_flwr.methods.base import Method, Phase, Stage, linear_logits
from fedrec_flwr.methods.card import MethodCard
from fedrec_flwr.methods.plugin import MethodPlugin
from fedrec_flwr.run_keys import RunGroups, TrainingKeys
from fedrec_flwr.schema import (
    NON_NEGATIVE,
    POSITIVE,
    ConfigError,
    Dim,
    Group,
    Range,
    RunValues,
    key,
)
from fedrec_flwr.seeding import keyed_rng

HISTORY = "history"


class ItemItemModel(StrEnum):
    """``itemitem-model``: the item-item matrix computed from the sums."""

    EASE = "ease"
    ITEMKNN = "itemknn"
    GFCF = "gfcf"


class DegreeBound(StrEnum):
    """``itemitem-degree-bound``: how ``itemitem-max-degree`` = ``k`` bounds a user's
    contribution. ``sample``: a keyed subset of at most ``k`` of its items; ``scale``: every
    item, its co-occurrences scaled by ``w_u = min(1, sqrt(k (k + 1) / (d (d + 1))))`` (``d``:
    its items), so that their upper triangle's L2 norm is at most that of ``k`` items (the
    per-user clipping of DP-FedAvg, McMahan et al., ICLR 2018), and its item counts by the
    same ``w_u`` (the Gram's diagonal; L2 norm at most ``sqrt(k)``), so that the support of
    ``itemitem-min-count`` counts the weighted users."""

    SAMPLE = "sample"
    SCALE = "scale"


def check_itemitem(config: RunValues) -> None:
    if config.value("method") != "itemitem":
        return
    training = config.group(TrainingKeys)
    if two_rounds(config) and (training.fraction_train < 1 or training.num_server_rounds < 2):
        raise ConfigError(
            "itemitem-min-count > 1 under secure-aggregation takes two rounds of every user "
            "(the item counts, then the co-occurrences over the items at least that many users "
            "hold): set fraction-train = 1.0 and num-server-rounds >= 2, or "
            "itemitem-min-count = 0."
        )
    keys = config.group(ItemItemKeys)
    if keys.itemitem_dp_epsilon > 0 and keys.itemitem_max_degree <= 0:
        raise ConfigError(
            "itemitem-dp-epsilon > 0 calibrates the Gaussian noise to one user's largest "
            "contribution, which needs a bound on its number of items: set "
            "itemitem-max-degree (e.g. 100), or itemitem-dp-epsilon = 0."
        )
    if keys.itemitem_degree_bound == DegreeBound.SCALE:
        if keys.itemitem_model == ItemItemModel.GFCF:
            raise ConfigError(
                "itemitem-degree-bound = 'scale' weighs the co-occurrences and item counts of "
                "EASE and ItemKNN (the counts are the weighted Gram's diagonal): GF-CF's degrees "
                "count every item unweighted. Set itemitem-degree-bound = 'sample', or "
                "itemitem-model = 'ease' or 'itemknn'."
            )
        if keys.itemitem_max_degree <= 0:
            raise ConfigError(
                "itemitem-degree-bound = 'scale' scales a user's co-occurrences down to those "
                "of itemitem-max-degree items: set itemitem-max-degree (e.g. 25)."
            )
    if keys.itemitem_dp_ridge > 0 and (
        keys.itemitem_dp_epsilon <= 0 or keys.itemitem_model != ItemItemModel.EASE
    ):
        raise ConfigError(
            "itemitem-dp-ridge raises EASE's lambda with the noise of itemitem-dp-epsilon: "
            "set itemitem-model = 'ease' and itemitem-dp-epsilon > 0, or itemitem-dp-ridge = 0."
        )


OFF = " (0 = off)"


class ItemItemKeys(Group):
    title = "Item-item (EASE, ItemKNN, GF-CF)"
    check = check_itemitem

    itemitem_model: str = key(
        default=ItemItemModel.EASE.value,
        help="the model computed from the summed co-occurrences: `ease`, `itemknn` (cosine) "
        "or `gfcf` (graph filter)",
        choices=ItemItemModel,
    )
    itemitem_lambda: float = key(default=500.0, help="EASE: the L2 weight `lambda`", range=POSITIVE)
    itemitem_neighbours: int = key(
        default=100, help="ItemKNN: the most similar items that score an item (`k`)", range=Range(1)
    )
    itemitem_shrink: float = key(
        default=0.0,
        help="ItemKNN: added to the cosine's denominator (favours pairs seen often)",
        range=NON_NEGATIVE,
    )
    itemitem_alpha: float = key(
        default=0.3,
        help="GF-CF: weight of the ideal low-pass filter beside the linear one",
        range=NON_NEGATIVE,
    )
    itemitem_rank: int = key(
        default=256,
        help="GF-CF: eigenvectors of the ideal low-pass filter",
        range=NON_NEGATIVE,
        why=" (0: the linear filter alone)",
    )
    itemitem_gram_rank: int = key(
        default=0,
        help="every model reads the summed co-occurrences through their best rank-r positive "
        "semidefinite approximation (the r largest eigenvalues): post-processing of "
        "itemitem-dp-epsilon's noisy sums, at no privacy cost",
        range=NON_NEGATIVE,
        why=OFF,
    )
    itemitem_min_count: int = key(
        default=0,
        help="the model covers the items at least this many users hold (the support); under "
        "secure-aggregation a first round sums the item counts, the second the co-occurrences "
        "over the support",
        range=NON_NEGATIVE,
        why=" (0 or 1: every item a user holds)",
    )
    itemitem_max_degree: int = key(
        default=0,
        help="bounds one user's contribution to that of this many of its items (a subset "
        "keyed by seed and user, or all of them scaled down: itemitem-degree-bound; it still "
        "scores with all of them)",
        range=NON_NEGATIVE,
        why=OFF,
    )
    itemitem_degree_bound: str = key(
        default=DegreeBound.SAMPLE.value,
        help="how itemitem-max-degree bounds a user's contribution: `sample` uploads a subset "
        "of that many of its items (keyed by seed and user); `scale` uploads every item and "
        "scales its co-occurrences down to the L2 norm of that many items', its item counts "
        "by the same weight (EASE, ItemKNN)",
        choices=DegreeBound,
    )
    itemitem_dp_ridge: float = key(
        default=0.0,
        help="EASE under itemitem-dp-epsilon: lambda is raised by this many times the noise's "
        "largest eigenvalue, 2 sigma sqrt(m) for m items (post-processing: no privacy cost)",
        range=NON_NEGATIVE,
        why=OFF,
    )
    itemitem_dp_epsilon: float = key(
        default=0.0,
        help="user-level epsilon of the Gaussian noise the server adds to the sums (needs "
        "itemitem-max-degree)",
        range=NON_NEGATIVE,
        why=OFF,
    )
    itemitem_dp_delta: float = key(
        default=1e-5,
        help="delta of itemitem-dp-epsilon",
        range=Range(0, 1, low_included=False, high_included=False),
    )


#: Options of the gradient-trained methods that mean nothing for sums of co-occurrences.
REFUSED: dict[str, object] = {
    "personalization": "none",
    "plgc": False,
    "ldp-mechanism": "none",
    "ldp-laplace-lambda": 0.0,
    "decoy-ratio": 0.0,
    "sam-rho-private": 0.0,
    "sam-rho-shared": 0.0,
    "robust-aggregation": "none",
    "row-update-bound": 0.0,
    "malicious-fraction": 0.0,
}


def two_rounds(config: RunValues) -> bool:
    """Does the run sum the counts first, then the co-occurrences over the support (secure
    aggregation with ``itemitem-min-count`` > 1: a vector's layout is fixed before it is
    filled)? ``secure-aggregation`` is a plug-in's key, declared above the methods: read by
    name."""
    return bool(config.value("secure-aggregation")) and (
        config.group(ItemItemKeys).itemitem_min_count > 1
    )


class ItemItem(Method):
    name = "itemitem"
    rowwise_logits = True  # linear_logits: a product and a sum over each row

    def __init__(self, config: RunGroups, num_items: int) -> None:
        super().__init__(config, num_items)
        self.keys = config.group(ItemItemKeys)
        for name, neutral in REFUSED.items():
            value = config.value(name)
            if value != neutral:
                raise ConfigError(
                    f"method 'itemitem' sums co-occurrences and takes no gradient step, so "
                    f"{name}={value!r} does not apply: leave {name} = {neutral!r} (for privacy: "
                    "secure-aggregation and itemitem-dp-epsilon)."
                )

    @property
    def row_dim(self) -> int:
        """An item's row is its column of the item-item matrix: as wide as the catalogue."""
        return self.num_items

    @property
    def model_kind(self) -> str:
        return str(self.keys.itemitem_model)

    def stages(self) -> tuple[Stage, ...]:
        """No local training: the upload is the user's co-occurrence contribution."""
        return ()

    def phases(self) -> tuple[Phase, ...]:
        return ()

    # ---------------------------------------------------------------- the user's data
    def init_private(self, users: np.ndarray) -> dict[str, torch.Tensor]:
        """Empty histories (:meth:`init_private_from` fills them from the users' data)."""
        return {HISTORY: torch.zeros((len(users), self.num_items), dtype=torch.float32)}

    def init_private_from(self, users: np.ndarray, data) -> dict[str, torch.Tensor]:
        """Each user's history: its train positives as a multi-hot row."""
        private = self.init_private(users)
        history = private[HISTORY]
        for j, user in enumerate(np.asarray(users).tolist()):
            history[j, torch.from_numpy(np.array(data.train_positives(user), np.int64))] = 1.0
        return private

    @property
    def upload_limit(self) -> int:
        """The most items a user uploads (0: no bound): ``itemitem-max-degree`` when it
        bounds a contribution by sampling (``itemitem-degree-bound`` = ``scale`` uploads every
        item, weighed by :meth:`basket_weight`)."""
        if self.keys.itemitem_degree_bound == DegreeBound.SCALE:
            return 0
        return int(self.keys.itemitem_max_degree)

    def uploaded_items(self, data, user: int) -> np.ndarray:
        """The items user ``user`` uploads (sorted): its train positives, at most
        :attr:`upload_limit` of them (a subset keyed by (seed, user))."""
        items = np.unique(np.asarray(data.train_positives(user), dtype=np.int64))
        limit = self.upload_limit
        if limit <= 0 or len(items) <= limit:
            return items
        rng = keyed_rng(self.config.training.seed, "itemitem-degree", user)
        return np.sort(rng.choice(items, size=limit, replace=False))

    def upload_kind(self, server_round: int) -> str:
        """What a user contributes in its first selected round (``gram``: its items, for
        the co-occurrences), or in round 1 and 2 of a two-round run (:func:`two_rounds`):
        ``counts``, then ``gram`` over the support."""
        if two_rounds(self.config) and server_round == 1:
            return "counts"
        return "gram"

    def basket_weight(self, size: int) -> float:
        """``w_u`` of a user who uploads ``size`` items: 1, ``1 / size`` for GF-CF (the
        user-degree normalisation of ``R~``), or :func:`scaled_weight` under
        ``itemitem-degree-bound`` = ``scale``."""
        if self.model_kind == ItemItemModel.GFCF:
            return 1.0 / size if size else 0.0
        if self.keys.itemitem_degree_bound == DegreeBound.SCALE:
            return scaled_weight(size, self.keys.itemitem_max_degree)
        return 1.0

    @property
    def weighted_counts(self) -> bool:
        """Are a user's item counts weighted by ``w_u`` (``itemitem-degree-bound`` =
        ``scale``: the weighted Gram's diagonal) rather than 1 each?"""
        return self.keys.itemitem_degree_bound == DegreeBound.SCALE

    def count_weight(self, size: int) -> float:
        """The weight of each item count of a user who uploads ``size`` items: ``w_u`` under
        ``itemitem-degree-bound`` = ``scale`` (:attr:`weighted_counts`), else 1 (GF-CF's
        degrees and the support count every item)."""
        return self.basket_weight(size) if self.weighted_counts else 1.0

    # --------------------------------------------------------------------- scoring
    def logits(self, params: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        """``sum_i history_u[i] W[i, j]`` for each item ``j`` of ``rows`` [a, k, I]."""
        return linear_logits(rows, params[HISTORY], None)

    def logits_all(self, params: dict[str, torch.Tensor], table: torch.Tensor) -> torch.Tensor:
        """``x_u W`` for every item: the sum of the columns of ``W^T`` (the table) at the
        user's items, each user on its own (a sum over its items, not a matrix product, so
        its scores do not depend on the other users scored with it)."""
        history = params[HISTORY]
        out = table.new_zeros((len(history), len(table)))
        for j, weights in enumerate(history):
            items = torch.nonzero(weights).squeeze(1)
            if len(items):
                out[j] = (table[:, items] * weights[items]).sum(1)
        return out


def scaled_weight(size: int, max_degree: int) -> float:
    """``min(1, sqrt(k (k + 1) / (d (d + 1))))`` for ``d = size`` items and ``k =
    max_degree``, rounded down to a multiple of ``2^-32`` (the secure vector's fixed point
    carries it exactly, and the L2 norm of the weighted upper triangle stays within the
    bound): :class:`DegreeBound`'s ``scale``."""
    if size <= max_degree:
        return 1.0
    ratio = math.sqrt(max_degree * (max_degree + 1.0) / (size * (size + 1.0)))
    return math.floor(ratio * 2.0**32) * 2.0**-32


def uploads_statistics(method: Method) -> TypeGuard[ItemItem]:
    """Does ``method`` upload its users' co-occurrence sums once instead of training item
    rows (an item-item method: :class:`ItemItem` or a class derived from it, or a plug-in
    wrapping one, which answers for it as it does for every member)?"""
    while isinstance(method, MethodPlugin):
        method = method.base
    return isinstance(method, ItemItem)


CARD = MethodCard(
    ItemItem,
    title="Item-item (EASE, ItemKNN, GF-CF)",
    paper="EASE (Steck, WWW 2019), cosine ItemKNN (Sarwar et al., WWW 2001), GF-CF (Shen et "
    "al., CIKM 2021), over a secure sum (Nicolas et al., 2025; Han et al., 2025)",
    keys=ItemItemKeys,
    search_space={
        "itemitem-lambda": Dim(1.0, 10000.0),
        "itemitem-neighbours": Dim(5, 1000, integer=True),
        "itemitem-alpha": Dim(0.0, 10.0, log=False),
    },
    golden=("ease", "itemknn", "gfcf"),
    golden_own=False,
    order=7,
)
