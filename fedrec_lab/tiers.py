"""The wall time of the two test tiers (``bench/test_tiers.py``): each tier run as ``.ci/run``
runs it, its outcome counts read from pytest's summary, and the report."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fedrec_lab.project import project_root

COMMAND = "python bench/test_tiers.py"

#: The tiers, as the README and .ci/run give them.
TIERS = {"fast": ["-m", "pytest"], "slow": ["-m", "pytest", "-m", "slow"]}

#: The outcomes of pytest's last line, in the order a report shows them.
OUTCOMES = ("passed", "skipped", "failed", "errors", "xfailed", "xpassed", "deselected")

SUMMARY = re.compile(r"(\d+) (passed|skipped|failed|errors?|xfailed|xpassed|deselected)\b")

FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def counts(output: str) -> dict[str, int]:
    """Outcome counts of pytest's summary line (the last line naming any), zeros elsewhere."""
    lines = [line for line in output.splitlines() if SUMMARY.search(line)]
    found = {outcome: 0 for outcome in OUTCOMES}
    for number, outcome in SUMMARY.findall(lines[-1] if lines else ""):
        found["errors" if outcome.startswith("error") else outcome] = int(number)
    return found


def shown_path(path: Path) -> str:
    """A folder as a report shows it: relative to the project (no machine path)."""
    return os.path.relpath(path.resolve(), project_root())


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=project_root(), capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def run_tier(name: str, env: dict[str, str]) -> dict[str, Any]:
    """One tier: its command, wall seconds, outcome counts, failed tests, load around it."""
    load_before = os.getloadavg()
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *TIERS[name]],
        cwd=project_root(),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seconds = time.perf_counter() - started
    print(done.stdout[-3000:], flush=True)
    return {
        "tier": name,
        "command": " ".join(["python", *TIERS[name]]),
        "exit_code": done.returncode,
        "seconds": round(seconds, 1),
        "counts": counts(done.stdout),
        "failed_tests": FAILED.findall(done.stdout),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def measure(data_dir: Path, command: str = COMMAND) -> dict[str, Any]:
    """Both tiers, one after the other, with .ci/run's environment."""
    cache = Path(tempfile.mkdtemp(prefix="fedrec-test-tiers-cache-"))
    env = {**os.environ, "FEDREC_DATA_DIR": str(data_dir), "FEDREC_CACHE_DIR": str(cache)}
    try:
        started = datetime.now(UTC)
        tiers = [run_tier(name, env) for name in TIERS]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {
        "command": command,
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git("rev-parse", "--short", "HEAD"),
        "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no")),
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "data_dir": shown_path(data_dir),
        "tiers": tiers,
    }


def load(values: list[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def markdown(result: dict[str, Any]) -> str:
    """The report: the command, the machine, one row per tier."""
    tiers = result["tiers"]
    lines = [
        "# Test tiers: wall time",
        "",
        "```bash",
        result["command"],
        "```",
        "",
        f"{result['date']}, commit {result['commit']}"
        + (" (with uncommitted changes)" if result["uncommitted_changes"] else "")
        + f", {result['nproc']} cores, Python {result['python']}; `FEDREC_DATA_DIR` "
        f"{result['data_dir']}, a fresh temporary `FEDREC_CACHE_DIR` (as `.ci/run`). "
        "Load average: 1 / 5 / 15 minutes, before and after each tier; the machine is shared, "
        "so the times are those of this load.",
        "",
        "| tier | command | seconds | passed | skipped | failed | errors | deselected "
        "| exit code | load before | load after |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for tier in tiers:
        c = tier["counts"]
        lines.append(
            f"| {tier['tier']} | `{tier['command']}` | {tier['seconds']:.0f} | {c['passed']} | "
            f"{c['skipped']} | {c['failed']} | {c['errors']} | {c['deselected']} | "
            f"{tier['exit_code']} | {load(tier['load_before'])} | {load(tier['load_after'])} |"
        )
    failed = [(t["tier"], test) for t in tiers for test in t["failed_tests"]]
    if failed:
        lines += ["", "Failed:", ""] + [f"- {tier}: `{test}`" for tier, test in failed]
    return "\n".join(lines) + "\n"


def sentence(result: dict[str, Any], path: str = "bench/results/test-tiers.md") -> str:
    """One line for the README: both tiers' seconds, the cores and the load."""
    fast, slow = (next(t for t in result["tiers"] if t["tier"] == n) for n in ("fast", "slow"))
    loads = [t[k][0] for t in (fast, slow) for k in ("load_before", "load_after")]
    return (
        f"fast tier {fast['seconds']:.0f} s, slow tier {slow['seconds']:.0f} s on "
        f"{result['nproc']} cores, load {min(loads):.2f} to {max(loads):.2f}: {path}"
    )


def write(result: dict[str, Any], out: Path) -> Path:
    """``<out>/test-tiers.md`` and ``.json``; the Markdown file."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "test-tiers.json").write_text(json.dumps(result, indent=1) + "\n")
    path = out / "test-tiers.md"
    path.write_text(markdown(result))
    return path
