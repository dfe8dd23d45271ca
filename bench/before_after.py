"""Seconds per round of the current code against an earlier commit, measured in one go.

The earlier commit (``--before``, default ``ba774d1``) is checked out as a detached git worktree
in ``/tmp/fedrec-before-<commit>`` (created once, then reused; the project's own checkout is
not touched). Each case (a preset, default PFedRec and FedMF on ML-100K under both protocols,
all users every round) runs in-process (LocalGrid, ``--nodes`` nodes, ``torch-threads=1``) in a
fresh Python process per run, with ``PYTHONPATH`` set to that version's tree and ``/tmp`` as
working folder; the runs of the two versions alternate, ``--repeats`` times each, so that the
machine's load hits both alike. A run's speed is the median of its per-round seconds (from
``rounds.csv``, round 1 left out); the table gives the median over the repeats and the ratio
after/before, and whether both versions wrote the same ``rounds.csv`` apart from ``seconds``.
CPU seconds (``cpu-seconds``: the process's, server and node together) are given beside the
wall seconds. A case may add run-config keys to its preset, comma-separated TOML values
(``pfedrec-ml100k-strict,dataset='synthetic',synthetic-users=100000``; ``defaults,...``: no
preset, the package's defaults); with ``--last-apart``
a run's per-round figures leave its last round out, reported on its own (a run whose
intermediate rounds evaluate a sample of ``eval-users`` evaluates every user in its last),
with the node's evaluation phase of that round beside it (wall and CPU seconds of
``NodeEvaluation.evaluate_users``, timed by the phase clock of ``fedrec_lab.scaling.phases``,
which the run loads from this project, so an earlier commit's run is timed the same way).
``--json`` writes every figure::

    python bench/before_after.py --data-dir ../shared/datasets --rounds 20 --repeats 3
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from fedrec_flwr.results import TIMING_COLUMNS
from fedrec_lab.launch import PROJECT, merged_run_config

CASES = [
    f"{method}-ml100k-{protocol}"
    for method in ("pfedrec", "fedmf")
    for protocol in ("paper", "strict")
]
#: A case's first item naming no preset: the package's defaults and the case's keys.
DEFAULTS = "defaults"
#: The evaluation phase a run's clock times (every version has it): (module, attribute).
EVALUATION = ("fedrec_flwr.node.evaluate", "NodeEvaluation.evaluate_users")
PHASES = PROJECT / "fedrec_lab" / "scaling" / "phases.py"
RUNNER = """\
import importlib.util, json, sys
spec = json.loads(sys.argv[1])
# The phase clock of the project running this script (an earlier commit may lack it).
found = importlib.util.spec_from_file_location("bench_phases", spec["phases"])
phases = importlib.util.module_from_spec(found)
found.loader.exec_module(phases)
import fedrec_flwr
print("FEDREC_FLWR_FILE=" + fedrec_flwr.__file__, flush=True)
from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_lab.local_grid import LocalGrid
from fedrec_flwr.server_app import run_federation
clock = phases.PhaseClock()
clock.wrap(*phases.phase_target(*spec["evaluation"]), "evaluation")
def timed_app(message, context):
    if "config" in message.content:
        clock.enter_round(int(message.content["config"].get("server-round", 0)))
    return client_app(message, context)
grid = LocalGrid(timed_app, spec["config"], spec["nodes"])
run_federation(grid, RunConfig.from_mapping(spec["config"]))
clock.charge()
evaluation = {key: {r: v.get("evaluation", 0.0) for r, v in getattr(clock, key).items()}
              for key in ("wall", "cpu")}
