"""``python -m fedrec_lab.experiments <table>``: run a table's missing cells, write its
``<out>/<table>.md`` and ``<out>/<table>.png``.

Every federated cell runs the project's ServerApp and ClientApp: on the in-process grid in a
fresh process (default; ``--jobs`` at a time) or through ``flwr run`` (``--flwr``).
Finished cells are never recomputed; unfinished ones run again (``cells``). ``--rounds`` and
``--set`` change every federated cell without changing its name: for smoke tests in a
scratch ``--out``, not for results. Without ``--out`` a table goes to
``./fedrec-out/experiments`` (:mod:`fedrec_lab.scratch`); the committed tables take
``--out bench/results``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fedrec_lab import progress
from fedrec_lab.experiments import backfill, figure, report
from fedrec_lab.experiments import cells as runner
from fedrec_lab.experiments.sampled import sampled_vs_full
from fedrec_lab.experiments.sampled import section as sampled_section
from fedrec_lab.experiments.tables import TABLES, rows
from fedrec_lab.launch.run_config import ConfigError, parse_overrides
from fedrec_lab.project import project_root
from fedrec_lab.scratch import HelpFormatter, add_data_dir, add_out, wrote


def parse_override(pair: str) -> tuple[str, object]:
    """``key=value`` with the value read as its key's type (``0.5``, ``true``, ``ntk``:
    :func:`fedrec_lab.launch.run_config.parse_overrides`)."""
    try:
        ((key, value),) = parse_overrides([pair]).items()
    except ConfigError as error:
        raise SystemExit(f"--set: {error}") from None
    return key, value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fedrec_lab.experiments",
        description=__doc__.split("\n\n")[0],
        formatter_class=HelpFormatter,
    )
    parser.add_argument("table", choices=sorted(TABLES))
    add_data_dir(parser)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="federated cells at a time")
    add_out(parser, "experiments", "<out>/runs/ and <out>/<table>.md")
    parser.add_argument("--nodes", type=int, default=2, help="nodes (SuperNodes) per run")
    parser.add_argument("--rounds", type=int, default=None, help="override (smoke tests)")
    parser.add_argument("--datasets", nargs="+", default=None, help="default: the table's")
    parser.add_argument(
        "--rows",
        nargs="+",
        default=None,
        metavar="ROW",
        help="run only these rows' missing cells (e.g. fedmf-dual pfedrec+lap0.2); the "
        "table still reports every finished cell",
    )
    parser.add_argument(
        "--backfill-per-user",
        action="store_true",
        help="instead of the missing cells: rerun the finished ones that have no "
        "per-user.csv (made before it existed) and add theirs where the rerun reproduces "
        "every committed round",
    )
    parser.add_argument("--flwr", action="store_true", help="through flwr run (Ray)")
    parser.add_argument(
        "--set", nargs="+", default=[], metavar="KEY=VALUE", help="override (smoke tests)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list the cells and which are done; run nothing"
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="write the table from the finished cells; run nothing",
    )
    progress.add_switch(parser)
    return parser


def _command(argv: list[str]) -> str:
    """The command that makes the table: ``--data-dir`` shown as DIR (absolute or relative,
    a path of this machine either way), an absolute ``--out`` inside the project relative to
    it (else OUT), ``--report-only`` left out (on a folder of finished cells the full command
    runs nothing and writes the same table), and ``--rows`` (a subset of the cells to run
    now) and ``--no-progress`` too."""
    shown, previous, skipping = [], "", False
    for arg in progress.without_switch(argv):
        skipping = arg == "--rows" or (skipping and not arg.startswith("--"))
        if skipping:
            continue
        if previous == "--data-dir":
            arg = "DIR"
        elif arg.startswith("--data-dir="):
            arg = "--data-dir=DIR"
        elif previous == "--out" and Path(arg).is_absolute():
            project = project_root()
            inside = Path(arg).resolve().is_relative_to(project)
            arg = str(Path(arg).resolve().relative_to(project)) if inside else "OUT"
        if arg not in ("--report-only", "--backfill-per-user"):
            shown.append(arg)
        previous = arg
    return shlex.join(["python", "-m", "fedrec_lab.experiments", *shown])


def run_cell(cell: runner.Cell, args, runs: Path, extra: dict) -> str:
    """Run one missing or unfinished cell; its status."""
    folder = runs / cell.name
    stale = runner.stale_keys(cell, runs, args.data_dir, args.rounds, extra)
    resume_from = 0 if stale or cell.row.kind != "federated" else runner.checkpoint_round(folder)
    if stale:
        moved = runner.set_aside(folder, "stale")
        print(f"{cell.name}: run with other {', '.join(stale)}, moved to {moved.name}", flush=True)
    elif resume_from:
        print(f"{cell.name}: unfinished, continues after round {resume_from}", flush=True)
    elif folder.exists():
        print(f"{cell.name}: unfinished, moved to {runner.set_aside(folder).name}", flush=True)
    started = time.time()
    if cell.row.kind == "reference":
        try:
            runner.run_reference(cell, runs, args.data_dir, args.rounds, extra)
            state = "finished:completed"
        except Exception as error:  # reported; the other cells go on
            state = f"failed: {type(error).__name__}: {error}"
    else:
        config = runner.run_config(cell, runs, args.data_dir, args.rounds, extra)
        if resume_from:  # the same run, continued from its checkpoint (bit-identical)
            state = runner.run_federated(
                {**config, "resume": str(folder.resolve())}, args.nodes, args.flwr
            )
            if state != "finished:completed" and (folder / runner.INCOMPLETE).exists():
                moved = runner.set_aside(folder)
                print(
                    f"{cell.name}: could not continue ({state[-300:]}); moved to "
                    f"{moved.name}, runs again from round 1",
                    flush=True,
                )
                state = runner.run_federated(config, args.nodes, args.flwr)
        else:
            state = runner.run_federated(config, args.nodes, args.flwr)
        runner.scrub_paths(runs, only=(cell.name,))
    print(f"{cell.name}: {state} in {time.time() - started:.0f} s", flush=True)
    return state


def _selected(args, specs, results, todo: list[runner.Cell], runs: Path) -> list[runner.Cell]:
    """The cells to run now: the missing ones (``todo``), of ``--rows`` only if given; with
    ``--backfill-per-user`` the finished ones without ``per-user.csv`` instead."""
    if args.rows:
        known = {spec.key for spec in specs}
        unknown = sorted(set(args.rows) - known)
        if unknown:
            raise SystemExit(
                f"--rows: {', '.join(unknown)} not in table {args.table} on these datasets; "
                f"its rows: {', '.join(sorted(known))}"
            )
        todo = [cell for cell in todo if cell.row.key in args.rows]
    if args.backfill_per_user:
        todo = [
            cell
            for _spec, cells, _states in results
            for cell in cells
            if backfill.needs_per_user(cell, runs) and (not args.rows or cell.row.key in args.rows)
        ]
    return todo


def run_cells(todo: list[runner.Cell], args, runs: Path, extra: dict, bar) -> list[str]:
    """Run ``todo`` (or give them their ``per-user.csv``: ``--backfill-per-user``), counting
    each finished cell on ``bar``; the names of those that failed."""
    failed = []
    lock = threading.Lock()

    def counted(cell: runner.Cell) -> str:
        state = run_cell(cell, args, runs, extra)
        with lock:
            bar.update()
        return state

    if args.backfill_per_user:
        for cell in todo:
            started = time.time()
            state = backfill.backfill(cell, runs, args, extra)
            print(f"{cell.name}: {state} in {time.time() - started:.0f} s", flush=True)
            bar.update()
            if state.startswith("failed"):
                failed.append(cell.name)
        return failed
    for cell in [c for c in todo if c.row.kind == "reference"]:  # in this process, one by one
        if counted(cell) != "finished:completed":
            failed.append(cell.name)
    federated = [c for c in todo if c.row.kind == "federated"]
    with ThreadPoolExecutor(max(1, 1 if args.flwr else args.jobs)) as pool:
        states = list(pool.map(counted, federated))
    failed += [c.name for c, s in zip(federated, states, strict=True) if s != "finished:completed"]
    return failed


def check_arguments(argv: list[str]) -> tuple[argparse.Namespace, dict[str, object]]:
    """The arguments of ``main`` and its ``--set`` keys, checked (SystemExit with the reason
    if not): nothing runs."""
    args = _parser().parse_args(argv)
    return args, dict(parse_override(pair) for pair in args.set)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, extra = check_arguments(argv)
    table = TABLES[args.table]
    out = Path(args.out)
    runs = out / "runs"
    specs = rows(table, tuple(args.datasets) if args.datasets else None)
    results = []
    todo: list[runner.Cell] = []
    for spec in specs:
        cells = spec.cells(args.seeds)
        states = [runner.status(cell, runs, args.data_dir, args.rounds, extra) for cell in cells]
        todo += [
            c for c, s in zip(cells, states, strict=True) if s in ("todo", "incomplete", "stale")
        ]
        results.append((spec, cells, states))
    todo = _selected(args, specs, results, todo, runs)
    if args.dry_run:
        for _spec, cells, states in results:
            for cell, state in zip(cells, states, strict=True):
                print(f"{state:10s} {cell.name}")
        total = sum(len(c) for _, c, _ in results)
        print(f"{table.name}: {total} cells, {len(todo)} to run, output {out}/{table.name}.md")
        return 0

    runs.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    backfilled = len(todo) if args.backfill_per_user and not args.report_only else 0
    if args.report_only:  # reference rows already in <out>/baselines-*.json are free
        for cell in todo:
            if cell.row.kind == "reference" and not (runs / cell.name).exists():
                runner.run_reference(cell, runs, args.data_dir, None, extra, stored_only=True)
        todo = []
    if todo:
        with progress.bar(len(todo), table.name, unit="cell", enabled=args.progress) as bar:
            failed = run_cells(todo, args, runs, extra, bar)
        todo = [] if backfilled else todo

    finished = [
        report.RowResult(
            spec,
            cells,
            [runner.status(c, runs, args.data_dir, args.rounds, extra) for c in cells],
            runs,
        )
        for spec, cells, _ in results
    ]
    datasets = list(dict.fromkeys(spec.dataset for spec in specs))
    notes = report.dataset_notes(datasets, args.data_dir, extra)
    sections = []
    if table.pivot:  # leakage: the same models scored both ways
        seed = args.seeds[0]
        sampled = {
            d: sampled_vs_full(runs, d, seed, args.data_dir, extra, not args.report_only)
            for d in datasets
            if runner.data_present(d, args.data_dir)
        }
        sections.append(sampled_section(sampled, report.NAMES, finished))
    text = report.markdown(table, finished, _command(argv), notes, tuple(sections))
    (out / f"{table.name}.md").write_text(text)
    figure.plot(finished, out / f"{table.name}.png", table.title)
    print(text)
    done = (
        f"{backfilled - len(failed)} cells given their per-user.csv"
        if backfilled
        else (f"{len(todo) - len(failed)} cells run")
    )
    print(f"{done}, {len(failed)} failed; wrote {out}/{table.name}.md")
    wrote(out / f"{table.name}.md", f"table {table.name}")
    for name in failed:
        print(f"failed: {name}", file=sys.stderr)
    return 1 if failed else 0
