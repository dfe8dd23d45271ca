"""What a run wrote is the truth about it: its folder says whether it completed.

A completed run has ``summary.json`` and no ``INCOMPLETE`` marker (every round it ran is in
``rounds.csv``); a folder with the marker is an unfinished run, which ``fedrec --resume``
continues. Flower's status is read against this, and loses when they disagree.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COMPLETED, UNFINISHED, MISSING = "completed", "unfinished", "missing"


def incomplete_marker() -> str:
    """The marker file's name (the results module imports torch: read when needed)."""
    from fedrec_flwr.results import INCOMPLETE

    return INCOMPLETE


def run_folders(results_dir: Path) -> set[str]:
    """Names of the run folders (with a ``config.json``) in ``results_dir`` now."""
    if not results_dir.is_dir():
        return set()
    return {p.parent.name for p in results_dir.glob("*/config.json")}


def locate(config: dict[str, Any], before: set[str]) -> Path | None:
    """The folder this run wrote: the one it resumes, else a new folder of its
    ``results-dir`` (named after its ``run-name`` if it has one; the latest if several)."""
    if config.get("resume"):
        return Path(config["resume"])
    results = Path(config["results-dir"])
    new = [results / name for name in run_folders(results) - before]
    name = config.get("run-name")
    if name:
        new = [p for p in new if p.name == name or p.name.startswith(f"{name}-")]
    return max(new, key=lambda p: (p / "config.json").stat().st_mtime, default=None)


def rounds_written(folder: Path | None) -> int:
    """Rows of the folder's ``rounds.csv`` (one per round finished), 0 if it has none."""
    if folder is None or not (folder / "rounds.csv").is_file():
        return 0
    with open(folder / "rounds.csv") as handle:
        return max(sum(1 for line in handle if line.strip()) - 1, 0)


@dataclass(frozen=True)
class Verdict:
    """What a run folder says: ``completed``, ``unfinished`` or ``missing`` (none found)."""

    state: str
    folder: Path | None
    rounds: int = 0
    planned: int | None = None  # num-server-rounds of its config.json
    void_rounds: tuple[int, ...] = ()  # a completed run's rounds that changed nothing shared
    partial_rounds: tuple[int, ...] = ()  # its rounds with a node's reply left out

    @property
    def resumable(self) -> bool:
        """An unfinished run with a configuration: ``fedrec --resume`` continues it."""
        folder = self.folder
        marked = folder is not None and (folder / incomplete_marker()).exists()
        return self.state == UNFINISHED and marked

    def describe(self) -> str:
        if self.folder is None:
            return "no run folder was written"
        of = f" of {self.planned}" if self.planned else ""
        if self.state == COMPLETED:
            text = f"{self.rounds} rounds in rounds.csv, summary.json written ({self.folder})"
            if self.void_rounds:
                text += (
                    f"; {len(self.void_rounds)} of them void, no shared update applied "
                    f"(rounds {_listed(self.void_rounds)}: see the warnings of the log)"
                )
            if self.partial_rounds:
                text += (
                    f"; {len(self.partial_rounds)} partial, a node's reply left out, so their "
                    f"figures cover the other nodes' users only (rounds "
                    f"{_listed(self.partial_rounds)}: rejected-replies, train-failures and "
                    "eval-failures in rounds.csv, and the warnings of the log)"
                )
            return text
        return f"{self.rounds}{of} rounds in rounds.csv, no summary.json ({self.folder})"


def _listed(rounds: tuple[int, ...]) -> str:
    """At most the first ten rounds, and how many more."""
    more = f" and {len(rounds) - 10} more" if len(rounds) > 10 else ""
    return ", ".join(map(str, rounds[:10])) + more


def judge(folder: Path | None) -> Verdict:
    """The :class:`Verdict` of a run folder (None: the run wrote none)."""
    if folder is None or not folder.is_dir():
        return Verdict(MISSING, None)
    planned = None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        planned = json.loads((folder / "config.json").read_text()).get("num-server-rounds")
    done = (folder / "summary.json").is_file() and not (folder / incomplete_marker()).exists()
    void: tuple[int, ...] = ()
    partial: tuple[int, ...] = ()
    if done:
        with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
            summary = json.loads((folder / "summary.json").read_text())
            void = tuple(int(r) for r in summary.get("void_rounds") or ())
            partial = tuple(int(r) for r in summary.get("partial_rounds") or ())
    state = COMPLETED if done else UNFINISHED
    return Verdict(state, folder, rounds_written(folder), planned, void, partial)
