"""The audit's Flower-free round loop gives the metrics of the Flower run it stands for."""

from __future__ import annotations

import csv

import pytest
from flower_rounds import SMALL

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.server_app import run_federation
from fedrec_lab.audit.loop import run_plain
from fedrec_lab.local_grid import LocalGrid

pytestmark = pytest.mark.usefixtures("private_cache")


@pytest.mark.parametrize(
    "keys",
    [
        {"method": "pfedrec", "item-lr": 8.0},
        {"method": "fedmf", "protocol": "paper", "init-std": 0.1, "lr": 2.0, "item-lr": 1.0},
        {"method": "pfedrec", "ldp-mechanism": "gaussian", "ldp-clip": 5.0, "decoy-ratio": 1.0},
        {"method": "pfedrec", "protocol": "paper", "ldp-laplace-lambda": 0.3},
        {"method": "fedmf", "ldp-mechanism": "laplace", "ldp-clip": 0.5, "ldp-denoise": True},
        # shared-dense parameters through the server's Adam
        {"method": "fedncf", "server-optimizer": "adam", "server-lr": 0.01, "item-lr": 1.0},
        # a sparse method (zero threshold) under the toucher-mean rule
        {"method": "fedrap", "init-std": 0.1, "aggregation": "toucher-mean"},
    ],
)
def test_the_plain_loop_reproduces_the_flower_run(tmp_path, keys):
    config = RunConfig.from_mapping({**SMALL, **keys, "results-dir": str(tmp_path)})
    summary = run_federation(LocalGrid(client_app, config.to_mapping(), num_nodes=3), config)
    plain = run_plain(config, prepare(config))
    assert plain["best_round"] == summary["best_round"]
    for name, value in summary["test"].items():
        assert plain["test"][name] == pytest.approx(value, rel=1e-9, abs=1e-12)
    with open(next(tmp_path.glob("*/rounds.csv"))) as f:
        rows = list(csv.DictReader(f))
    for row, mine in zip(rows, plain["history"], strict=True):
        assert float(row["val-hr@10"]) == pytest.approx(mine["val-hr@10"], abs=1e-12)
