"""What the reference-run scripts share: the pinned commit, our split in the reference files,
the per-round log, the round chosen on validation and on test, the JSON.

A reference run executes a seed paper's public code, at a pinned commit, from the folder where
the user cloned it (never copied into this project), on this project's leave-one-out split of
the ``paper`` protocol: the same train rows, held-out items and 99 + 99 evaluation negatives as
our run of the same seed (``fedrec_flwr.data.prepared``). Each script's driver logs one line per
round and metric set::

    round 7 valid HR@10=0.612500 NDCG@10=0.401234
    round 7 test HR@10=0.600000 NDCG@10=0.399876

which :func:`parse_rounds` reads back into the JSON (``bench/results/reference/*.json``).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedrec_lab.project import project_root

METRIC_LINE = re.compile(
    r"round (?P<round>\d+) (?P<split>valid|test) HR@10=(?P<hr>[0-9.]+) NDCG@10=(?P<ndcg>[0-9.]+)"
)


class ReferenceError(RuntimeError):
    """A reference run cannot start or its log is not what the driver writes."""


def repo_commit(repo: Path) -> str:
    """The commit checked out in ``repo`` (a clone or worktree of the reference code)."""
    if not (repo / ".git").exists():
        raise ReferenceError(f"{repo} is not a git checkout: clone the reference code there.")
    done = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if done.returncode:
        raise ReferenceError(f"git rev-parse HEAD failed in {repo}: {done.stderr.strip()}")
    return done.stdout.strip()


def check_commit(repo: Path, pinned: str, url: str) -> None:
    """Refuse a checkout at another commit than the pinned one, saying how to get it."""
    found = repo_commit(repo)
    if found != pinned:
        raise ReferenceError(
            f"{repo} is at commit {found}; this script runs the reference at {pinned}. Get it "
            f"with: git clone {url} {repo} && git -C {repo} checkout {pinned}"
        )


@dataclass(frozen=True)
class Split:
    """One seed's ``paper`` split as the reference files need it (users and items 0-based)."""

    train_user: np.ndarray  # one entry per train row (repeats kept, file order)
    train_item: np.ndarray
    valid_item: np.ndarray  # [num_users]
    test_item: np.ndarray  # [num_users]
    valid_negatives: np.ndarray  # [num_users, 99]
    test_negatives: np.ndarray  # [num_users, 99]
    num_items: int

    @property
    def num_users(self) -> int:
        return len(self.test_item)


def our_split(preset: Path, data_dir: str, seed: int) -> Split:
    """The split and evaluation negatives our run of ``preset`` at ``seed`` uses."""
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.data.prepared import EVAL_NEGATIVES_PER_SPLIT, prepare
    from fedrec_lab.presets import resolve

    mapping = {**resolve(preset), "data-dir": str(Path(data_dir).resolve()), "seed": seed}
    config = RunConfig.from_mapping(mapping)
    if config.training.protocol != "paper":
        raise ReferenceError(f"{preset.name}: reference runs use the paper protocol")
    data = prepare(config)
    negatives = np.asarray(data.eval_negatives(seed))
    counts = np.diff(np.asarray(data.train_indptr))
    return Split(
        train_user=np.repeat(np.arange(data.num_users), counts),
        train_item=np.asarray(data.train_items),
        valid_item=np.asarray(data.valid_item),
        test_item=np.asarray(data.test_item),
        valid_negatives=negatives[:, :EVAL_NEGATIVES_PER_SPLIT],
        test_negatives=negatives[:, EVAL_NEGATIVES_PER_SPLIT:],
        num_items=data.num_items,
    )


