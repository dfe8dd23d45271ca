"""Row-wise aggregation of sparse item-row uploads, and the mean of shared-dense uploads;
the server's defences against poisoned rows (a per-row norm bound, robust aggregation)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from fedrec_flwr.schema import NON_NEGATIVE, POSITIVE, ConfigError, Group, RunValues, key

#: ``update-limit``'s default: far beyond any honest user's change of one coordinate in one
#: round (PFedRec's long steps on ML-100K: a row's change has norm 60 at the 99th percentile).
UPDATE_LIMIT = 1e4


@dataclass(frozen=True)
class RowUpload:
    """One node's upload: for each item it trained, the sum of its users' tuned rows (rows
    whose sum is zero: only their ids and counts), and the sums of its users' tuned
    shared-dense parameters."""

    item_ids: np.ndarray  # [k] distinct
    row_sums: np.ndarray  # [k, d]
    row_counts: np.ndarray  # [k]: how many of the node's users trained the row
    num_users: int  # users that trained on the node this round
    dense_sums: dict[str, np.ndarray] = field(default_factory=dict)
    # Rows trained whose sum is zero (sent as ids and counts only) and their counts.
    zero_ids: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    zero_counts: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    # Sum over its users of 1 - f_u: the factor weight decay took the rows they did not hold
    # (weight-decay-rows = "all", fedrec_flwr/node/dense_decay.py); 0: none.
    row_shrink: float = 0.0


def row_changes(
    table: np.ndarray, uploads: Sequence[RowUpload], rule: str
) -> tuple[np.ndarray, np.ndarray]:
    """(touched rows, their float64 change) from the round's uploads.

    ``round-mean``: row ``i`` moves by the sum of its users' changes divided by the number of
    users in the round (a user that did not train row ``i`` counts as "no change", as in the
    reference codes' mean over dense tables). ``toucher-mean``: divided by the number of
    users that trained row ``i``. Sums run in float64 so the result does not depend on the
    order of the uploads or on how users were packed into nodes. A row uploaded as zero
    (``zero_ids``) counts as trained to the zero vector: its users still move it.
    """
    total_users = sum(upload.num_users for upload in uploads)
    if total_users == 0:
        return np.empty(0, dtype=np.int64), np.empty((0, table.shape[1]))
    sums = np.zeros(table.shape, dtype=np.float64)
    counts = np.zeros(table.shape[0], dtype=np.int64)
    for upload in uploads:
        sums[upload.item_ids] += upload.row_sums
        counts[upload.item_ids] += upload.row_counts
        counts[upload.zero_ids] += upload.zero_counts
    touched = np.flatnonzero(counts)
    base = table[touched].astype(np.float64)
    change = sums[touched] - counts[touched, None] * base
    return touched, change / mean_divisor(rule, total_users, counts[touched])


def mean_divisor(rule: str, total_users: int, row_users: np.ndarray) -> np.ndarray:
    """Float64 column dividing each touched row's summed change: the round's users
    (``round-mean``) or the row's own users ``row_users`` (``toucher-mean``)."""
    if rule == "round-mean":
        return np.full((len(row_users), 1), float(total_users))
    if rule == "toucher-mean":
        return row_users[:, None].astype(np.float64)
    raise ValueError(f"unknown aggregation rule '{rule}' (round-mean, toucher-mean)")


def aggregate_rows(table: np.ndarray, uploads: Sequence[RowUpload], rule: str) -> np.ndarray:
    """New global table from the round's uploads (``table`` is not modified)."""
    touched, delta = row_changes(table, uploads, rule)
    new_table = table.copy()
    new_table[touched] = (table[touched].astype(np.float64) + delta).astype(table.dtype)
    return new_table


def dense_changes(
    dense: dict[str, np.ndarray], uploads: Sequence[RowUpload]
) -> dict[str, np.ndarray]:
    """Float64 change of each shared-dense parameter: mean over the round's users of their
    tuned copies, minus the global value (every training user trains every dense weight)."""
    total_users = sum(upload.num_users for upload in uploads)
    changes = {}
    for name, value in dense.items():
        total = np.zeros(value.shape, dtype=np.float64)
        for upload in uploads:
            total += upload.dense_sums[name]
        changes[name] = total / max(total_users, 1) - value.astype(np.float64)
    return changes


class RobustRule(StrEnum):
    """``robust-aggregation``: how a row's contributors' changes are combined."""

    NONE = "none"
    TRIMMED_MEAN = "trimmed-mean"
    MEDIAN = "median"


#: Share of a row's contributors dropped at each end, coordinate by coordinate, by
#: ``trimmed-mean`` (Yin et al., ICML 2018); a row with fewer than 1 / TRIM_FRACTION
#: contributors loses none.
TRIM_FRACTION = 0.1


def check_defences(config: RunValues) -> None:
    robust = config.group(DefenceKeys).robust_aggregation
    if robust != RobustRule.NONE and float(config.value("decoy-ratio")) > 0:
        raise ConfigError(
            f"robust-aggregation='{robust}' and decoy-ratio > 0 do not "
            "combine: decoy rows are contributors the server cannot tell from real ones, and "
            "their changes pull the median or trimmed mean of every row they hit. Set "
            "decoy-ratio = 0, or robust-aggregation = 'none' (row-update-bound still applies)."
        )


#: The server's defences against poisoned uploads (see the module's doc).
class DefenceKeys(Group):
    title = "Server defences against poisoning"

    row_update_bound: float = key(
        default=0.0,
        help="L2 bound on a user's change of one item row per round: each reply's row change is "
        "clipped to it (times the reply's users of the row), so no row moves further in a "
        "round; 0 = off",
        range=NON_NEGATIVE,
        why=": the longest change of an item row one user may make in a round (0 = no bound)",
    )
    update_limit: float = key(
        default=UPDATE_LIMIT,
        help="largest change of one coordinate of an item row or shared-dense parameter that "
        "one user may upload in a round: a reply beyond it (times its users of the row) "
        "is refused whole, not clipped, and the other replies aggregate",
        range=POSITIVE,
    )
    robust_aggregation: str = key(
        default=RobustRule.NONE.value,
        help="how a row's contributors' changes combine: `none` (their mean, as `aggregation` "
        "says), `trimmed-mean` (coordinate-wise, 10 % dropped at each end) or `median` "
        "(coordinate-wise); needs one user per node and no decoys",
        choices=RobustRule,
    )

    check = check_defences


def contributions(
    table: np.ndarray, uploads: Sequence[RowUpload]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (upload, row) pair of the round: the row ids, the upload's float64 change of the
    row (its users' tuned rows summed, minus as many global rows) and its number of users."""
    ids, changes, counts = [], [], []
    for upload in uploads:
        rows = np.concatenate(
            [
                np.asarray(upload.row_sums, dtype=np.float64),
                np.zeros((len(upload.zero_ids), table.shape[1])),
            ]
        )
        upload_ids = np.concatenate([upload.item_ids, upload.zero_ids]).astype(np.int64)
        upload_counts = np.concatenate([upload.row_counts, upload.zero_counts]).astype(np.int64)
        base = table[upload_ids].astype(np.float64)
        ids.append(upload_ids)
        changes.append(rows - upload_counts[:, None] * base)
        counts.append(upload_counts)
    if not ids:
        return np.empty(0, np.int64), np.empty((0, table.shape[1])), np.empty(0, np.int64)
    return np.concatenate(ids), np.concatenate(changes), np.concatenate(counts)


def row_norms(rows: np.ndarray) -> np.ndarray:
    """L2 norm of each row without overflow (a row of 1e300 has norm about 1e300, not inf);
    inf for a row holding NaN or inf."""
    scale = np.abs(rows).max(axis=1, initial=0.0)
    norms = np.zeros(len(rows))
    finite = np.isfinite(scale)
    norms[~finite] = np.inf
    ok = finite & (scale > 0)
    norms[ok] = scale[ok] * np.linalg.norm(rows[ok] / scale[ok, None], axis=1)
    return norms


def bounded_changes(changes: np.ndarray, counts: np.ndarray, bound: float) -> np.ndarray:
    """Each change shortened so that its users' mean change has L2 norm at most ``bound``
    (one user: its own change); a change holding NaN or inf becomes zero."""
    norms = row_norms(changes)
    limit = bound * counts.astype(np.float64)
    factor = np.ones(len(changes))
    long = norms > limit
    factor[long] = np.where(np.isfinite(norms[long]), limit[long] / norms[long], 0.0)
    out = changes * factor[:, None]
    out[~np.isfinite(norms)] = 0.0
    return out


def robust_location(values: np.ndarray, groups: np.ndarray, num_groups: int, rule: str):
    """Coordinate-wise median or trimmed mean of the ``values`` of each group (``groups``:
    each value's group in 0..num_groups-1, every group non-empty)."""
    order = np.argsort(groups, kind="stable")
    bounds = np.searchsorted(groups[order], np.arange(num_groups + 1))
    out = np.empty((num_groups, values.shape[1]))
    for g in range(num_groups):
        members = values[order[bounds[g] : bounds[g + 1]]]
        if rule == RobustRule.MEDIAN:
            out[g] = np.median(members, axis=0)
        else:
            cut = int(TRIM_FRACTION * len(members))
            out[g] = np.sort(members, axis=0)[cut : len(members) - cut].mean(axis=0)
    return out


def defended_row_changes(
    table: np.ndarray, uploads: Sequence[RowUpload], rule: str, bound: float, robust: str
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`row_changes` with the server's defences against poisoned uploads.

    ``bound`` > 0: each upload's change of a row is clipped to ``bound`` times its number of
    users (its users' mean change has norm at most ``bound``). ``robust``: the row moves by
    the coordinate-wise median or trimmed mean of its contributors' mean changes, instead
    of their mean, scaled as ``rule`` scales the mean (``round-mean``: times the row's users
    over the round's users), and clipped to ``bound`` again. Either way no row moves by more
    than ``bound`` in a round. A contributor is an upload: one user in the faithful mode."""
    total_users = sum(upload.num_users for upload in uploads)
    ids, changes, counts = contributions(table, uploads)
    if total_users == 0 or not len(ids):
        return np.empty(0, dtype=np.int64), np.empty((0, table.shape[1]))
    if bound > 0:
        changes = bounded_changes(changes, counts, bound)
    touched, inverse = np.unique(ids, return_inverse=True)
    row_users = np.bincount(inverse, weights=counts, minlength=len(touched))
    divisor = mean_divisor(rule, total_users, row_users)
    if robust == RobustRule.NONE:
        sums = np.zeros((len(touched), table.shape[1]))
        np.add.at(sums, inverse, changes)
        return touched, sums / divisor
    location = robust_location(changes / counts[:, None], inverse, len(touched), robust)
    if bound > 0:
        location = bounded_changes(location, np.ones(len(location), np.int64), bound)
    return touched, location * (row_users[:, None] / divisor)


def upload_violation(
    table: np.ndarray, dense: dict[str, np.ndarray], upload: RowUpload, limit: float
) -> str | None:
    """Why ``upload`` lies beyond ``limit``, None when it does not: a row's summed change
    (its sum minus as many global rows as its users of the row) must stay within
    ``count * limit`` in every coordinate, a shared-dense parameter's within
    ``num_users * limit``, and every value must be finite (a NaN is beyond any limit). Rows
    uploaded as zero carry no value and are not checked."""
    with np.errstate(all="ignore"):
        counts = np.asarray(upload.row_counts, dtype=np.float64)[:, None]
        base = table[upload.item_ids].astype(np.float64)
        change = np.asarray(upload.row_sums, dtype=np.float64) - counts * base
        beyond = ~(np.abs(change) <= counts * limit)
        if beyond.any():
            row = int(np.flatnonzero(beyond.any(axis=1))[0])
            worst = np.abs(change[row] / counts[row]).max()
            return (
                f"row {int(upload.item_ids[row])} changes by {worst:.4g} per user in one "
                f"coordinate, beyond update-limit={limit:g}"
            )
        for name, total in sorted(upload.dense_sums.items()):
            change = np.asarray(total, np.float64) - upload.num_users * dense[name]
            if not (np.abs(change) <= upload.num_users * limit).all():
                worst = np.abs(change).max() / max(upload.num_users, 1)
                return (
                    f"'{name}' changes by {worst:.4g} per user in one coordinate, beyond "
                    f"update-limit={limit:g}"
                )
    return None
