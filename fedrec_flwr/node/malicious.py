"""Malicious clients for simulation: users whose uploads poison the global item table.

With ``malicious-fraction = f`` the first ``round(f * users)`` users of a permutation keyed
by the seed (at least one) are malicious in every round they train; each node finds its own
among its users, with no list of the others. They are real users taken over (they keep their
data and train as usual); what changes is what they upload (``malicious-attack``):

- ``scale``: the honest change of every uploaded row, times ``malicious-scale`` (a boosted
  update, the simplest model-replacement attack).
- ``promote``: item promotion in the style of PIECK's popular-item embedding attack (Zhang et
  al., ICDE 2024) and FedRecAttack (Rong et al., ICDE 2022): the user also uploads a row
  for each of the ``malicious-target-items`` target items, moved from the global target
  row ``t`` towards the mean ``p`` of the :data:`POPULAR_ITEMS` most popular items' global
  rows: ``t + malicious-scale * (p - t)``. A user's score function rewards what it
  trained on, which the popular items' rows stand for, so a target row that looks like them
  climbs into many users' top 10. The attacker is granted the popular items (PIECK mines
  them from the rows' changes over rounds) and requests their rows and the targets' every
  round; its honest rows are uploaded as they are.

Targets are drawn keyed by the seed among the less popular half of the items (never-popular
items, the case the attacks are built for). Their exposure ``target-er@10`` is the share of
evaluated users whose top 10 under the ``strict`` full ranking (train positives excluded)
holds a target item; it is measured whenever an attack is on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Protocol

import numpy as np
import torch

from fedrec_flwr.methods import Plugin
from fedrec_flwr.run_keys import RunGroups, TrainingKeys
from fedrec_flwr.schema import POSITIVE, ConfigError, Group, Range, RunValues, key
from fedrec_flwr.seeding import keyed_rng
from fedrec_flwr.stages import UploadRound, Uploads, UploadStage

#: Popular items whose mean global row ``promote`` pushes the targets towards.
POPULAR_ITEMS = 20
#: The top-K of the exposure rate ER@K.
EXPOSURE_K = 10


class MaliciousAttack(StrEnum):
    """``malicious-attack``: what a malicious user uploads."""

    NONE = "none"
    PROMOTE = "promote"
    SCALE = "scale"


class TrainData(Protocol):
    """What the attack reads of the data (:class:`~fedrec_flwr.data.prepared.PreparedData`)."""

    num_users: int
    num_items: int
    train_items: np.ndarray


def check_malicious(config: RunValues) -> None:
    keys = config.group(MaliciousKeys)
    attack_on = keys.malicious_attack != MaliciousAttack.NONE
    if attack_on != (keys.malicious_fraction > 0):
        raise ConfigError(
            "malicious-fraction and malicious-attack go together: set both (e.g. "
            "malicious-fraction = 0.01 and malicious-attack = 'promote') or neither."
        )
    if attack_on and config.group(TrainingKeys).protocol != "strict":
        raise ConfigError(
            "a malicious attack's target exposure (target-er@10) is measured on the full "
            "ranking: use protocol = 'strict', or set malicious-attack = 'none'."
        )


class MaliciousKeys(Group):
    title = "Malicious clients (simulation)"
    check = check_malicious

    malicious_fraction: float = key(
        default=0.0,
        help="share of users that are malicious (at least one when > 0), drawn keyed by the seed",
        range=Range(0, 1, high_included=False),
        why=": the share of users whose uploads are poisoned (0 = none)",
    )
    malicious_attack: str = key(
        default=MaliciousAttack.NONE.value,
        help="what a malicious user uploads: `none`, `promote` (target rows pushed towards the "
        "popular items' rows, PIECK / FedRecAttack style) or `scale` (its honest change "
        "times `malicious-scale`); reports `target-er@10`",
        choices=MaliciousAttack,
    )
    malicious_target_items: int = key(
        default=1,
        help="number of target items `promote` pushes, drawn keyed by the seed among the less "
        "popular half of the items",
        range=POSITIVE,
    )
    malicious_scale: float = key(
        default=1.0,
        help="`promote`: the step towards the popular items' mean row (1 = onto it); `scale`: "
        "the factor on the honest change",
        range=POSITIVE,
    )


@dataclass(frozen=True)
class Attack:
    """What the attack reads of the run: the seed its draws are keyed by and the
    malicious-client keys."""

    seed: int
    keys: MaliciousKeys

    @classmethod
    def of(cls, config: RunGroups) -> Attack:
        return cls(config.training.seed, config.group(MaliciousKeys))

    @property
    def active(self) -> bool:
        return self.keys.malicious_attack != MaliciousAttack.NONE


def attack_active(config: RunGroups) -> bool:
    return Attack.of(config).active


@lru_cache(maxsize=8)
def malicious_users(seed: int, num_users: int, fraction: float) -> np.ndarray:
    """The malicious users (sorted): the first ``round(fraction * num_users)`` (at least one)
    of a permutation keyed by the seed."""
    if fraction <= 0:
        return np.empty(0, dtype=np.int64)
    count = max(1, round(fraction * num_users))
    return np.sort(keyed_rng(seed, "malicious").permutation(num_users)[:count])


def popularity(data: TrainData) -> np.ndarray:
    """Each item's number of train interactions."""
    return np.bincount(data.train_items, minlength=data.num_items)