def write_ncf_files(split: Split, folder: Path) -> dict[str, Path]:
    """The NCF-style files (He et al.'s layout, which the reference code reads):
    ``train_interactions.csv`` (``user,item`` per train row, no header) and, one line per user,
    ``(user, held-out item)`` then its 99 negatives, tab-separated, for test
    (``test_neg_interactions``) and for validation (``valid_neg_interactions``, read by our
    driver only)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "train": folder / "train_interactions.csv",
        "test": folder / "test_neg_interactions",
        "valid": folder / "valid_neg_interactions",
    }
    rows = np.c_[split.train_user, split.train_item]
    np.savetxt(files["train"], rows, fmt="%d", delimiter=",")
    for name, items, negatives in (
        ("test", split.test_item, split.test_negatives),
        ("valid", split.valid_item, split.valid_negatives),
    ):
        lines = [
            f"({user}, {int(item)})\t" + "\t".join(map(str, row.tolist()))
            for user, (item, row) in enumerate(zip(items, negatives, strict=True))
        ]
        files[name].write_text("\n".join(lines) + "\n")
    return files


def parse_rounds(log: str, partial: bool = False) -> list[dict[str, Any]]:
    """Per round (1-based, ascending): ``{"round", "valid": {hr@10, ndcg@10}, "test": {...}}``
    from the driver's lines; a round needs both splits, each once, and the rounds run
    1, 2, ... without a gap. ``partial``: the log of a run still going or stopped, whose last
    round may lack one split (that round is left out)."""
    rounds: dict[int, dict[str, Any]] = {}
    for match in METRIC_LINE.finditer(log):
        entry = rounds.setdefault(int(match["round"]), {"round": int(match["round"])})
        split = match["split"]
        if split in entry:
            raise ReferenceError(f"round {match['round']}: two '{split}' lines in the log")
        entry[split] = {"hr@10": float(match["hr"]), "ndcg@10": float(match["ndcg"])}
    numbers = sorted(rounds)
    if numbers != list(range(1, len(numbers) + 1)):
        raise ReferenceError(f"the log's rounds are not 1..{len(numbers)}: {numbers}")
    for number in numbers:
        missing = {"valid", "test"} - set(rounds[number])
        if missing and partial and number == numbers[-1]:
            del rounds[number]
        elif missing:
            raise ReferenceError(f"round {number}: no {sorted(missing)} line in the log")
    return [rounds[r] for r in sorted(rounds)]


def chosen(rounds: list[dict[str, Any]], split: str) -> dict[str, Any]:
    """The round with the highest ``split`` HR@10, the earliest among ties (our runs' rule,
    and the reference code's own ``>`` on test); its validation and test metrics."""
    if not rounds:
        raise ReferenceError("no round in the log")
    best = rounds[0]
    for entry in rounds[1:]:
        if entry[split]["hr@10"] > best[split]["hr@10"]:
            best = entry
    return {"best_round": best["round"], "valid": best["valid"], "test": best["test"]}


def seed_record(seed: int, rounds: list[dict[str, Any]], seconds: float | None) -> dict[str, Any]:
    """One seed's entry of the JSON (``seconds`` None when collected from logs)."""
    return {
        "seed": seed,
        "rounds": rounds,
        "chosen_on_valid": chosen(rounds, "valid"),
        "chosen_on_test": chosen(rounds, "test"),
        "seconds": None if seconds is None else round(seconds, 1),
    }


def write_result(out: Path, record: dict[str, Any]) -> None:
    """The JSON, written whole (a finished seed is never lost: callers rewrite it per seed)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(out)


def run_driver(driver: Path, settings: dict[str, Any], work: Path, rounds: int) -> dict[str, Any]:
    """One seed: ``settings.json`` in ``work``, the driver in a fresh isolated interpreter
    (``python -I``: only the reference checkout the driver adds is importable beside the
    installed packages) with ``work`` as its folder, its output in ``work/driver.log``; the
    seed's record from that log."""
    work.mkdir(parents=True, exist_ok=True)
    seed = settings["seed"]
    lock = work / "running"
    try:
        lock.open("x").close()  # one run per folder: a second would truncate the first's log
    except FileExistsError:
        raise ReferenceError(
            f"seed {seed}: a run is going in {work} (or was killed: then remove {lock}); "
            "give another --work, or --collect to read its log"
        ) from None
    try:
        (work / "settings.json").write_text(json.dumps(settings, indent=2))
        log = work / "driver.log"
        started = time.time()
        with log.open("w") as stream:
            done = subprocess.run(
                [sys.executable, "-I", str(driver), str(work / "settings.json")],
                cwd=work,
                stdout=stream,
                stderr=subprocess.STDOUT,
            )
        seconds = time.time() - started
    finally:
        lock.unlink()
    if done.returncode:
        tail = log.read_text()[-2000:]
        raise ReferenceError(f"seed {seed}: the reference failed ({log}):\n{tail}")
    parsed = parse_rounds(log.read_text())
    if len(parsed) != rounds:
        raise ReferenceError(f"seed {seed}: {len(parsed)} rounds in {log}, not {rounds}")
    record = seed_record(seed, parsed, seconds)
    on_valid, on_test = record["chosen_on_valid"], record["chosen_on_test"]
    print(
        f"seed {seed}: {seconds:.0f} s; chosen on valid: round {on_valid['best_round']} test "
        f"{on_valid['test']}; chosen on test: round {on_test['best_round']} {on_test['test']}",
        flush=True,
    )
    return record


def run_seeds(
    seeds: list[int], jobs: int, one: Callable[[int], dict[str, Any]], record: dict, out: Path
) -> None:
    """``one(seed)`` for each seed, ``jobs`` at a time; the JSON rewritten as each finishes
    (seeds in order), so a finished seed is kept if a later one fails."""
    lock = threading.Lock()
    record["seeds"] = []

    def run(seed: int) -> None:
        result = one(seed)
        with lock:
            record["seeds"] = sorted([*record["seeds"], result], key=lambda r: r["seed"])
            write_result(out, record)

    record["rounds_logged"] = record["rounds_planned"]
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(run, seeds))
    print(f"wrote {out}")


