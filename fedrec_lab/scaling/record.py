"""Cases, round statistics, the JSON record of a case and the markdown table (pure parts)."""

from __future__ import annotations

import csv
import json
import re
import statistics
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

MODES = ("inprocess", "flwr", "faithful")
#: case keys the harness reads itself; every other key is a run-config key
HARNESS_KEYS = {"preset", "mode", "nodes", "workers", "gpus", "name"}
#: short forms of the synthetic dataset's keys
ALIASES = {
    "users": "synthetic-users",
    "items": "synthetic-items",
    "degree": "synthetic-mean-degree",
}
FIELDS = (
    "name",
    "method",
    "dataset",
    "protocol",
    "users",
    "items",
    "nodes",
    "ray_workers",
    "device",
    "fraction_train",
    "eval_users",
    "max_in_flight",
    "mode",
    "rounds",
    "seconds_per_round_median",
    "seconds_per_round_min",
    "seconds_per_round_max",
    "cpu_seconds_per_round_median",
    "load_average",
    "clients_per_second",
    "train_users_per_round",
    "peak_rss_mb",
    "rss_backend",
    "bytes_down",
    "bytes_up",
    "floor_seconds_per_round_median",
    "floor_peak_rss_mb",
    "cost_ratio",
    "torch_version",
    "cpu_count",
    "gpu_name",
    "case",
)
ABSOLUTE = re.compile(r"(/work/|/tmp/|/root/|/home/)")


def _literal(value: str) -> Any:
    """A TOML literal (``0.1``, ``true``, ``'x'``), else the text itself (``cuda``)."""
    try:
        return tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return value


