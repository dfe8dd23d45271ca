"""The SAM table's runs whose best validation round is early: the model a row measures is
then barely trained, and the table flags it (a mark beside the round and a note)."""

from __future__ import annotations

from typing import Any

#: A run's best validation round is early when it falls in this first share of its rounds:
#: the model the row measures is then barely trained, and the table flags it.
EARLY_SHARE = 0.1
#: The mark of an early best round in the table.
EARLY_MARK = "†"


def is_early(best_round: int, rounds: int) -> bool:
    """Whether a run's best round lies in the first :data:`EARLY_SHARE` of its rounds."""
    return best_round <= EARLY_SHARE * rounds


def early_note(r: dict[str, Any]) -> str:
    """The row's runs whose best round is early, e.g. ``with SAM, seeds 1, 2: round 2, 2``
    ("" when none)."""
    parts = []
    for name, label in (("without", "without SAM"), ("with", "with SAM")):
        early = [e for e in r["early_best"] if e["side"] == name]
        if early:
            seeds = ", ".join(str(e["seed"]) for e in early)
            at = ", ".join(str(e["round"]) for e in early)
            plural = "s" if len(early) > 1 else ""
            parts.append(f"{label}, seed{plural} {seeds}: round{plural} {at}")
    return "; ".join(parts)


def early_lines(rows: list[dict[str, Any]], names: dict[str, str]) -> list[str]:
    """The footnote on the rows whose runs peak early (empty when none do)."""
    flagged = [r for r in rows if r["early_best"]]
    if not flagged:
        return []
    which = "; ".join(
        f"{r['method']} {names[r['dataset']]} {r['protocol']} ({early_note(r)})" for r in flagged
    )
    return [
        "",
        f"{EARLY_MARK} A best validation round in the first {EARLY_SHARE * 100:g} % of the run's "
        f"rounds: that run's model is barely trained, and its row compares it with the other "
        f"arm's as it is ({len(flagged)} of {len(rows)} rows: {which}).",
    ]