def collect_seeds(work: Path, seeds: list[int], record: dict, out: Path) -> None:
    """The JSON from the drivers' logs in ``work/seed<s>/driver.log`` of runs still going or
    stopped: every seed cut to the rounds all of them completed. A run's first R rounds do
    not depend on the rounds planned (no schedule reads the horizon), so they are those of a
    run of R rounds; both selections are then over rounds 1..R, and the JSON says so."""
    parsed = {}
    for seed in seeds:
        log = work / f"seed{seed}" / "driver.log"
        if not log.exists():
            raise ReferenceError(f"seed {seed}: no {log}; run the seeds first (without --collect)")
        parsed[seed] = parse_rounds(log.read_text(), partial=True)
    common = min(len(rounds) for rounds in parsed.values())
    if common == 0:
        raise ReferenceError("a seed has no complete round yet")
    record["seeds"] = [seed_record(seed, parsed[seed][:common], None) for seed in seeds]
    record["rounds_logged"] = common
    if common < record["rounds_planned"]:
        record["stopped"] = (
            f"collected after {common} of {record['rounds_planned']} rounds (the rounds every "
            f"seed had completed); both selections are over rounds 1..{common}"
        )
    write_result(out, record)
    print(f"wrote {out}: {common} rounds")


def add_run_arguments(
    parser: argparse.ArgumentParser, out: str | None = None, work: str | None = None
) -> None:
    """The options every reference script shares: the clone, the data, seeds, rounds,
    threads, jobs, --collect; with ``out`` (a JSON name under bench/results/reference/) and
    ``work`` (a folder name in the system's temporary folder), ``--out`` and ``--work`` with
    those defaults (a script whose defaults depend on other options adds its own)."""
    parser.add_argument("--repo", required=True, help="the user's clone of the reference")
    parser.add_argument("--data-dir", required=True, help="folder of the raw datasets")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per seed")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run at a time")
    parser.add_argument(
        "--collect",
        action="store_true",
        help="write the JSON from the logs already in --work (runs going or stopped)",
    )
    if out is not None:
        parser.add_argument("--out", default=str(project_root() / "bench/results/reference" / out))
    if work is not None:
        parser.add_argument(
            "--work",
            default=str(Path(tempfile.gettempdir()) / work),
            help="scratch folder: the reference's files and raw logs",
        )


def collect_or_run(args: argparse.Namespace, record: dict, run_seed: Callable) -> None:
    """``--collect``: the JSON from the logs already in ``--work``; else run the seeds."""
    if args.collect:
        collect_seeds(Path(args.work).resolve(), args.seeds, record, Path(args.out))
        return
    run_seeds(args.seeds, args.jobs, lambda seed: run_seed(args, seed), record, Path(args.out))


def shown_command(script: str, seeds: list[int], rounds: int) -> str:
    """The command line as the JSON states it (the user's folders as REPO and DIR);
    ``script`` may carry the script's own options."""
    tail = shlex.join(["--seeds", *map(str, seeds), "--rounds", str(rounds)])
    return f"python bench/reference/{script} --repo REPO --data-dir DIR {tail}"
