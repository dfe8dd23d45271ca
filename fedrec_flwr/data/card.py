"""The dataset card: what a run trains on, and what each filter removed on the way.

:func:`card_of` is computed once, when a dataset is split (:func:`~fedrec_flwr.data.prepared.
prepare` stores it in the split's ``meta.json``); :func:`card_lines` prints it. The figures
are those of the split, the rows a run uses: users, items, interactions (train rows plus each
user's validation and test item), density, interactions per user (median, p90).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from fedrec_flwr.data.split import SPLIT_MINIMUM

if TYPE_CHECKING:
    from fedrec_flwr.data.interactions import Interactions
    from fedrec_flwr.data.split import LeaveOneOut

LOG = logging.getLogger("flwr")  # Flower's logger: what it logs reaches `flwr log`


def card_of(data: Interactions, split: LeaveOneOut, protocol: str) -> dict[str, Any]:
    """The card of ``data`` split as ``split`` (a JSON-ready dict)."""
    per_user = np.diff(split.train_indptr) + 2
    interactions = int(per_user.sum())
    kept_rows = int(np.isin(data.user, split.source_user).sum())
    removed = list(data.notes.get("filters", []))
    removed.append(
        {
            "name": f"leave-one-out split (users with < {SPLIT_MINIMUM} rows)",
            "rows": len(data) - kept_rows,
            "users": data.num_users - split.num_users,
        }
    )
    if kept_rows != interactions:
        removed.append(
            {"name": f"repeated pairs ({protocol} protocol)", "rows": kept_rows - interactions}
        )
    cells = split.num_users * split.num_items
    card = {
        "dataset": data.name,
        "protocol": protocol,
        "users": split.num_users,
        "items": split.num_items,
        "interactions": interactions,
        "density": interactions / cells if cells else 0.0,
        "per-user-median": float(np.median(per_user)) if len(per_user) else 0.0,
        "per-user-p90": float(np.percentile(per_user, 90)) if len(per_user) else 0.0,
        "rows-loaded": len(data),
        "removed": removed,
    }
    for key in ("file", "format", "layout", "columns", "sha256", "ids", "rows-read", "users-read"):
        if key in data.notes:
            card[key] = data.notes[key]
    return card


def card_lines(card: dict[str, Any]) -> list[str]:
    """The card as a few printable lines."""
    source = card["dataset"]
    if "file" in card:
        source += f" {card['file']} ({card['format']}, sha256 {card['sha256'][:16]})"
    lines = [
        f"dataset card: {source}, {card['protocol']} protocol",
        f"  users {card['users']:,}  items {card['items']:,}  interactions "
        f"{card['interactions']:,}  density {100 * card['density']:.3f}%",
        f"  interactions per user: median {card['per-user-median']:g}, "
        f"p90 {card['per-user-p90']:g}",
    ]
    if "columns" in card:
        lines += layout_lines(card)
    if "rows-read" in card:
        lines.append(
            f"  read {card['rows-read']:,} rows of {card['users-read']:,} users "
            f"(ids: {card['ids']})"
        )
    for step in card["removed"]:
        users = f"{step['users']:,} users, " if "users" in step else ""
        lines.append(f"  removed by {step['name']}: {users}{step['rows']:,} rows")
    return lines


def layout_lines(card: dict[str, Any]) -> list[str]:
    """How a user's file was read: its layout, the column of each role, what stands in for
    time."""
    columns = card["columns"]
    named = {role: label(column) for role, column in columns.items()}
    read = ", ".join(
        f"{role} {named[role]}" for role in ("user", "item", "rating") if role in named
    )
    time = "the line order (no timestamp column: a later line is newer)"
    if "timestamp" in columns:
        time = named["timestamp"]
    lines = [f"  read {card['layout']}" if card.get("layout") else None]
    lines += [f"  columns: {read}; time: {time}"]
    return [line for line in lines if line]


def label(column: str) -> str:
    """``column 'userId'`` for a named column; ``column 1``, by position, as it stands."""
    return column if column.startswith("column ") else f"column {column!r}"


def log_card(meta: dict[str, Any]) -> None:
    """Log a prepared split's card (INFO), if its ``meta.json`` has one."""
    if "card" in meta:
        for line in card_lines(meta["card"]):
            LOG.info("%s", line)