print("FEDREC_EVALUATION=" + json.dumps(evaluation), flush=True)
"""


@dataclass
class Version:
    label: str  # "before" or "after"
    tree: Path
    description: str  # commit id (and state) for the report


@dataclass
class Runs:
    per_round: list[float] = field(default_factory=list)  # one median per run
    cpu_per_round: list[float] = field(default_factory=list)  # idem, CPU seconds
    last: list[float] = field(default_factory=list)  # the last round's seconds (--last-apart)
    cpu_last: list[float] = field(default_factory=list)
    eval_last: list[float] = field(default_factory=list)  # its evaluation phase's seconds
    cpu_eval_last: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)  # wall seconds per process
    rows: list[dict[str, str]] | None = None  # rounds.csv of the first run, without seconds
    failed: int = 0


def git(*args: str, cwd: Path = PROJECT) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def describe(tree: Path, package_state: bool) -> str:
    """'<sha> (<subject>)', plus whether the package has uncommitted changes."""
    text = git("log", "-1", "--format=%H (%s)", cwd=tree)
    if package_state and git("status", "--porcelain", "--", "fedrec_flwr", cwd=tree):
        text += " + uncommitted changes in fedrec_flwr/"
    return text


def worktree(commit: str, label: str) -> Path:
    """A detached worktree of ``commit`` in /tmp (created once, reused afterwards)."""
    sha = git("rev-parse", "--verify", f"{commit}^{{commit}}")
    # Named after the commit as given when it is an id, else (HEAD, a branch) after its id.
    name = commit if re.fullmatch(r"[0-9a-fA-F]{4,40}", commit) else sha[:12]
    path = Path(tempfile.gettempdir()) / f"fedrec-{label}-{name}"
    if path.exists():
        head = git("rev-parse", "HEAD", cwd=path)
        if head != sha:
            raise SystemExit(f"{path} is at {head}, not at {commit} ({sha}): remove it first")
    else:
        git("worktree", "add", "--detach", str(path), sha)
    return path.resolve()


def run_once(
    version: Version, case: str, args: argparse.Namespace, work: Path, runner: Path, name: str
) -> tuple[dict[str, float], float, list[dict[str, str]]]:
    """One run of ``case`` with ``version``: (its figures: median wall and CPU s/round, and
    with ``--last-apart`` the last round's; total s; rounds.csv rows)."""
    preset_name, *extra = case.split(",")
    preset: Path | None = version.tree / "conf" / f"{preset_name}.toml"
    if preset_name == DEFAULTS:  # the package's defaults, no preset
        preset = None
    elif not preset.exists():  # a preset the earlier commit lacks: use the current one
        preset = PROJECT / "conf" / f"{preset_name}.toml"
    config = merged_run_config(
        preset,
        [
            f"seed={args.seed}",
            f"data-dir='{Path(args.data_dir).resolve()}'",
            f"results-dir='{work}'",
            f"run-name='{name}'",
            f"num-server-rounds={args.rounds}",
            "torch-threads=1",
            *extra,
        ],
    )
    env = {**os.environ, "PYTHONPATH": str(version.tree)}
    spec = json.dumps(
        {"config": config, "nodes": args.nodes, "phases": str(PHASES), "evaluation": EVALUATION}
    )
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(runner), spec], cwd="/tmp", env=env, capture_output=True, text=True
    )
    total = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}:\n{done.stderr[-3000:]}")
    imported = re.search(r"^FEDREC_FLWR_FILE=(.*)$", done.stdout, re.MULTILINE)
    if not imported or not Path(imported.group(1)).resolve().is_relative_to(version.tree):
        found = imported.group(1) if imported else "nothing"
        raise RuntimeError(f"imported {found}, not the package of {version.tree}")
    phase_line = re.search(r"^FEDREC_EVALUATION=(.*)$", done.stdout, re.MULTILINE)
    evaluation = json.loads(phase_line.group(1)) if phase_line else {"wall": {}, "cpu": {}}
    with open(work / name / "rounds.csv") as f:
        rows = list(csv.DictReader(f))
    figures = {}
    for column, key in (("seconds", "wall"), ("cpu-seconds", "cpu")):
        elapsed = [float(r[column]) for r in rows]
        per_round = [b - a for a, b in itertools.pairwise(elapsed)]  # rounds 2..R
        if args.last_apart:
            figures[f"{key}_last"] = per_round[-1]
            figures[f"{key}_eval_last"] = evaluation[key].get(str(args.rounds), 0.0)
            per_round = per_round[:-1] or per_round
        figures[key] = statistics.median(per_round)
    results = [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in rows]
    return figures, total, results


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.3f}" if values else "failed"


