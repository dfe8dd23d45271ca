"""``eval-loss`` (the generalization gap per round) and ``keep-best-state`` (the best round's
model on disk) end to end in-process: they add figures and files, and change no metric."""

import csv
import json

import numpy as np
import pytest

from fedrec_flwr import atomic
from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.node.state import NodeState
from fedrec_flwr.server.checkpoint import BEST_FOLDER, BEST_POINTER
from fedrec_flwr.server_app import run_federation
from fedrec_lab.local_grid import LocalGrid

SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 24,
    "synthetic-items": 300,
    "synthetic-mean-degree": 12,
    "num-server-rounds": 4,
    "batch-size": 32,
    "item-lr": 0.5,
}

pytestmark = pytest.mark.usefixtures("private_cache")


def run(folder, nodes=2, **overrides):
    run_config = {**SMALL, "results-dir": str(folder), **overrides}
    grid = LocalGrid(client_app, run_config, num_nodes=nodes)
    summary = run_federation(grid, RunConfig.from_mapping(run_config))
    (run_dir,) = folder.iterdir()
    with open(run_dir / "rounds.csv", newline="") as f:
        return summary, run_dir, list(csv.DictReader(f))


@pytest.mark.parametrize("method", ["pfedrec", "fedmf", "fedrap"])
@pytest.mark.parametrize("protocol", ["paper", "strict"])
def test_eval_loss_adds_the_gap_and_changes_no_metric(tmp_path, method, protocol):
    plain, _, plain_rows = run(tmp_path / "plain", method=method, protocol=protocol)
    lossy, _, rows = run(tmp_path / "loss", method=method, protocol=protocol, **{"eval-loss": True})
    assert lossy["test"] == plain["test"] and lossy["best_round"] == plain["best_round"]
    for row, before in zip(rows, plain_rows, strict=True):
        for name in before:
            if name.startswith(("val-", "test-", "train-loss")):
                assert row[name] == before[name], name
        fit, val, gap = (float(row[k]) for k in ("fit-loss", "val-loss", "gap"))
        assert fit > 0 and val > 0 and gap == pytest.approx(val - fit)
    assert "gap" not in plain_rows[0]
    # training fits the train positives better than the held-out one, in the end
    assert float(rows[-1]["gap"]) > 0


def test_the_losses_do_not_depend_on_the_packing(tmp_path):
    _, _, one = run(tmp_path / "one", nodes=1, **{"eval-loss": True})
    _, _, many = run(tmp_path / "many", nodes=5, **{"eval-loss": True})
    for a, b in zip(one, many, strict=True):
        for name in ("fit-loss", "val-loss"):
            assert float(a[name]) == pytest.approx(float(b[name]), rel=1e-9)


@pytest.mark.parametrize("method", ["pfedrec", "fedncf"])
def test_the_best_state_is_the_best_rounds_model(tmp_path, method):
    summary, run_dir, _ = run(tmp_path / "run", method=method, **{"keep-best-state": True})
    folder = run_dir / BEST_FOLDER
    pointer = json.loads((folder / BEST_POINTER).read_text())
    assert pointer["round"] == summary["best_round"]
    meta, arrays = atomic.load_tagged(folder / "server.npz")
    assert meta["round"] == summary["best_round"]
    assert arrays["eval-table"].shape == (300, arrays["table"].shape[1])
    nodes = sorted((folder / pointer["nodes"]).glob("partition-*.npz"))
    assert [p.name for p in nodes] == ["partition-0.npz", "partition-1.npz"]
    tag, state = atomic.load_tagged(nodes[0])
    assert tag["after-round"] == summary["best_round"]
    assert NodeState.from_arrays(state).private  # the users' private parameters
    assert not list(folder.glob("round-*"))[1:]  # only the best round's folder is kept
    assert not (run_dir / "checkpoint").exists()  # the checkpoints go when the run ends


def test_keep_best_state_changes_no_metric(tmp_path):
    plain, _, _ = run(tmp_path / "plain")
    kept, _, _ = run(tmp_path / "kept", **{"keep-best-state": True})
    assert plain["test"] == kept["test"] and plain["val"] == kept["val"]
    assert np.isfinite(kept["test"]["hr@10"])
