"""The CUDA path (``device = "cuda"``): runs when PyTorch sees a GPU, skipped otherwise.

Packed (all users in one node) and one-by-one (one user per node) runs must agree on CUDA as
they do on the CPU (with ``cuda-deterministic``, the default); CUDA and CPU runs of the same
seed agree within float32 rounding; every method and plug-in runs on the GPU.
``FEDREC_TEST_DEVICE=cpu`` runs the same tests on the CPU (to check the tests themselves).
"""

import csv
import math
import os

import pytest
import torch

from fedrec_flwr.client import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.local_grid import LocalGrid
from fedrec_flwr.server import run_federation

DEVICE = os.environ.get("FEDREC_TEST_DEVICE", "cuda")

pytestmark = [
    pytest.mark.skipif(
        DEVICE.startswith("cuda") and not torch.cuda.is_available(),
        reason="no CUDA GPU visible to PyTorch",
    ),
    pytest.mark.usefixtures("private_cache"),
]

SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 30,
    "synthetic-items": 400,
    "synthetic-mean-degree": 12,
    "num-server-rounds": 3,
    "batch-size": 32,
    "item-lr": 0.5,
}

#: Each method and plug-in, as the presets combine them.
VARIANTS = {
    "pfedrec": {"method": "pfedrec"},
    "fedmf": {"method": "fedmf"},
    "fedncf": {"method": "fedncf"},
    "fedrecon": {"method": "fedrecon"},
    "fedrecgel": {"method": "fedrecgel", "sam-rho-private": 0.01, "sam-rho-shared": 0.01},
    "fedrap": {"method": "fedrap", "fedrap-zero-threshold": 0.001},
    "pfedrec-plgc": {"method": "pfedrec", "plgc": True, "plgc-decorrelation": 0.001},
    "fedmf-dual": {"method": "fedmf", "personalization": "dual"},
    "pfedrec-sam": {"method": "pfedrec", "sam-rho-private": 0.05, "sam-rho-shared": 0.05},
}


def rounds(tmp_path, nodes, **overrides) -> list[dict[str, str]]:
    config = {**SMALL, "results-dir": str(tmp_path / "results"), **overrides}
    run_federation(LocalGrid(client_app, config, num_nodes=nodes), RunConfig.from_mapping(config))
    (run_dir,) = (tmp_path / "results").iterdir()
    with open(run_dir / "rounds.csv") as f:
        return list(csv.DictReader(f))


def figures(rows: list[dict[str, str]]) -> dict[str, list[float]]:
    names = [n for n in rows[0] if n.startswith(("val-", "test-", "train-loss"))]
    return {n: [float(r[n]) for r in rows] for n in names}


@pytest.mark.parametrize("method", ["pfedrec", "fedmf"])
@pytest.mark.parametrize("protocol", ["paper", "strict"])
def test_packed_equals_one_by_one_on_cuda(tmp_path, method, protocol):
    packed = figures(rounds(tmp_path / "1", 1, method=method, protocol=protocol, device=DEVICE))
    alone = figures(rounds(tmp_path / "30", 30, method=method, protocol=protocol, device=DEVICE))
    for name, values in packed.items():
        assert alone[name] == pytest.approx(values, rel=1e-9, abs=1e-12), name
    assert packed["val-hr@10"][-1] > 0


@pytest.mark.parametrize("method", ["pfedrec", "fedmf"])
def test_cuda_agrees_with_cpu_within_float32_rounding(tmp_path, method):
    cpu = figures(rounds(tmp_path / "cpu", 1, method=method))
    gpu = figures(rounds(tmp_path / "gpu", 1, method=method, device=DEVICE))
    # Round 1 starts from the same parameters: only the order of float32 sums differs.
    assert gpu["train-loss"][0] == pytest.approx(cpu["train-loss"][0], rel=1e-5)
    for name in ("train-loss", "test-hr@10", "val-hr@10"):
        assert gpu[name][-1] == pytest.approx(cpu[name][-1], rel=0.05, abs=0.05), name


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_method_and_plug_in_runs_on_cuda(tmp_path, variant):
    rows = rounds(tmp_path, 3, device=DEVICE, **{"num-server-rounds": 2, **VARIANTS[variant]})
    assert len(rows) == 2
    assert all(math.isfinite(float(r["train-loss"])) for r in rows)
    assert 0.0 <= float(rows[-1]["test-hr@10"]) <= 1.0
