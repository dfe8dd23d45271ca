"""Cells of an experiment table: one run each, named deterministically, run once.

A cell is a (row, seed): a federated preset ``conf/<preset>-<dataset>-<protocol>.toml`` with
optional overrides under a tag, or a reference row of :mod:`fedrec_lab.baselines`. Its
folder is ``<out>/runs/<preset>[+tag]-<dataset>-<protocol>-seed<s>`` (the naming of
``bench/results/runs/``). A folder with ``summary.json`` is done and never recomputed. An
unfinished federated run (``INCOMPLETE`` marker) with a checkpoint continues from it in its
folder (``resume``: the same rounds as an uninterrupted run, bit for bit); one without (or
whose continuation fails) is moved aside to ``<name>.incomplete-<time>`` and the cell runs
again from round 1 into a fresh folder; so is a run whose recorded configuration is not the
cell's any more (``<name>.stale-<time>``: e.g. a retuned preset).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedrec_flwr.data.registry import DATASETS
from fedrec_flwr.results import INCOMPLETE
from fedrec_lab.child_process import child_env
from fedrec_lab.presets import resolve
from fedrec_lab.project import conf_dir, lazy_paths, project_root

if TYPE_CHECKING:  # the run config and the baselines are imported where they run
    from fedrec_flwr.config import RunConfig
    from fedrec_lab.baselines import Row

__getattr__ = lazy_paths(__name__, "PROJECT", "CONF")  # found when read
SHORT = {
    "ml-100k": "ml100k",
    "lastfm-2k": "lastfm2k",
    "ml-1m": "ml1m",
    "amazon-video": "amazonvideo",
    "synthetic": "synthetic",
}
#: Datasets without presets of their own run the ML-100K preset with ``dataset`` changed.
PRESET_FALLBACK = "ml-100k"
#: Reference rows that the seed does not change under ``strict`` (one cell, seed of the first).
DETERMINISTIC = ("popularity", "itemknn", "ease")

# In a fresh process, one run on the in-process grid (the ServerApp's run_federation and the
# ClientApp, without Ray): the metrics do not depend on the packing of users into nodes.
# Its last line of output is the run's summary (``SUMMARY {json}``). It ends with the process
# that started it (:mod:`fedrec_lab.child_process`).
RUNNER = """
import json, sys
from fedrec_lab.child_process import die_with_parent
die_with_parent()
from fedrec_flwr.client_app import app
from fedrec_flwr.config import RunConfig
from fedrec_lab.local_grid import LocalGrid
from fedrec_flwr.server_app import run_federation
rc, nodes = json.loads(sys.argv[1]), int(sys.argv[2])
summary = run_federation(LocalGrid(app, rc, num_nodes=nodes), RunConfig.from_mapping(rc))
print("SUMMARY " + json.dumps(summary))
"""


@dataclass(frozen=True)
class RowSpec:
    """One row of a table on one dataset and protocol (its cells: one per seed)."""

    preset: str  # preset family ('pfedrec', 'fedmf-dual') or reference row ('itemknn')
    dataset: str
    protocol: str
    tag: str = ""
    overrides: tuple[tuple[str, Any], ...] = ()
    kind: str = "federated"  # or "reference" (fedrec_lab.baselines)
    paper: tuple[float, float] | None = None  # HR@10, NDCG@10 (%)

    @property
    def key(self) -> str:
        return f"{self.preset}+{self.tag}" if self.tag else self.preset

    def seeds(self, seeds: list[int]) -> list[int]:
        if self.kind == "reference" and self.protocol == "strict" and self.preset in DETERMINISTIC:
            return seeds[:1]
        return list(seeds)

    def cells(self, seeds: list[int]) -> list[Cell]:
        return [Cell(self, seed) for seed in self.seeds(seeds)]


@dataclass(frozen=True)
class Cell:
    row: RowSpec
    seed: int

    @property
    def name(self) -> str:
        r = self.row
        return f"{r.key}-{SHORT[r.dataset]}-{r.protocol}-seed{self.seed}"


def preset_path(row: RowSpec) -> Path:
    """The preset file a federated row runs (its dataset's, else the ML-100K one)."""
    own = conf_dir() / f"{row.preset}-{SHORT[row.dataset]}-{row.protocol}.toml"
    if own.exists():
        return own
    return conf_dir() / f"{row.preset}-{SHORT[PRESET_FALLBACK]}-{row.protocol}.toml"


def data_present(dataset: str, data_dir: str | Path) -> bool:
    """Whether ``data-dir`` holds a file the dataset's loader reads (synthetic: always)."""
    source = DATASETS[dataset].source
    if source is None:
        return True
    return any((Path(data_dir) / source.folder / name).is_file() for name in source.accepted)


#: Run-config keys that do not change a run's results (where it runs and writes, how fast).
NEUTRAL_KEYS = frozenset(
    {
        "data-dir",
        "results-dir",
        "run-name",
        "resume",
        "checkpoint-every",
        "keep-best-state",
        "eval-loss",  # adds loss columns (and, under paper, rows sent): no metric changes
        "device",
        "cuda-deterministic",
        "torch-threads",
        "node-wait-timeout",
        "round-timeout",
        "max-in-flight",
    }
)


def stale_keys(
    cell: Cell,
    runs: Path,
    data_dir: str | Path,
    rounds: int | None = None,
    extra: dict | None = None,
) -> list[str]:
    """Keys whose value in a finished federated cell's ``config.json`` is not the one the cell
    would run with now (e.g. its preset was retuned since): such a run is not this cell's.
    A key the recorded config lacks (added to the project later) counts as its default."""
    recorded_path = runs / cell.name / "config.json"
    if cell.row.kind != "federated" or not recorded_path.exists():
        return []
    from fedrec_flwr.config import RunConfig

    recorded = json.loads(recorded_path.read_text())
    wanted = run_config(cell, runs, data_dir, rounds, extra or {})
    expected = RunConfig.from_mapping(wanted).to_mapping()
    defaults = RunConfig().to_mapping()
    ignored = NEUTRAL_KEYS | other_datasets_keys(str(expected["dataset"]))
    return sorted(
        key
        for key, value in expected.items()
        if key not in ignored and recorded.get(key, defaults[key]) != value
    )


def other_datasets_keys(dataset: str) -> frozenset[str]:
    """The keys of the datasets other than ``dataset`` (e.g. ``dataset = "file"``'s column
    mapping): never read by its runs, so they cannot change one."""
    from fedrec_flwr.data.registry import dataset_key_groups

    return frozenset(
        item.name
        for group, owner in dataset_key_groups().items()
        if owner != dataset
        for item in group.keys
    )


def status(
    cell: Cell,
    runs: Path,
    data_dir: str | Path,
    rounds: int | None = None,
    extra: dict | None = None,
) -> str:
    """``done``, ``stale`` (finished with other settings than the cell's now), ``incomplete``
    (crashed or stopped), ``todo`` or ``no data``."""
    folder = runs / cell.name
    if (folder / "summary.json").exists():
        return "stale" if stale_keys(cell, runs, data_dir, rounds, extra) else "done"
    if folder.exists():
        return "incomplete"
    if not data_present(cell.row.dataset, data_dir):
        return "no data"
    return "todo"


def checkpoint_round(folder: Path) -> int:
    """The round of an unfinished federated run's last checkpoint (0: none to continue)."""
    latest = folder / "checkpoint" / "latest.json"
    if not (folder / INCOMPLETE).exists() or not (folder / "config.json").exists():
        return 0
    try:
        return int(json.loads(latest.read_text())["round"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def set_aside(folder: Path, why: str = "incomplete") -> Path:
    """Move an unfinished (or stale) run's folder out of the cell's name (kept for
    inspection)."""
    target = folder.with_name(f"{folder.name}.{why}-{time.strftime('%Y%m%d-%H%M%S')}")
    folder.rename(target)
    return target


def run_config(
    cell: Cell, runs: Path, data_dir: str | Path, rounds: int | None, extra: dict
) -> dict[str, Any]:
    """The run config of a federated cell: preset, row overrides, ``--set``, the cell's keys."""
    row = cell.row
    config = resolve(preset_path(row))
    config["dataset"] = row.dataset
    config.update(dict(row.overrides))
    config.update(extra)
    config.update(
        {
            "seed": cell.seed,
            "data-dir": str(Path(data_dir).resolve()) if row.dataset != "synthetic" else "",
            "results-dir": str(runs.resolve()),
            "run-name": cell.name,
        }
    )
    if rounds:
        config["num-server-rounds"] = rounds
    return config


def run_federated(config: dict[str, Any], nodes: int, use_flwr: bool) -> str:
    """Run one federated cell; a status like ``flwr``'s (``finished:completed`` when done)."""
    if use_flwr:
        from fedrec_lab.launch import run

        return run(config, nodes=nodes, stream=False)[0]
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(config), str(nodes)],
        capture_output=True,
        text=True,
        cwd=project_root(),
        env=child_env(),
    )
    if done.returncode:
        return "failed: " + done.stderr[-1500:]
    return "finished:completed"


def run_reference(
    cell: Cell,
    runs: Path,
    data_dir: str | Path,
    rounds: int | None,
    extra: dict,
    stored_only: bool = False,
) -> bool:
    """A reference row of :mod:`fedrec_lab.baselines` as a cell: ``summary.json`` written
    last. Taken from ``<out>/baselines-<dataset>-<protocol>.json`` (its dataset's name, a
    generated one's shape with it) when that file holds the row at this seed, else computed
    (tuned on validation, as ``python -m fedrec_lab.baselines`` does; not with
    ``stored_only``). Whether the cell was written."""
    from fedrec_flwr.data.prepared import prepare
    from fedrec_lab import baselines
    from fedrec_lab.baselines.report import file_name

    row = cell.row
    config = reference_config(cell, data_dir, extra)
    stored = runs.parent / f"baselines-{file_name(config)}-{row.protocol}.json"
    found, source = None, "computed"
    # A local-only row depends on its method's preset, which may have been retuned since the
    # baselines file was written: always computed (seconds to a minute, early stopping).
    if stored.exists() and row.preset not in baselines.LOCAL:
        record = json.loads(stored.read_text())
        if record.get("seed") == cell.seed:
            found = next((r for r in record["rows"] if r["name"] == row.preset), None)
            source = stored.name
    if found is None and stored_only:
        return False
    per_user = None
    if found is None:
        computed = compute_reference(cell, config, rounds)
        found, per_user = computed.record(), computed.per_user
    folder = runs / cell.name
    folder.mkdir(parents=True)
    (folder / INCOMPLETE).write_text("reference row being computed\n")
    if per_user is not None:
        per_user.write(folder)
    summary = {
        "method": row.preset,
        "kind": "reference",
        "dataset": row.dataset,
        "protocol": row.protocol,
        "seed": cell.seed,
        "best_round": found["chosen"].get("best_round", "-"),
        "chosen": found["chosen"],
        "val": found["val"],
        "test": found["test"],
        "seconds": found["seconds"],
        "num_users": prepare(config).num_users,
        "source": source,
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (folder / INCOMPLETE).unlink()
    return True


def reference_config(cell: Cell, data_dir: str | Path, extra: dict):
    """The run configuration a reference row is computed under."""
    from fedrec_flwr.config import RunConfig

    row = cell.row
    synthetic = {k: v for k, v in extra.items() if k.startswith("synthetic-")}
    return RunConfig.from_mapping(
        {
            "dataset": row.dataset,
            "protocol": row.protocol,
            "seed": cell.seed,
            "data-dir": str(Path(data_dir).resolve()) if row.dataset != "synthetic" else "",
            **synthetic,
        }
    )


def compute_reference(cell: Cell, config: RunConfig, rounds: int | None) -> Row:
    """A reference row computed now (:class:`fedrec_lab.baselines.Row`, per-user values
    included)."""
    from fedrec_lab import baselines

    if cell.row.preset in baselines.NEEDS_IMPLICIT and not baselines.implicit_available():
        raise RuntimeError(f"{cell.row.preset} needs the implicit library (.[baselines])")
    local_rounds = rounds if cell.row.preset in baselines.LOCAL else None
    return baselines.reference_rows(config, (cell.row.preset,), local_rounds)[0]


def scrub_paths(runs: Path, project: Path | None = None, only: tuple[str, ...] = ()) -> None:
    """Store each run's ``data-dir``, ``results-dir`` and ``resume`` relative to the project,
    so that committed results carry no path of the machine that made them (``only``: these
    run folders, else all)."""
    files = [runs / n / "config.json" for n in only] if only else runs.glob("*/config.json")
    for config_file in sorted(f for f in files if f.exists()):
        config = json.loads(config_file.read_text())
        changed = False
        for key in ("data-dir", "results-dir", "resume"):
            value = config.get(key, "")
            if isinstance(value, str) and Path(value).is_absolute():
                config[key] = os.path.relpath(value, project or project_root())
                changed = True
        if changed:
            config_file.write_text(json.dumps(config, indent=2) + "\n")
