"""Each evaluated user's BCE at the model it evaluates with (``eval-loss``): on its train
positives (``fit-loss``) and on its validation item (``val-loss``), whose difference is the
generalization gap of the round.

Both losses weigh one positive against ``num-negatives`` negatives, as the training loss does,
and share the negatives: the user's 99 validation negatives of the paper protocol (drawn once,
keyed by the seed, from the items it never interacted with; the same under both protocols and
in every round). Per user, with ``k`` = ``num-negatives`` and ``N`` those negatives::

    fit = (mean_{i in train positives} bce(z_i, 1) + k * mean_{j in N} bce(z_j, 0)) / (1 + k)
    val = (bce(z_valid, 1) + k * mean_{j in N} bce(z_j, 0)) / (1 + k)

so the negatives' term cancels in ``val - fit``: the gap is how much worse the model scores its
held-out interaction than the ones it trained on. The scores are those evaluation computes:
the user's private parameters, its personal rows where it holds them (else the global rows
evaluation reads) and the method's other row inputs (:func:`~fedrec_flwr.node.protocols.user_rows`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from fedrec_flwr.data.prepared import EVAL_NEGATIVES_PER_SPLIT, PreparedData
from fedrec_flwr.methods import Method
from fedrec_flwr.node.layered import RowStore
from fedrec_flwr.node.personal import PersonalRows
from fedrec_flwr.node.scoring import user_rows


def loss_items(
    prepared: PreparedData, seed: int, users: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(items [a, P + 1 + 99], mask of real train positives [a, P]): each user's train
    positives (padded with its first one), its validation item, its 99 validation negatives."""
    users = np.asarray(users, dtype=np.int64)
    positives = [np.asarray(prepared.train_positives(int(u)), np.int64) for u in users]
    width = max((len(p) for p in positives), default=0)
    padded = np.empty((len(users), width), dtype=np.int64)
    mask = np.zeros((len(users), width), dtype=bool)
    for j, items in enumerate(positives):
        padded[j] = items[0] if len(items) else prepared.valid_item[users[j]]
        padded[j, : len(items)] = items
        mask[j, : len(items)] = True
    negatives = np.asarray(prepared.eval_negatives(seed)[users], np.int64)
    valid = np.asarray(prepared.valid_item[users], np.int64)[:, None]
    return np.hstack([padded, valid, negatives[:, :EVAL_NEGATIVES_PER_SPLIT]]), mask


def split_losses(
    logits: torch.Tensor, mask: np.ndarray, num_negatives: int
) -> tuple[np.ndarray, np.ndarray]:
    """(fit, val) per user from the logits of :func:`loss_items`' items."""
    logits = logits.detach().double().cpu()
    width = mask.shape[1]
    weights = torch.from_numpy(mask.astype(np.float64))
    positive = F.binary_cross_entropy_with_logits(
        logits[:, :width], torch.ones_like(logits[:, :width]), reduction="none"
    )
    train = (positive * weights).sum(1) / weights.sum(1).clamp(min=1.0)
    held = F.binary_cross_entropy_with_logits(
        logits[:, width], torch.ones_like(logits[:, width]), reduction="none"
    )
    tail = logits[:, width + 1 :]
    negative = F.binary_cross_entropy_with_logits(
        tail, torch.zeros_like(tail), reduction="none"
    ).mean(1)
    k = float(num_negatives)
    fit = (train + k * negative) / (1 + k)
    val = (held + k * negative) / (1 + k)
    return fit.numpy(), val.numpy()


def user_losses(
    method: Method,
    prepared: PreparedData,
    seed: int,
    num_negatives: int,
    params: dict[str, torch.Tensor],
    personal: RowStore,
    private_rows: dict[str, PersonalRows] | None,
    positions: np.ndarray,
    users: np.ndarray,
    item_ids: np.ndarray | None,
    item_rows: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(fit-loss, val-loss) of ``users`` (at ``positions`` in the node), float64 [a] each."""
    items, mask = loss_items(prepared, seed, users)
    rows, extras = user_rows(method, personal, private_rows, positions, items, item_ids, item_rows)
    device = next(iter(params.values())).device
    inputs = {**params, **{n: torch.from_numpy(v).to(device) for n, v in extras.items()}}
    logits = method.logits(inputs, torch.from_numpy(rows).to(device))
    return split_losses(logits, mask, num_negatives)
