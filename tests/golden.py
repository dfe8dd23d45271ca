"""Golden regression runs: one short fixed-seed run per method preset family, whose numbers
are stored in ``tests/golden.json`` and checked by ``tests/test_golden.py``, so that a silent
change to any number fails CI.

Each family takes the method keys of its ``conf/<family>-ml100k-strict.toml`` preset (and
``pfedrec-paper`` those of ``conf/pfedrec-ml100k-paper.toml``, for the paper protocol's code;
a family ending in ``-counter`` is its base family under ``negative-sampler = "counter"``)
but runs on the synthetic dataset (40 users x 300 items), 3 rounds, in-process on 2 nodes
(the real ServerApp and ClientApp through :class:`~fedrec_lab.local_grid.LocalGrid`).
Recorded: the train loss of every round (None for a method without one: the item-item
models) and the validation and test metrics of the last round.

When a change of the numbers is intended (a fix, a new default), regenerate and commit the
file, saying why in the commit message:

    python tests/golden.py --update      # rewrite tests/golden.json
    python tests/golden.py               # compare only (what the test does), print differences
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import tempfile
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).with_name("golden.json")
REGENERATE = "python tests/golden.py --update"


def shipped_families() -> tuple[str, ...]:
    """The recorded families, in the order of golden.json: those each shipped method's card
    names (``MethodCard.golden_families``: its own preset, then its plug-in and protocol
    variants), the methods in registry order."""
    from fedrec_flwr.methods import methods

    return tuple(
        family
        for card in methods().values()
        if card.method.__module__.startswith("fedrec_flwr.")
        for family in card.golden_families
    )


FAMILIES = shipped_families()
#: A family whose name ends so runs its base family with ``negative-sampler = "counter"``
#: (the round's draws, shuffles and batch plan from the keyed Philox stream).
COUNTER = "-counter"
SYNTHETIC = {
    "dataset": "synthetic",
    "synthetic-users": 40,
    "synthetic-items": 300,
    "synthetic-mean-degree": 10,
    "num-server-rounds": 3,
    "seed": 0,
}
NUM_NODES = 2
REL = 1e-6  # float reductions may differ in the last bits on another CPU; a real change won't


def preset(family: str) -> Path:
    family = family.removesuffix(COUNTER)
    name, protocol = (
        family.removesuffix("-paper"),
        "paper" if family.endswith("-paper") else "strict",
    )
    return PROJECT / "conf" / f"{name}-ml100k-{protocol}.toml"


def run_family(family: str, folder: Path) -> dict:
    """Run one family; return its recorded numbers."""
    from fedrec_flwr.client_app import app as client_app
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.server_app import run_federation
    from fedrec_lab.local_grid import LocalGrid
    from fedrec_lab.presets import resolve

    mapping = {
        **resolve(preset(family)),
        **SYNTHETIC,
        "results-dir": str(folder),
        "run-name": family,
    }
    if family.endswith(COUNTER):
        mapping["negative-sampler"] = "counter"
    config = RunConfig.from_mapping(mapping)
    run_federation(LocalGrid(client_app, config.to_mapping(), num_nodes=NUM_NODES), config)
    with open(folder / family / "rounds.csv") as f:
        rows = list(csv.DictReader(f))
    last = rows[-1]
    return {
        "train-loss": [float(r["train-loss"]) if r["train-loss"] else None for r in rows],
        "last-round": {
            name: float(value)
            for name, value in last.items()
            if name.startswith(("val-", "test-")) and value != ""
        },
    }


def run_all(families=FAMILIES) -> dict[str, dict]:
    """Every family, in a private cache and results folder."""
    with tempfile.TemporaryDirectory() as tmp:
        old = os.environ.get("FEDREC_CACHE_DIR")
        os.environ["FEDREC_CACHE_DIR"] = str(Path(tmp) / "cache")
        try:
            return {family: run_family(family, Path(tmp) / "results") for family in families}
        finally:
            if old is None:
                os.environ.pop("FEDREC_CACHE_DIR")
            else:
                os.environ["FEDREC_CACHE_DIR"] = old


def differences(family: str, expected: dict, got: dict) -> list[str]:
    """Human-readable differences beyond ``REL`` (relative), one line per number."""
    out = []

    def same(a: float | None, b: float | None) -> bool:  # None: no loss (item-item)
        if a is None or b is None:
            return a is b
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)

    if len(expected["train-loss"]) != len(got["train-loss"]):
        out.append(
            f"{family}: {len(got['train-loss'])} rounds ran, golden has "
            f"{len(expected['train-loss'])}"
        )
    for index, (a, b) in enumerate(zip(expected["train-loss"], got["train-loss"], strict=False)):
        if not same(a, b):
            out.append(f"{family}: train-loss of round {index + 1}: golden {a!r}, now {b!r}")
    names = sorted(set(expected["last-round"]) | set(got["last-round"]))
    for name in names:
        a, b = expected["last-round"].get(name), got["last-round"].get(name)
        if a is None or b is None or not same(a, b):
            out.append(f"{family}: {name} of the last round: golden {a!r}, now {b!r}")
    return out


def message(lines: list[str]) -> str:
    return (
        "golden regression numbers changed:\n  "
        + "\n  ".join(lines)
        + f"\nIf the change is intended, regenerate with `{REGENERATE}` and commit "
        "tests/golden.json, saying why in the commit message."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="rewrite tests/golden.json")
    parser.add_argument("families", nargs="*", default=list(FAMILIES))
    args = parser.parse_args()
    got = run_all(tuple(args.families))
    if args.update:
        stored = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        stored = {family: stored[family] for family in FAMILIES if family in stored}
        stored.update(got)
        record = {family: stored[family] for family in FAMILIES if family in stored}
        GOLDEN.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {GOLDEN} ({', '.join(got)})")
        return 0
    expected = json.loads(GOLDEN.read_text())
    lines = [line for family in got for line in differences(family, expected[family], got[family])]
    print(message(lines) if lines else "golden numbers reproduced")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
