"""The SAM table's cells and how each gets its best-round model.

Each method with and without SAM (the SAM-free twin of FedRecGEL is its ``nosam`` preset), on
both datasets and protocols, seeds 0-2. A cell's run is the committed one in ``<runs>/``
where it exists (it is then replayed to its best round in a work folder,
:func:`fedrec_lab.analysis.state.replay`), else it is run like an experiment cell into
``<runs>/`` with ``eval-loss`` and ``keep-best-state`` (keys that change no metric).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fedrec_lab.analysis.state import has_state, replay
from fedrec_lab.experiments import cells as runner
from fedrec_lab.presets import resolve

#: (method, preset without SAM, preset with SAM).
PAIRS = (
    ("FedRecGEL", "fedrecgel-nosam", "fedrecgel"),
    ("PFedRec", "pfedrec", "pfedrec-sam"),
    ("FedMF", "fedmf", "fedmf-sam"),
    ("FedNCF", "fedncf", "fedncf-sam"),
    ("FedRAP", "fedrap", "fedrap-sam"),
)
DATASETS = ("ml-100k", "lastfm-2k")
PROTOCOLS = ("strict", "paper")
SEEDS = (0, 1, 2)
#: What a new cell records beside its metrics.
RECORDED = {"eval-loss": True, "keep-best-state": True}


@dataclass(frozen=True)
class SamCell:
    method: str
    sam: bool
    dataset: str
    protocol: str
    seed: int

    @property
    def preset(self) -> str:
        pair = next(p for p in PAIRS if p[0] == self.method)
        return pair[2] if self.sam else pair[1]

    @property
    def cell(self) -> runner.Cell:
        return runner.Cell(runner.RowSpec(self.preset, self.dataset, self.protocol), self.seed)

    @property
    def name(self) -> str:
        return self.cell.name


#: The rows in the order their cells are made: the cheapest first (a full table takes days on
#: two shared cores), every seed of a tier before the next tier.
COST_TIERS = (
    (
        ("PFedRec", "ml-100k", "strict"),
        ("FedMF", "ml-100k", "strict"),
        ("PFedRec", "ml-100k", "paper"),
        ("FedMF", "ml-100k", "paper"),
        ("FedRecGEL", "ml-100k", "paper"),
        ("FedRecGEL", "ml-100k", "strict"),
        ("FedRAP", "ml-100k", "strict"),
        ("FedNCF", "ml-100k", "strict"),
        ("PFedRec", "lastfm-2k", "strict"),
        ("FedMF", "lastfm-2k", "strict"),
        ("PFedRec", "lastfm-2k", "paper"),
        ("FedMF", "lastfm-2k", "paper"),
        ("FedRecGEL", "lastfm-2k", "paper"),
    ),
    (("FedRAP", "ml-100k", "paper"), ("FedNCF", "lastfm-2k", "paper")),
    (
        ("FedNCF", "lastfm-2k", "strict"),
        ("FedNCF", "ml-100k", "paper"),
        ("FedRAP", "lastfm-2k", "strict"),
        ("FedRAP", "lastfm-2k", "paper"),
        ("FedRecGEL", "lastfm-2k", "strict"),
    ),
)


def sam_cells(
    methods: tuple[str, ...] | None = None,
    datasets: tuple[str, ...] = DATASETS,
    protocols: tuple[str, ...] = PROTOCOLS,
    seeds: tuple[int, ...] = SEEDS,
    tiers: int = len(COST_TIERS),
) -> list[SamCell]:
    """The cells asked for, in :data:`COST_TIERS` order (without SAM, then with), of the
    first ``tiers`` tiers."""
    return [
        SamCell(method, sam, dataset, protocol, seed)
        for tier in COST_TIERS[:tiers]
        for seed in seeds
        for method, dataset, protocol in tier
        if (methods is None or method in methods) and dataset in datasets and protocol in protocols
        for sam in (False, True)
    ]


def sam_radii(cell: SamCell) -> dict[str, float]:
    """The SAM radii of a cell's preset (a SAM cell's: those its pair is measured at)."""
    config = resolve(runner.preset_path(cell.cell.row))
    return {
        "private": float(config.get("sam-rho-private", 0.0)),
        "shared": float(config.get("sam-rho-shared", 0.0)),
    }


def state_folder(cell: SamCell, runs: Path, work: Path) -> Path | None:
    """Where the cell's best-round model is, if it is anywhere yet."""
    for folder in (runs / cell.name, work / cell.name):
        if has_state(folder):
            return folder
    return None


def ensure_state(
    cell: SamCell, runs: Path, work: Path, data_dir: str | Path, nodes: int = 2
) -> tuple[Path, str]:
    """(the folder holding the cell's best state, how it got there): ``found``, ``replayed``
    (a committed run, replayed into ``work``), ``run`` (a new cell in ``runs``) or
    ``continued`` (an unfinished one, from its last checkpoint: bit-identical)."""
    found = state_folder(cell, runs, work)
    if found is not None:
        return found, "found"
    folder = runs / cell.name
    if (folder / "summary.json").exists():
        return replay(folder, work, data_dir), "replayed"
    config = runner.run_config(cell.cell, runs, data_dir, None, dict(RECORDED))
    status = ""
    if runner.checkpoint_round(folder):
        status = runner.run_federated({**config, "resume": str(folder.resolve())}, nodes, False)
    if status == "finished:completed":
        runner.scrub_paths(runs, only=(cell.name,))
        return folder, "continued"
    if folder.exists():  # an unfinished new cell that cannot continue: run it again
        runner.set_aside(folder)
    status = runner.run_federated(config, nodes, use_flwr=False)
    runner.scrub_paths(runs, only=(cell.name,))
    if status != "finished:completed":
        raise RuntimeError(f"{cell.name}: {status}")
    return folder, "run"
