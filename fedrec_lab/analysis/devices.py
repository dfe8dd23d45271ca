"""Where the SAM table's runs were trained, from each run's recorded configuration.

A run's ``config.json`` holds its ``device`` key (``cpu``, ``cuda``, ``cuda:N``). Float
arithmetic on the CPU and on CUDA differs in the last digits, so a pair (without SAM, with
SAM) whose two runs were trained on different devices measures the device as well as SAM.
The table names each side's devices and, under it, the pairs that mix them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedrec_flwr.config import RunConfig

#: The device of a run whose configuration predates the ``device`` key: its default.
DEFAULT = next(str(k.default) for k in RunConfig.declared_keys() if k.name == "device")


def run_device(run_dir: Path) -> str:
    """The device a finished run trained on: ``cpu`` or ``cuda`` (any ``cuda:N``)."""
    config_file = Path(run_dir) / "config.json"
    if not config_file.exists():
        raise FileNotFoundError(
            f"{config_file}: missing; a run folder holds the config.json its run wrote "
            "(the table names the device each run was trained on from it)"
        )
    device = str(json.loads(config_file.read_text()).get("device", DEFAULT))
    return "cuda" if device.startswith("cuda") else device


def mixed_seeds(devices: dict[str, list[str]], seeds: list[int]) -> list[dict[str, Any]]:
    """The seeds whose two runs were trained on different devices, with each side's."""
    return [
        {"seed": seed, "without": a, "with": b}
        for seed, a, b in zip(seeds, devices["without"], devices["with"], strict=True)
        if a != b
    ]


def mixed_text(mixed: list[dict[str, Any]], after_seed: str, between: str) -> str:
    """``mixed_seeds``' entries as text: ``seed 0<after_seed>without SAM on cpu, with SAM
    on cuda``, joined by ``between``."""
    return between.join(
        f"seed {m['seed']}{after_seed}without SAM on {m['without']}, with SAM on {m['with']}"
        for m in mixed
    )


def cell(r: dict[str, Any]) -> str:
    """A row's devices, without SAM / with SAM: one name per side when all its runs share
    it, else one per seed (``cpu / cuda``, ``cpu / cuda, cpu``)."""

    def side(names: list[str]) -> str:
        return names[0] if len(set(names)) == 1 else ", ".join(names)

    return f"{side(r['devices']['without'])} / {side(r['devices']['with'])}"


def lines(rows: list[dict[str, Any]], names: dict[str, str]) -> list[str]:
    """The note under the table: the pairs whose runs mix devices, or that none do."""
    flagged = [r for r in rows if r["mixed_devices"]]
    if not flagged:
        return ["", "Devices: each pair's two runs were trained on the same device."]

    which = "; ".join(
        f"{r['method']} {names[r['dataset']]} {r['protocol']} "
        f"({mixed_text(r['mixed_devices'], ': ', ', ')})"
        for r in flagged
    )
    return [
        "",
        f"Devices (each run's `config.json`): {len(flagged)} of {len(rows)} rows pair runs "
        f"trained on different devices: {which}. Float arithmetic on the CPU and on CUDA "
        "differs in the last digits, so such a pair's two runs differ by their device as well "
        "as by SAM, and so may its difference; every other pair's two runs were trained on "
        "the same device.",
    ]
