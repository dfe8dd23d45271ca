"""No-regression check: the first rounds of each preset against the committed runs.

Runs the first ``--rounds`` rounds of each preset in-process (LocalGrid, ``--nodes`` nodes as
the committed runs' SuperNodes, seed ``--seed``, results in a temporary folder) and compares
every column of its ``rounds.csv`` but the timings (metrics, train loss, bytes, touched
counts) with the same rows of ``bench/results/runs/<preset>-seed<seed>/rounds.csv``. It runs
one round more than it compares: a run's last round uploads no request for a next round, so
its ``bytes-up`` is not that of the same round in the committed (longer) run. Prints
the largest absolute difference per column; exits 1 if any exceeds ``--tol`` (default 0:
bit-identical), if a committed column is missing or if a run fails. ``--ignore-bytes``
leaves ``bytes-down``/``bytes-up`` out of the verdict (still printed): for a change of the
wire form alone (e.g. packing a record's arrays into one), where only the headers' bytes
differ::

    python bench/regression.py --data-dir ../shared/datasets --rounds 5 \\
        --write bench/results/regression.md
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.results import TIMING_COLUMNS, WIRE_COLUMNS
from fedrec_flwr.server_app import run_federation
from fedrec_lab.launch import PROJECT, merged_run_config
from fedrec_lab.local_grid import LocalGrid

PRESETS = [
    f"{method}-{dataset}-{protocol}"
    for method in ("pfedrec", "fedmf")
    for dataset in ("ml100k", "lastfm2k")
    for protocol in ("paper", "strict")
]
SKIPPED = ("round", *TIMING_COLUMNS)  # round: checked separately; timings are not results
# config.json keys that may differ between the committed run and this check.
RUN_KEYS = ("data-dir", "results-dir", "run-name", "num-server-rounds")


def read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """Header and rows of a ``rounds.csv``."""
    with open(path) as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def difference(new: str, old: str) -> float:
    """|new - old| as floats; 0 for two NaNs, inf for one NaN or an unparsable value."""
    try:
        a, b = float(new), float(old)
    except ValueError:
        return 0.0 if new == old else math.inf
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    return abs(a - b)


def compare(new_csv: Path, old_csv: Path, rounds: int) -> tuple[dict[str, float], list[str]]:
    """Max |difference| per compared column over the first ``rounds`` rows; problems found."""
    new_cols, new_rows = read_rows(new_csv)
    old_cols, old_rows = read_rows(old_csv)
    problems = []
    if len(new_rows) < rounds:
        problems.append(f"this run wrote {len(new_rows)} rows, expected {rounds}")
    if len(old_rows) < rounds:
        problems.append(f"the committed run has only {len(old_rows)} rows")
    new_rows, old_rows = new_rows[:rounds], old_rows[:rounds]
    if [r.get("round") for r in new_rows] != [r.get("round") for r in old_rows]:
        problems.append("round numbers differ")
    missing = [c for c in old_cols if c not in new_cols and c not in SKIPPED]
    if missing:
        problems.append(f"columns missing from this run: {', '.join(missing)}")
    extra = [c for c in new_cols if c not in old_cols and c not in SKIPPED]
    if extra:
        print(f"  note: new columns not in the committed run (not compared): {', '.join(extra)}")
    diffs = {}
    for column in new_cols:
        if column in SKIPPED or column not in old_cols:
            continue
        pairs = zip(new_rows, old_rows, strict=False)
        diffs[column] = max((difference(n[column], o[column]) for n, o in pairs), default=0.0)
    return diffs, problems


def config_notes(config: dict, committed_json: Path) -> list[str]:
    """Keys whose resolved value differs from the committed run's ``config.json``."""
    if not committed_json.exists():
        return [f"{committed_json} not found"]
    committed = json.loads(committed_json.read_text())
    resolved = RunConfig.from_mapping(config).to_mapping()
    notes = []
    for key in sorted(set(committed) | set(resolved)):
        if key in RUN_KEYS or key in ("num_users", "num_items"):
            continue
        if committed.get(key, "<absent>") != resolved.get(key, "<absent>"):
            old, new = committed.get(key, "<absent>"), resolved.get(key, "<absent>")
            notes.append(f"{key}: committed {old!r}, now {new!r}")
    return notes


