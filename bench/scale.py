"""Scale harness: seconds per round, peak memory and traffic of a case, beside Flower's floor.

    python bench/scale.py --rounds 5 --data-dir ../shared/datasets \\
        --case preset=pfedrec-ml100k-strict,mode=inprocess,nodes=1 \\
        --case dataset=synthetic,users=6040,items=3706,degree=165,mode=inprocess,device=cuda

A case is ``key=value`` items joined by commas. Harness keys: ``preset`` (a ``conf/`` file
name), ``mode`` (``inprocess``: ServerApp and ClientApp in one process on a LocalGrid, no
Ray; ``flwr``: ``flwr run`` on Flower's Ray engine; ``faithful``: ``flwr run`` with one
SuperNode per user), ``nodes`` (default 1; faithful: the users), ``workers`` (Ray workers of
the flwr modes, default 1), ``gpus`` (``client-resources-num-gpus``), ``name`` (of the JSON;
default derived from the case), ``users``/``items``/``degree`` (the synthetic dataset). Any
other key is a run-config key, passed through: ``fraction-train=0.1``, ``eval-users=1000``,
``device=cuda``, ``protocol=paper``.

Each case runs ``--rounds`` rounds in a process of its own (fresh memory and imports), then
Flower's floor: the trivial echo app (``bench/echo_app``) in the same mode on the same nodes,
moving the same float32 values per round. While each runs, a thread sums the RSS of the whole
process tree (Ray workers, the SuperLink and its simulation process included; in the flwr
modes not the launcher's own process): ``fedrec_lab/scaling/rss.py``. Writes
``bench/results/scale/<name>.json`` per case and regenerates ``table.md`` from every JSON there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from fedrec_lab.launch.run_config import project_defaults
from fedrec_lab.presets import resolve
from fedrec_lab.scaling import record
from fedrec_lab.scaling.rss import TAG_ENV, PeakRss

PROJECT = Path(__file__).resolve().parents[1]
OUT = PROJECT / "bench" / "results" / "scale"


def case_config(harness: dict, overrides: dict, rounds: int, data_dir: str | None) -> dict:
    """The run configuration of a case: its preset, its keys, the harness's rounds."""
    config: dict[str, Any] = {}
    if "preset" in harness:
        preset = PROJECT / "conf" / f"{harness['preset']}.toml"
        if not preset.exists():
            raise SystemExit(f"preset={harness['preset']}: no {preset.name} in conf/ (ls conf/)")
        config.update(resolve(preset))
    config.update(overrides)
    if data_dir and "data-dir" not in overrides:
        config["data-dir"] = str(Path(data_dir).resolve())
    if "checkpoint-every" not in overrides:  # checkpoints are not a round's cost
        config["checkpoint-every"] = 0
    config.update({"num-server-rounds": rounds, "run-name": "case"})
    return config