def popular_items(data: TrainData) -> np.ndarray:
    """The :data:`POPULAR_ITEMS` items with the most train interactions (sorted ids)."""
    order = np.argsort(-popularity(data), kind="stable")
    return np.sort(order[:POPULAR_ITEMS])


def target_items(data: TrainData, seed: int, count: int) -> np.ndarray:
    """``count`` target items (sorted), keyed by the seed, among the less popular half."""
    order = np.argsort(popularity(data), kind="stable")
    pool = order[: max(count, data.num_items // 2)]
    return np.sort(keyed_rng(seed, "malicious", 1).choice(pool, size=count, replace=False))


def attack_items(data: TrainData, attack: Attack) -> np.ndarray:
    """The rows a ``promote`` user needs besides its own: targets and popular items."""
    targets = target_items(data, attack.seed, attack.keys.malicious_target_items)
    return np.union1d(targets, popular_items(data)).astype(np.int64)


def is_malicious(data: TrainData, attack: Attack, user: int) -> bool:
    users = malicious_users(attack.seed, data.num_users, attack.keys.malicious_fraction)
    return bool(np.isin(user, users))


def with_attack_items(data: TrainData, attack: Attack, user: int, items: np.ndarray) -> np.ndarray:
    """The rows a user requests: ``items``, and a ``promote`` user's attack rows."""
    promotes = attack.keys.malicious_attack == MaliciousAttack.PROMOTE
    if not promotes or not is_malicious(data, attack, user):
        return items
    return np.union1d(items, attack_items(data, attack)).astype(np.int64)


def exposure_targets(data: TrainData, attack: Attack) -> np.ndarray:
    """The items whose exposure evaluation measures: an attack's targets (none when off)."""
    if not attack.active:
        return np.empty(0, dtype=np.int64)
    return target_items(data, attack.seed, attack.keys.malicious_target_items)


def poisoned_rows(
    data: TrainData,
    attack: Attack,
    users: np.ndarray,
    row_offsets: np.ndarray,
    row_items: np.ndarray,
    tuned: np.ndarray,
    sent: np.ndarray,
    lookup: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(row offsets, items, rows to upload, sent rows) of the round's users, each user's
    block sorted by item: the honest ``tuned`` rows, the malicious users' poisoned.
    ``lookup(items)`` gives the global rows of items the user did not train."""
    offsets, items_out, rows_out, sent_out = [0], [], [], []
    for j, user in enumerate(np.asarray(users, dtype=np.int64)):
        lo, hi = int(row_offsets[j]), int(row_offsets[j + 1])
        items, rows, base = row_items[lo:hi], tuned[lo:hi], sent[lo:hi]
        if is_malicious(data, attack, int(user)):
            items, rows, base = _attack(data, attack, items, rows, base, lookup)
        items_out.append(items)
        rows_out.append(rows)
        sent_out.append(base)
        offsets.append(offsets[-1] + len(items))
    if not items_out:
        return np.asarray(offsets, np.int64), row_items[:0], tuned[:0], sent[:0]
    return (
        np.asarray(offsets, dtype=np.int64),
        np.concatenate(items_out),
        np.concatenate(rows_out).astype(tuned.dtype),
        np.concatenate(sent_out).astype(sent.dtype),
    )


def _attack(data, attack: Attack, items, rows, base, lookup):
    """One malicious user's (items, uploaded rows, sent rows)."""
    keys = attack.keys
    if keys.malicious_attack == MaliciousAttack.SCALE:
        change = rows.astype(np.float64) - base
        return items, (base + keys.malicious_scale * change).astype(rows.dtype), base
    targets = target_items(data, attack.seed, keys.malicious_target_items)
    popular = lookup(popular_items(data)).astype(np.float64).mean(axis=0)
    target_rows = lookup(targets).astype(np.float64)
    pushed = target_rows + keys.malicious_scale * (popular - target_rows)
    own = ~np.isin(items, targets)
    merged = np.concatenate([items[own], targets])
    order = np.argsort(merged, kind="stable")
    uploaded = np.concatenate([rows[own], pushed.astype(rows.dtype)])[order]
    sent = np.concatenate([base[own], target_rows.astype(base.dtype)])[order]
    return merged[order], uploaded, sent


class PoisonedUploads(UploadStage):
    """The malicious users' uploads (``malicious-attack``): a ``promote`` user requests the
    attack rows, and each malicious user's rows are poisoned (:func:`poisoned_rows`)."""

    name = "malicious"
    reads_sent = True

    def __init__(self, attack: Attack, data: TrainData) -> None:
        self.attack, self.data = attack, data

    @classmethod
    def of(cls, config: RunGroups, data: TrainData) -> PoisonedUploads:
        return cls(Attack.of(config), data)

    def request(self, user: int, items: np.ndarray) -> np.ndarray:
        return with_attack_items(self.data, self.attack, user, items)

    def transform(self, uploads: Uploads, upload_round: UploadRound) -> Uploads:
        offsets, items, rows, sent = poisoned_rows(
            self.data,
            self.attack,
            uploads.users,
            uploads.offsets,
            uploads.items,
            uploads.host_rows(),
            uploads.host_sent(),
            upload_round.lookup,
        )
        return uploads.replace(
            offsets=offsets,
            items=items,
            rows=torch.from_numpy(rows),
            sent=torch.from_numpy(sent),
        )


#: Malicious clients (simulation): users whose uploads poison the global item table.
PLUGIN = Plugin(
    name="malicious",
    paper="PIECK (Zhang et al., ICDE 2024), FedRecAttack (Rong et al., ICDE 2022)",
    enabled=attack_active,
    node=PoisonedUploads.of,
    keys=(MaliciousKeys,),
)


def target_exposure(scores: torch.Tensor, valid: torch.Tensor, targets: np.ndarray) -> np.ndarray:
    """1.0 for each user (row of ``scores``) whose top :data:`EXPOSURE_K` among its
    ``valid`` items holds a valid target item, else 0.0 (float64 [a])."""
    exposed = torch.zeros(scores.shape[0], dtype=torch.bool)
    for target in map(int, targets):
        competing = valid.clone()
        competing[:, target] = False
        target_scores = scores[:, target]
        beats = (scores >= target_scores[:, None]) | torch.isnan(scores)
        rank = (beats & competing).sum(dim=1)
        exposed |= valid[:, target] & (rank < EXPOSURE_K) & ~torch.isnan(target_scores)
    return exposed.numpy().astype(np.float64)