def group(diffs: dict[str, float], kind: str) -> float | None:
    """Max difference over the metric columns, the train loss, or the counts."""

    def kind_of(column: str) -> str:
        if column.startswith(("val-", "test-")):
            return "metrics"
        return "train-loss" if column == "train-loss" else "counts"

    values = [d for c, d in diffs.items() if kind_of(c) == kind]
    return max(values) if values else None


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return "0" if value == 0 else f"{value:.3g}"


def git_state() -> str:
    """HEAD of the project, and whether the package has uncommitted changes."""
    head = subprocess.run(
        ["git", "-C", str(PROJECT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(PROJECT), "status", "--porcelain", "--", "fedrec_flwr"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"commit {head}" + (" + uncommitted changes in fedrec_flwr/" if dirty else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--presets", nargs="+", default=PRESETS, help="preset names (conf/*.toml)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=2, help="the committed runs used 2")
    parser.add_argument("--tol", type=float, default=0.0, help="largest allowed |difference|")
    parser.add_argument(
        "--ignore-bytes", action="store_true", help="bytes-down/up: printed, not compared"
    )
    parser.add_argument("--runs", default=str(PROJECT / "bench" / "results" / "runs"))
    parser.add_argument("--write", default=None, help="write a markdown table here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fedrec-regression-"))
    print(f"code: {git_state()}; results in {work}", flush=True)

    lines = [
        "| preset | rounds | max abs diff, metrics | max abs diff, train-loss "
        "| max abs diff, bytes/counts | verdict |",
        "|---|---|---|---|---|---|",
    ]
    failed = False
    for preset in args.presets:
        stem = Path(preset).stem
        committed = Path(args.runs) / f"{stem}-seed{args.seed}"
        config = merged_run_config(
            PROJECT / "conf" / f"{stem}.toml",
            [
                f"seed={args.seed}",
                f"data-dir='{Path(args.data_dir).resolve()}'",
                f"results-dir='{work}'",
                f"run-name='{stem}'",
                f"num-server-rounds={args.rounds + 1}",  # see the module docstring
            ],
        )
        print(
            f"{stem}: {args.rounds} rounds compared ({args.rounds + 1} run), {args.nodes} nodes, "
            f"seed {args.seed}",
            flush=True,
        )
        started = time.time()
        try:
            for note in config_notes(config, committed / "config.json"):
                print(f"  config differs from the committed run: {note}")
            run_federation(
                LocalGrid(client_app, config, args.nodes), RunConfig.from_mapping(config)
            )
            diffs, problems = compare(
                work / stem / "rounds.csv", committed / "rounds.csv", args.rounds
            )
        except Exception:  # a failing run is a regression; report it and go on
            traceback.print_exc()
            diffs, problems = {}, ["the run failed"]
        for column, value in diffs.items():
            print(f"  {column:<22} max abs diff {fmt(value)}")
        ignored = WIRE_COLUMNS if args.ignore_bytes else ()
        worst = max((d for c, d in diffs.items() if c not in ignored), default=0.0)
        if problems or worst > args.tol:
            verdict = "DIFFERS" if not problems else "FAILED: " + "; ".join(problems)
            failed = True
        elif worst == 0.0:
            verdict = "bit-identical" + (" (bytes not compared)" if ignored else "")
        else:
            verdict = f"within tol {args.tol:g}"
        print(f"  -> {verdict} ({time.time() - started:.1f} s)", flush=True)
        lines.append(
            f"| {stem} | {args.rounds} | {fmt(group(diffs, 'metrics'))} "
            f"| {fmt(group(diffs, 'train-loss'))} | {fmt(group(diffs, 'counts'))} | {verdict} |"
        )

    table = "\n".join(lines) + (
        f"\n\nFirst {args.rounds} rounds of each preset, seed {args.seed}, in-process with "
        f"{args.nodes} nodes, against `bench/results/runs/<preset>-seed{args.seed}/rounds.csv`; "
        "every column but the timings compared (each run ran one round more, so that its last "
        f"compared round also uploads a next-round request); tolerance {args.tol:g}. "
        f"Code: {git_state()}."
        + (
            " Bytes are printed, not compared (`--ignore-bytes`): a change of the wire form "
            "alone, such as the record's arrays packed into one, moves only the messages' "
            "header bytes."
            if args.ignore_bytes
            else ""
        )
        + "\n\n"
        f"```\npython {shlex.join(['bench/regression.py', *sys.argv[1:]])}\n```\n"
    )
    print()
    print(table)
    if args.write:
        Path(args.write).parent.mkdir(parents=True, exist_ok=True)
        Path(args.write).write_text(table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