def parse_case(text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``key=value,key=value`` -> (harness keys, run-config keys).

    A comma splits only before ``key=``, so ``ncf-layers=32,16`` stays one value.
    """
    harness: dict[str, Any] = {}
    config: dict[str, Any] = {}
    for item in re.split(r",(?=[A-Za-z][\w-]*=)", text.strip()):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SystemExit(f"case item '{item}' is not key=value (case: {text})")
        if key in HARNESS_KEYS:
            harness[key] = _literal(value) if key in ("nodes", "workers", "gpus") else value
        else:
            config[ALIASES.get(key, key)] = _literal(value)
    mode = harness.setdefault("mode", "inprocess")
    if mode not in MODES:
        raise SystemExit(f"case '{text}': mode={mode}; use one of {', '.join(MODES)}")
    if any(k.startswith("synthetic-") for k in config):
        config.setdefault("dataset", "synthetic")
    return harness, config


def round_rows(run_dir: Path) -> list[dict[str, str]]:
    with open(Path(run_dir) / "rounds.csv") as f:
        return list(csv.DictReader(f))


T = TypeVar("T")


def durations(elapsed: Sequence[float]) -> list[float]:
    """Seconds of each round from the cumulative seconds at the end of each."""
    return [b - a for a, b in zip([0.0, *elapsed[:-1]], elapsed, strict=True)]


def after_first(values: Sequence[T]) -> list[T]:
    """The rounds after the first (warm-up), or all when there is only one."""
    return list(values[1:]) if len(values) > 1 else list(values)


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def run_figures(rows: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    """Seconds per round (median, min, max after the first round), users trained per round
    and per second, bytes down and up per round (medians after the first round)."""
    seconds = after_first(durations([float(r["seconds"]) for r in rows]))
    kept = after_first(list(rows))
    users = median([float(r["train-users"] or 0) for r in kept])
    middle = median(seconds)
    cpu = [r.get("cpu-seconds") or "" for r in rows]
    cpu_seconds = after_first(durations([float(c) for c in cpu])) if all(cpu) else []
    figures = {
        # CPU time of the server's process per round (in-process: the nodes' too): on a
        # loaded machine it stays near the quiet wall time when the wall time does not.
        "cpu_seconds_per_round_median": median(cpu_seconds),
        "rounds": len(rows),
        "seconds_per_round_median": middle,
        "seconds_per_round_min": min(seconds) if seconds else None,
        "seconds_per_round_max": max(seconds) if seconds else None,
        "train_users_per_round": users,
        "clients_per_second": users / middle if middle and users is not None else None,
        "bytes_down": median([int(r["bytes-down"]) for r in kept]),
        "bytes_up": median([int(r["bytes-up"]) for r in kept]),
    }
    return {k: rounded(v) for k, v in figures.items()}


def rounded(value: Any, digits: int = 4) -> Any:
    """Floats to ``digits`` decimals (JSON without float noise); anything else as it is."""
    return round(value, digits) if isinstance(value, float) else value


def floor_payload(
    figures: Mapping[str, Any], nodes: int, users: int, evaluates: bool
) -> dict[str, int]:
    """The echo's per-round messages from our totals per round (no probe): one train
    message to as many nodes as ours trained (at most ``nodes``), one evaluate message to
    every node if ours evaluated, each carrying an equal share of our float32 values down
    and up. :func:`probed_payload` is closer: it has each kind's own sizes."""
    train = max(1, min(nodes, round(figures["train_users_per_round"] or nodes)))
    if users and nodes < users:  # packed: every node with a participant gets a message
        train = nodes
    evaluate = nodes if evaluates else 0
    down = int(figures["bytes_down"] or 0) // 4 // (train + evaluate)
    up = int(figures["bytes_up"] or 0) // 4 // (train + evaluate)
    return {
        "train-messages": train,
        "evaluate-messages": evaluate,
        "train-down-floats": down,
        "train-up-floats": up,
        "evaluate-down-floats": down,
        "evaluate-up-floats": up,
    }


def probed_payload(sizes: Mapping[str, Sequence[tuple[int, int]]]) -> dict[str, int]:
    """The echo's per-round messages from our messages of one round, by kind: ``sizes[kind]``
    holds (bytes down, bytes up) of each message; each echo message of a kind carries that
    kind's median as float32 values. (Ray moves an argument or result over 100 kB through
    its object store, a few ms more per message: per-kind sizes keep the floor honest.)"""
    payload: dict[str, int] = {}
    for kind in ("train", "evaluate"):
        pairs = list(sizes.get(kind, []))
        payload[f"{kind}-messages"] = len(pairs)
        for i, way in enumerate(("down", "up")):
            payload[f"{kind}-{way}-floats"] = (
                int(statistics.median(p[i] for p in pairs)) // 4 if pairs else 0
            )
    return payload


def floor_fields(
    floors: Sequence[tuple[float | None, float]], ours: float | None, payload: Mapping
) -> dict[str, Any]:
    """The record's floor fields from one or two (bracketing) floor runs, each (median
    seconds per round, peak RSS MB): the floor is their mean, ``cost_ratio`` ours over it."""
    medians = [m for m, _ in floors if m]
    floor = statistics.fmean(medians) if medians else None
    fields: dict[str, Any] = {
        "floor_seconds_per_round_median": rounded(floor),
        "floor_peak_rss_mb": max(mb for _, mb in floors),
        "floor_payload": dict(payload),
        "cost_ratio": rounded(ours / floor if ours and floor else None, 2),
    }
    if len(floors) > 1:
        fields["floor_runs_seconds_per_round_median"] = [rounded(m) for m, _ in floors]
    return fields


def case_name(record: Mapping[str, Any]) -> str:
    """``<method>-<dataset>-<protocol>-<users>x<items>-<mode>-n<nodes>-w<workers>-<device>``
    ``[-f<frac>][-e<eval users>][-m<max in flight>]``."""
    protocol = f"-{record['protocol']}" if record.get("protocol") else ""
    name = (
        f"{record['method']}-{record['dataset']}{protocol}-{record['users']}x{record['items']}-"
        f"{record['mode']}-n{record['nodes']}-w{record['ray_workers']}-{record['device']}"
    )
    if record.get("fraction_train") not in (None, 1.0, 1):
        name += f"-f{record['fraction_train']}"
    if record.get("eval_users"):
        name += f"-e{record['eval_users']}"
    if record.get("max_in_flight"):
        name += f"-m{record['max_in_flight']}"
    return name.replace(":", "")


def write_record(record: Mapping[str, Any], folder: Path) -> Path:
    """``<folder>/<name>.json`` with the fields in :data:`FIELDS` order (then any other);
    refused if it would hold an absolute path of this machine."""
    ordered = {k: record.get(k) for k in FIELDS}
    ordered.update({k: v for k, v in record.items() if k not in ordered})
    text = json.dumps(ordered, indent=2) + "\n"
    if ABSOLUTE.search(text):
        raise ValueError(f"record {ordered['name']} holds an absolute path: {text}")
    path = Path(folder) / f"{ordered['name']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _cell(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


TABLE_COLUMNS = (
    ("case", "name", 0),
    ("mode", "mode", 0),
    ("users", "users", 0),
    ("items", "items", 0),
    ("nodes", "nodes", 0),
    ("Ray workers", "ray_workers", 0),
    ("device", "device", 0),
    ("fraction", "fraction_train", 2),
    ("eval users", "eval_users", 0),
    ("in flight", "max_in_flight", 0),
    ("s/round (median)", "seconds_per_round_median", 3),
    ("min", "seconds_per_round_min", 3),
    ("max", "seconds_per_round_max", 3),
    ("CPU s/round", "cpu_seconds_per_round_median", 3),
    ("load", "load_average", 1),
    ("clients/s", "clients_per_second", 0),
    ("peak RSS MB", "peak_rss_mb", 0),
    ("MB down/round", "mb_down", 2),
    ("MB up/round", "mb_up", 2),
    ("floor s/round", "floor_seconds_per_round_median", 3),
    ("cost / floor", "cost_ratio", 2),
    ("torch", "torch_version", 0),
    ("code", "code", 0),
    ("GPU", "gpu_name", 0),
)


def table(records: Sequence[Mapping[str, Any]]) -> str:
    """The markdown table of the records (sorted by name)."""
    lines = [
        "| " + " | ".join(title for title, _, _ in TABLE_COLUMNS) + " |",
        "|" + "---|" * len(TABLE_COLUMNS),
    ]
    for record in sorted(records, key=lambda r: str(r.get("name"))):
        row = dict(record)
        for key in ("bytes_down", "bytes_up"):
            value = row.get(key)
            row["mb_" + key[6:]] = None if value is None else value / 1e6
        if row.get("eval_users") in (0, None):
            row["eval_users"] = "all"
        cells = [_cell(row.get(key), digits) for _, key, digits in TABLE_COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_table(folder: Path) -> Path:
    """Regenerate ``<folder>/table.md`` from every ``*.json`` in ``folder``."""
    folder = Path(folder)
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    header = (
        "# Scale harness results\n\n"
        "One row per case (`bench/results/scale/<case>.json`, written by `python bench/scale.py"
        " --case ...`; each JSON holds its case and its machine). Seconds per round: over the "
        "rounds after the first. clients/s: users trained per second. floor: Flower's trivial "
        "echo ClientApp in the same mode, nodes and payload sizes, same run; cost / floor = "
        "ours / floor. Peak RSS: the whole process tree (Ray and the SuperLink included).\n\n"
    )
    path = folder / "table.md"
    path.write_text(header + table(records))
    return path