def measure(spec: dict, work: Path, label: str) -> tuple[dict, PeakRss]:
    """Run ``spec`` in a child process (``fedrec_lab/scaling/runner.py``) while sampling RSS."""
    spec_path, out_path = work / f"{label}-spec.json", work / f"{label}-out.json"
    spec_path.write_text(json.dumps(spec))
    tag = uuid.uuid4().hex
    path = os.pathsep.join(p for p in (str(PROJECT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, TAG_ENV: tag, "PYTHONPATH": path}
    command = [sys.executable, "-m", "fedrec_lab.scaling.runner", str(spec_path), str(out_path)]
    with PeakRss(include_self=False, tag=tag) as peak:
        child = subprocess.Popen(command, cwd=PROJECT, env=env)
        if spec["mode"] != "inprocess":  # the launcher is not the run
            peak.exclude.add(child.pid)
        code = child.wait()
    if code != 0 or not out_path.exists():
        raise SystemExit(f"{label} failed (exit status {code}); see its output above")
    result = json.loads(out_path.read_text())
    if peak.backend == "getrusage":
        peak.peak_bytes = result["rusage_peak_bytes"]
    return result, peak


def run_case(text: str, args: argparse.Namespace, work: Path) -> dict:
    """Run one case and its floor in ``work``; the case's record."""
    harness, overrides = record.parse_case(text)
    mode = harness["mode"]
    config = case_config(harness, overrides, args.rounds, args.data_dir)
    config["results-dir"] = str(work / "runs")
    spec = {
        "what": "ours",
        "mode": mode,
        "config": config,
        "nodes": harness.get("nodes", None if mode == "faithful" else 1),
        "workers": harness.get("workers", 1),
        "gpus": harness.get("gpus", 0),
    }
    merged = {**project_defaults(PROJECT), **config}
    # ours and its floor send with the same window (flwr modes only)
    spec["max_in_flight"] = in_flight = None if mode == "inprocess" else window(merged)
    payload, floors = None, []
    if args.bracket and not args.no_floor:  # a floor before ours, one after
        probed = probe(spec, text, work)
        payload = record.probed_payload(probed["sizes"])
        floors.append(run_floor(spec, text, probed["nodes"], payload, args.rounds, work))
    print(f"scale: {text}: running {args.rounds} rounds ({mode})", flush=True)
    load_before = os.getloadavg()[0]
    ours, peak = measure(spec, work, "ours")
    load = round((load_before + os.getloadavg()[0]) / 2, 2)  # the machine's load meanwhile
    run_dir = Path(ours["run_dir"])
    described = json.loads((run_dir / "config.json").read_text())
    figures = record.run_figures(record.round_rows(run_dir))
    rec: dict[str, Any] = {
        "method": described["method"],
        "dataset": described["dataset"],
        "protocol": described["protocol"],
        "users": described.get("num_users"),
        "items": described.get("num_items"),
        "nodes": ours["nodes"],
        "ray_workers": 0 if mode == "inprocess" else spec["workers"],
        "device": merged.get("device", "cpu"),
        "fraction_train": merged.get("fraction-train"),
        "eval_users": merged.get("eval-users") or None,
        "max_in_flight": in_flight,
        "mode": mode,
        **figures,
        "load_average": load,
        "peak_rss_mb": round(peak.mb, 1),
        "rss_backend": peak.backend,
        "ray_imported": ours["ray_imported"],
        **{k: ours[k] for k in ("torch_version", "cpu_count", "gpu_name")},
        "case": text,
        "code": code_revision(),
        "command": f"python bench/scale.py --case {text} --rounds {args.rounds} --data-dir DATA",
    }
    rec["name"] = harness.get("name") or record.case_name(rec)
    if not args.no_floor:
        if payload is None:
            sizes = ours["sizes"] or (None if args.no_probe else probe(spec, text, work)["sizes"])
            if sizes:
                payload = record.probed_payload(sizes)
            else:
                evaluates = merged.get("eval-every", 1) == 1
                users = rec["users"] or 0
                payload = record.floor_payload(figures, rec["nodes"], users, evaluates)
        floors.append(run_floor(spec, text, rec["nodes"], payload, figures["rounds"], work))
        rec.update(record.floor_fields(floors, rec["seconds_per_round_median"], payload))
    return rec


def window(config: dict) -> int:
    """The most messages our server keeps in flight in a flwr mode (0: a round at once)."""
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.server.in_flight import message_window

    return message_window(RunConfig.from_mapping(config))


def probe(spec: dict, text: str, work: Path) -> dict:
    """Our message sizes by kind and nodes, from the same case run in-process for 3 rounds
    (a flwr run cannot be watched from here); the floor's echo then mirrors them."""
    config = {**spec["config"], "results-dir": str(work / "probe"), "num-server-rounds": 3}
    probe_spec = {**spec, "what": "probe", "config": config}
    print(f"scale: {text}: probing our message sizes in-process (3 rounds)", flush=True)
    result, _ = measure(probe_spec, work, "probe")
    return result


def run_floor(
    spec: dict, text: str, nodes: int, payload: dict, rounds: int, work: Path
) -> tuple[float | None, float]:
    """Flower's floor for the case: the echo app, same mode and nodes, ``payload``; its
    median seconds per round (after the first) and peak RSS in MB."""
    echo = {"num-server-rounds": rounds, "nodes": nodes, **payload, "node-wait-timeout": 600.0}
    if spec.get("max_in_flight") is not None:  # the floor sends as ours does
        echo["max-in-flight"] = spec["max_in_flight"]
    floor_spec = {**spec, "what": "floor", "echo": echo}
    floor_spec["config"] = {"results-dir": str(work / f"floor-{uuid.uuid4().hex[:8]}")}
    print(f"scale: {text}: floor (echo app, {payload})", flush=True)
    result, peak = measure(floor_spec, work, "floor")
    seconds = record.after_first(record.durations(result["elapsed"]))
    return record.median(seconds), round(peak.mb, 1)


def code_revision() -> str:
    """The commit the case ran at, ``+dirty`` if the package or bench code had changes.

    ``FEDREC_CODE_REVISION`` names it where the tree has no git history (a copied tree).
    """
    if os.environ.get("FEDREC_CODE_REVISION"):
        return os.environ["FEDREC_CODE_REVISION"]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--",
                "fedrec_flwr",
                "bench/scale.py",
                "fedrec_lab/scaling",
            ],
            cwd=PROJECT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", required=True, help="key=value,...")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data-dir", default=None, help="folder of the datasets")
    parser.add_argument("--no-floor", action="store_true", help="skip the echo floor")
    parser.add_argument(
        "--no-probe",
        action="store_true",
        help="flwr modes: size the floor's messages from our totals per round, split evenly,"
        " instead of probing each kind's sizes in-process",
    )
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--keep", action="store_true", help="keep the runs' temporary folders")
    parser.add_argument(
        "--bracket",
        action="store_true",
        help="run the floor before and after the case and compare with their mean (a busy "
        "machine's drift between the runs then cancels to first order)",
    )
    args = parser.parse_args()
    for text in args.case:
        work = Path(tempfile.mkdtemp(prefix="fedrec-scale-"))
        try:
            rec = run_case(text, args, work)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        path = record.write_record(rec, Path(args.out))
        print(json.dumps(rec, indent=2), flush=True)
        print(f"scale: wrote {path.relative_to(PROJECT) if path.is_relative_to(PROJECT) else path}")
    print(record.write_table(Path(args.out)).read_text())


if __name__ == "__main__":
    main()
