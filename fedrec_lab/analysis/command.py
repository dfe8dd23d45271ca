"""``fedrec analyze``: what a run's model looks like at its best validation round.

    fedrec analyze replay RUN_DIR --data-dir DIR            # its best round's model, again
    fedrec analyze sharpness RUN_DIR --data-dir DIR         # gap, Hessian, rho-sharpness, plot
    fedrec analyze item-views RUN_DIR --data-dir DIR        # own vs global vs random item rows
    fedrec analyze sam-table --data-dir DIR --out bench/results   # the SAM table
    fedrec analyze plgc-horizons --out bench/results   # PLGC's ablation at fewer rounds

A run made with ``keep-best-state = true`` is read as it is; any other finished run is
replayed to its best round into ``--work`` first (:mod:`fedrec_lab.analysis.state`: checked
against the run's metrics). Without ``--out`` the records go to ``./fedrec-out/analyze``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path

from fedrec_lab.analysis import cells as sam_cells
from fedrec_lab.analysis import item_views, landscape, sam_plot, sam_table
from fedrec_lab.analysis.state import (
    has_state,
    load_best_state,
    replay,
    replay_column_equal,
    replay_difference,
)
from fedrec_lab.scratch import HelpFormatter, add_data_dir, add_out, scratch_out, wrote
from fedrec_lab.stats import PER_USER_FILE, read_per_user

WORK = scratch_out("replays")
#: The committed runs.
RUNS = "bench/results/runs"


def _state_of(run_dir: Path, work: Path, data_dir: str) -> tuple[Path, dict | None]:
    """(folder holding the run's best state, the replay's check or None)."""
    if has_state(run_dir):
        return run_dir, None
    folder = replay(run_dir, work, data_dir)
    return folder, replay_difference(run_dir, folder)


def _radii(args) -> dict[str, float] | None:
    if args.rho_private is None and args.rho_shared is None:
        return None
    return {"private": args.rho_private or 0.0, "shared": args.rho_shared or 0.0}


def cmd_replay(args) -> int:
    folder, check = _state_of(Path(args.run_dir), args.work, args.data_dir)
    print(json.dumps({"state": str(folder), "check": check}, indent=1))
    return 0 if check is None or check["metrics_equal"] else 1


def cmd_sharpness(args) -> int:
    folder, check = _state_of(Path(args.run_dir), args.work, args.data_dir)
    best = load_best_state(folder, args.data_dir)
    record = landscape.analyze(best, _radii(args), args.users)
    record["run"] = Path(args.run_dir).name
    record["replay"] = check
    path = landscape.write(record, args.out)
    shown = {k: v for k, v in record.items() if not isinstance(v, list)}
    print(json.dumps(shown, indent=1))
    wrote(path, "record")
    return 0


def cmd_item_views(args) -> int:
    for run_dir in map(Path, args.run_dirs):
        folder, check = _state_of(run_dir, args.work, args.data_dir)
        best = load_best_state(folder, args.data_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
        record = item_views.analyze(best, summary)
        record["run"] = run_dir.name
        record["replay"] = check
        path = item_views.write(record, args.out)
        print(run_dir.name, json.dumps(record["views"]), flush=True)
        wrote(path, "record")
    return 0


def _take_user_hr(record: dict, run_dir: Path, folder: Path) -> None:
    """A run without ``per-user.csv``: its record takes each user's test HR@10 from the
    replay's, when that replay gave the run's validation and test metrics exactly
    (``equal``: ``metrics``), or its test HR@10 exactly while another metric differs in the
    last digits (``equal``: ``test-hr@10``; the table names those rows)."""
    check = record.get("replay")
    if (run_dir / PER_USER_FILE).exists() or not (folder / PER_USER_FILE).exists():
        return
    if check is None:
        return
    if check["metrics_equal"]:
        equal = "metrics"
    elif replay_column_equal(run_dir, folder, "test-hr@10"):
        equal = "test-hr@10"
    else:
        return
    users, columns = read_per_user(folder)
    record["user_test_hr"] = {
        "users": [int(u) for u in users],
        "test-hr@10": [float(v) for v in columns["test-hr@10"]],
        "equal": equal,
    }


def _check_replay(path: Path, runs: Path, work: Path) -> None:
    """A record whose model was a replay in ``work`` gets that replay's check, and the users'
    test HR@10 its run lacks, if it lacks them."""
    record = json.loads(path.read_text())
    name = record["run"]
    if has_state(runs / name) or not has_state(work / name):
        return
    before = dict(record)
    if record.get("replay") is None:
        record["replay"] = replay_difference(runs / name, work / name)
    if "user_test_hr" not in record:
        _take_user_hr(record, runs / name, work / name)
    if record != before:
        landscape.write_record(record, path.parent)


def cmd_sam_table(args) -> int:
    records = args.out / "sam" / "records"
    runs = args.runs
    cells = sam_cells.sam_cells(
        tuple(args.methods) if args.methods else None,
        tuple(args.datasets),
        tuple(args.protocols),
        tuple(args.seeds),
        args.tiers,
    )
    if not args.report_only:
        for cell in cells:
            if sam_table.record_path(records, cell).exists():
                _check_replay(sam_table.record_path(records, cell), runs, args.work)
                continue
            started = time.time()
            folder, how = sam_cells.ensure_state(cell, runs, args.work, args.data_dir)
            own = folder.resolve() == (runs / cell.name).resolve()
            check = None if own else replay_difference(runs / cell.name, folder)
            twin = sam_cells.SamCell(cell.method, True, cell.dataset, cell.protocol, cell.seed)
            radii = sam_cells.sam_radii(twin)
            record = landscape.analyze(load_best_state(folder, args.data_dir), radii, args.users)
            record["run"], record["replay"] = cell.name, check
            _take_user_hr(record, runs / cell.name, folder)
            landscape.write_record(record, records)
            print(f"{cell.name}: {how}, analysed in {time.time() - started:.0f} s", flush=True)
    command = "python -m fedrec_lab.analysis sam-table --report-only --out " + shlex.quote(
        str(args.out)
    )
    if runs != Path(RUNS):
        command += " --runs " + shlex.quote(str(runs))
    rows = sam_table.table_rows(runs, records)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "sam-table.md"
    out.write_text(sam_table.markdown(rows, command))
    (args.out / "sam-table.json").write_text(json.dumps(rows, indent=1, default=str) + "\n")
    sam_plot.plot(rows, runs, args.out / "sam-table.png")
    wrote(out, "table")
    return 0


def cmd_figure3(args) -> int:
    records = args.out / "item-views"
    runs = args.runs
    if not args.report_only:
        for _, _, _, names in item_views.figure3_runs():
            for name in names:
                if (records / f"{name}.json").exists() or not (runs / name).exists():
                    continue
                folder, check = _state_of(runs / name, args.work, args.data_dir)
                summary = json.loads((runs / name / "summary.json").read_text())
                record = item_views.analyze(load_best_state(folder, args.data_dir), summary)
                record["run"], record["replay"] = name, check
                item_views.write(record, records)
                print(name, json.dumps(record["views"]), flush=True)
    rows = item_views.figure3_rows(records)
    command = "python -m fedrec_lab.analysis pfedrec-figure3 --data-dir DIR --out " + (
        shlex.quote(str(args.out))
    )
    (args.out / "pfedrec-figure3.md").write_text(item_views.figure3_markdown(rows, command))
    (args.out / "pfedrec-figure3.json").write_text(json.dumps(rows) + "\n")
    item_views.figure3_plot(rows, args.out / "pfedrec-figure3.png")
    wrote(args.out / "pfedrec-figure3.md", "report")
    return 0


def cmd_fedrap(args) -> int:
    from fedrec_lab.analysis import fedrap

    command = "python -m fedrec_lab.analysis fedrap --out " + shlex.quote(str(args.out))
    wrote(fedrap.write(args.runs, args.out, command), "report")
    return 0


def cmd_plgc_horizons(args) -> int:
    from fedrec_lab.analysis import horizon

    datasets = " ".join(args.datasets)
    command = (
        f"python -m fedrec_lab.analysis plgc-horizons --protocol {args.protocol} "
        f"--datasets {datasets} --out " + shlex.quote(str(args.out))
    )
    path = horizon.write(args.runs, args.out, args.protocol, tuple(args.datasets), command)
    wrote(path, "report")
    return 0


def cmd_radius_sweep(args) -> int:
    from fedrec_lab.analysis import sweep

    unknown = sorted(set(args.protocols or ()) - set(sweep.SCHEDULE))
    if unknown:
        raise SystemExit(
            f"--protocols: {', '.join(unknown)}; the sweep's: {', '.join(sweep.SCHEDULE)}"
        )
    if not args.report_only:
        sweep.run_missing(
            args.runs,
            args.data_dir,
            protocols=tuple(args.protocols or ()),
            seeds=tuple(args.seeds or ()),
            tags=tuple(args.rows or ()),
        )
    command = "python -m fedrec_lab.analysis radius-sweep --data-dir DIR --out " + shlex.quote(
        str(args.out)
    )
    wrote(sweep.write(args.runs, args.out, command), "report")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedrec analyze",
        description=__doc__.split("\n\n")[0],
        formatter_class=HelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p, out: bool = True):
        add_data_dir(p)
        p.add_argument("--work", type=Path, default=WORK, help="where replays run")
        if out:
            add_out(p, "analyze", "the records")

    p = sub.add_parser("replay", help="replay a run to its best round (checked)")
    p.add_argument("run_dir")
    common(p, out=False)
    p.set_defaults(run=cmd_replay)

    p = sub.add_parser("sharpness", help="gap, top Hessian eigenvalue, rho-sharpness, plot")
    p.add_argument("run_dir")
    common(p)
    p.add_argument("--users", type=int, default=landscape.USERS, help="users measured")
    p.add_argument("--rho-private", type=float, default=None, help="default: the run's")
    p.add_argument("--rho-shared", type=float, default=None, help="default: the run's")
    p.set_defaults(run=cmd_sharpness)

    p = sub.add_parser("item-views", help="own vs global vs random item rows (PFedRec Fig. 3)")
    p.add_argument("run_dirs", nargs="+")
    common(p)
    p.set_defaults(run=cmd_item_views)

    p = sub.add_parser("pfedrec-figure3", help="PFedRec's Figure 3 over its runs")
    common(p)
    p.add_argument("--runs", type=Path, default=Path(RUNS))
    p.add_argument("--report-only", action="store_true", help="write the report, run nothing")
    p.set_defaults(run=cmd_figure3)

    p = sub.add_parser("fedrap", help="FedRAP's sparse table and its regulariser as written")
    p.add_argument("--runs", type=Path, default=Path(RUNS))
    add_out(p, "analyze", "the report")
    p.set_defaults(run=cmd_fedrap)

    p = sub.add_parser("plgc-horizons", help="PLGC's ablation read at fewer rounds")
    p.add_argument("--runs", type=Path, default=Path(RUNS))
    p.add_argument("--protocol", choices=("strict", "paper"), default="strict")
    p.add_argument("--datasets", nargs="+", choices=("ml-100k", "lastfm-2k"), default=["ml-100k"])
    add_out(p, "analyze", "the report")
    p.set_defaults(run=cmd_plgc_horizons)

    p = sub.add_parser("radius-sweep", help="FedRecGEL's radius sweep (its Figure 2)")
    add_data_dir(p)
    p.add_argument("--runs", type=Path, default=Path(RUNS))
    add_out(p, "analyze", "the report")
    p.add_argument("--report-only", action="store_true", help="write the report, run nothing")
    p.add_argument(
        "--protocols", nargs="+", default=None, help="run only these protocols' missing cells"
    )
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="run only these seeds")
    p.add_argument(
        "--rows", nargs="+", default=None, help="run only these rows (tags: sweep, rp0, rs1, ...)"
    )
    p.set_defaults(run=cmd_radius_sweep)

    p = sub.add_parser("sam-table", help="each method with and without SAM")
    common(p)
    p.add_argument("--runs", type=Path, default=Path(RUNS))
    p.add_argument("--methods", nargs="+", default=None)
    p.add_argument("--datasets", nargs="+", default=list(sam_cells.DATASETS))
    p.add_argument("--protocols", nargs="+", default=list(sam_cells.PROTOCOLS))
    p.add_argument("--seeds", nargs="+", type=int, default=list(sam_cells.SEEDS))
    p.add_argument("--users", type=int, default=landscape.USERS, help="users measured")
    p.add_argument("--report-only", action="store_true", help="write the table, run nothing")
    p.add_argument(
        "--tiers", type=int, default=len(sam_cells.COST_TIERS), help="run the first N cost tiers"
    )
    p.set_defaults(run=cmd_sam_table)
    return parser


def check_arguments(argv: list[str] | None) -> argparse.Namespace:
    """The arguments of ``main``, checked (SystemExit with the reason if not): nothing runs."""
    return _parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = check_arguments(argv)
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
