"""One trial: a run in a fresh process, watched round by round through its ``rounds.csv``
and stopped (its process killed) when the watcher says so: pruned, or out of budget."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedrec_lab.child_process import child_env
from fedrec_lab.experiments.cells import RUNNER
from fedrec_lab.project import project_root

#: Seconds between two looks at a running trial's ``rounds.csv``.
POLL_SECONDS = 1.0
#: A watcher: given the rounds finished so far, None to go on or why the trial stops.
Watch = Callable[[list[dict[str, str]]], str | None]


def finished_rounds(run_dir: Path) -> list[dict[str, str]]:
    """The rows of ``rounds.csv`` written so far (a line still being written left out)."""
    try:
        text = (run_dir / "rounds.csv").read_text()
    except (FileNotFoundError, UnicodeDecodeError):
        return []
    complete = text[: text.rfind("\n") + 1]
    return list(csv.DictReader(io.StringIO(complete)))


def metric(row: dict[str, str], key: str) -> float | None:
    """A finite metric of a ``rounds.csv`` row, or None (not evaluated that round, NaN)."""
    try:
        value = float(row.get(key) or "nan")
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def running_best(rows: list[dict[str, str]]) -> list[tuple[int, float]]:
    """(round, best validation HR@10 up to that round) for each evaluated round."""
    best, out = 0.0, []
    for row in rows:
        value = metric(row, "val-hr@10")
        if value is not None:
            best = max(best, value)
            out.append((int(row["round"]), best))
    return out


def partial_summary(rows: list[dict[str, str]]) -> dict[str, Any]:
    """The summary of a stopped trial from its finished rounds: its best validation round
    (the first of the best) and the test metrics of that round."""
    evaluated = [row for row in rows if metric(row, "val-hr@10") is not None]
    if not evaluated:
        return {"rounds": len(rows), "best_round": None, "val": {}, "test": {}}
    best = max(evaluated, key=lambda row: metric(row, "val-hr@10") or 0.0)  # first of ties
    names = ("hr@10", "ndcg@10")
    return {
        "rounds": len(rows),
        "best_round": int(best["round"]),
        "val": {name: metric(best, f"val-{name}") for name in names},
        "test": {name: metric(best, f"test-{name}") for name in names},
    }


def stop(process: subprocess.Popen) -> None:
    """End a trial's process (by its PID): SIGTERM, then SIGKILL if it lingers."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_trial(run_config: dict[str, Any], watch: Watch | None = None) -> dict[str, Any]:
    """One run on one in-process node, in a fresh process; its summary, ``{"error": ...}``,
    or, when ``watch`` stopped it, the summary of its finished rounds with ``"stopped"``
    (the watcher's reason). ``watch`` sees ``<results-dir>/<run-name>/rounds.csv``."""
    run_dir = Path(run_config.get("results-dir", ".")) / str(run_config.get("run-name", ""))
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(
            [sys.executable, "-c", RUNNER, json.dumps(run_config), "1"],
            stdout=out,
            stderr=err,
            text=True,
            cwd=project_root(),
            env=child_env(),
        )
        reason = None
        try:
            while reason is None:
                try:
                    process.wait(timeout=POLL_SECONDS if watch else None)
                    break
                except subprocess.TimeoutExpired:
                    reason = watch(finished_rounds(run_dir)) if watch else None
        except BaseException:  # interrupted (Ctrl-C): the trial's process goes with it
            stop(process)
            raise
        if reason is not None:
            stop(process)
            return {**partial_summary(finished_rounds(run_dir)), "stopped": reason}
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    for line in stdout.splitlines():
        if line.startswith("SUMMARY "):
            return json.loads(line[len("SUMMARY ") :])
    return {"error": (stderr or stdout)[-2000:]}