def ratio(before: list[float], after: list[float]) -> str:
    """after/before of the medians."""
    if not (before and after):
        return "-"
    return f"{statistics.median(after) / statistics.median(before):.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--before", default="ba774d1", help="earlier commit")
    parser.add_argument(
        "--after", default=None, help="later commit (default: the project's working tree)"
    )
    parser.add_argument("--cases", nargs="+", default=CASES, help="preset names (conf/*.toml)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        default=None,
        help="write the report here too (printed either way; a report to commit names its "
        "file under bench/results/)",
    )
    parser.add_argument("--json", default=None, help="also every figure as JSON")
    parser.add_argument(
        "--last-apart", action="store_true", help="the last round apart from the others"
    )
    args = parser.parse_args()
    if args.rounds < (4 if args.last_apart else 2):
        raise SystemExit("--rounds must be at least 2 (4 with --last-apart): round 1 is not timed")

    versions = [Version("before", worktree(args.before, "before"), "")]
    if args.after:
        versions.append(Version("after", worktree(args.after, "after"), ""))
    else:
        versions.append(Version("after", PROJECT, ""))
    for version in versions:
        version.description = describe(version.tree, package_state=version.tree == PROJECT)
        print(f"{version.label}: {version.tree} = {version.description}", flush=True)

    work = Path(tempfile.mkdtemp(prefix="fedrec-before-after-"))
    runner = work / "runner.py"
    runner.write_text(RUNNER)
    runs = {(case, v.label): Runs() for case in args.cases for v in versions}
    for repeat in range(args.repeats):
        for case in args.cases:
            order = versions if repeat % 2 == 0 else versions[::-1]  # alternate who goes first
            for version in order:
                label = re.sub(r"[^A-Za-z0-9.+-]+", "_", case)[:80]  # a folder's name
                name = f"{args.cases.index(case)}-{label}-{version.label}-{repeat}"
                record = runs[(case, version.label)]
                try:
                    figures, total, rows = run_once(version, case, args, work, runner, name)
                except RuntimeError as error:
                    record.failed += 1
                    print(f"{name}: FAILED {error}", flush=True)
                    continue
                record.per_round.append(figures["wall"])
                record.cpu_per_round.append(figures["cpu"])
                if args.last_apart:
                    record.last.append(figures["wall_last"])
                    record.cpu_last.append(figures["cpu_last"])
                    record.eval_last.append(figures["wall_eval_last"])
                    record.cpu_eval_last.append(figures["cpu_eval_last"])
                record.total.append(total)
                record.rows = record.rows if record.rows is not None else rows
                print(f"{name}: {figures}, {total:.1f} s in all", flush=True)

    lines = [
        "| case | rounds | before s/round | after s/round | after/before | before CPU-s/round "
        "| after CPU-s/round | after/before (CPU) "
        + (
            "| before last round s | after last round s | before last CPU-s | after last CPU-s "
            "| before last evaluation s | after last evaluation s | before last evaluation CPU-s "
            "| after last evaluation CPU-s "
            if args.last_apart
            else ""
        )
        + "| before runs | after runs | before total s | after total s | same results |",
    ]
    lines.append("|---" * (lines[0].count("|") - 1) + "|")
    for case in args.cases:
        before, after = runs[(case, "before")], runs[(case, "after")]
        last = ""
        if args.last_apart:
            last = (
                f"| {cell(before.last)} | {cell(after.last)} | {cell(before.cpu_last)} "
                f"| {cell(after.cpu_last)} | {cell(before.eval_last)} | {cell(after.eval_last)} "
                f"| {cell(before.cpu_eval_last)} | {cell(after.cpu_eval_last)} "
            )
        same = "-" if before.rows is None or after.rows is None else before.rows == after.rows
        lines.append(
            f"| {case} | {args.rounds} | {cell(before.per_round)} | {cell(after.per_round)} "
            f"| {ratio(before.per_round, after.per_round)} | {cell(before.cpu_per_round)} "
            f"| {cell(after.cpu_per_round)} "
            f"| {ratio(before.cpu_per_round, after.cpu_per_round)} {last}"
            f"| {', '.join(f'{v:.3f}' for v in before.per_round) or '-'} "
            f"| {', '.join(f'{v:.3f}' for v in after.per_round) or '-'} "
            f"| {cell(before.total)} | {cell(after.total)} "
            f"| {'yes' if same is True else 'no' if same is False else '-'} |"
        )
    report = "\n".join(
        [
            "# Speed before/after",
            "",
            *lines,
            "",
            f"- before: `{versions[0].description}` (tree {versions[0].tree})",
            f"- after: `{versions[1].description}` (tree {versions[1].tree})",
            f"- in-process LocalGrid, {args.nodes} node(s), all users every round, seed "
            f"{args.seed}, torch-threads=1, {args.repeats} repeat(s) per version, each run in a "
            "fresh process, before/after interleaved (alternating which goes first).",
            "- s/round: median over the repeats of each run's median per-round seconds "
            "(differences of `rounds.csv` `seconds`, round 1 left out"
            + (
                ", the last round apart; its evaluation: the node's evaluation phase "
                f"(`{'.'.join(EVALUATION)}`, timed by `fedrec_lab/scaling/phases.py`) in it"
                if args.last_apart
                else ""
            )
            + "); CPU-s/round: the same of `cpu-seconds` (the process's CPU time); "
            "runs: each repeat's "
            "value; total s: median wall seconds of the whole process (imports, data, rounds); "
            "same results: the first runs' `rounds.csv` equal in every column but `seconds`.",
            f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M')}",
            "",
            "```",
            f"python {shlex.join(['bench/before_after.py', *sys.argv[1:]])}",
            "```",
            "",
        ]
    )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(report)
    if args.json:
        figures = {
            case: {
                label: {
                    "version": next(v.description for v in versions if v.label == label),
                    **{k: v for k, v in vars(runs[(case, label)]).items() if k != "rows"},
                }
                for label in ("before", "after")
            }
            for case in args.cases
        }
        command = shlex.join(["bench/before_after.py", *sys.argv[1:]])
        machine = f"{platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
        Path(args.json).write_text(
            json.dumps({"command": command, "machine": machine, "cases": figures}, indent=1)
        )
    print()
    print(report)
    return 1 if any(r.failed for r in runs.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
