"""Adding a stage is one declaration: a toy stage defined in this file alone (it rounds every
user's uploaded rows to a grid whose step is its own run-config key), registered at run time,
composes with the built-in methods and plug-ins in an in-process federation; unregistered,
the uploads are as trained and its key is unknown (``docs/adding-a-stage.md`` walks through
this file)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.messages import ARRAYS, record_arrays
from fedrec_flwr.methods import PLUGINS, Plugin, register_plugin, unregister_plugin
from fedrec_flwr.schema import POSITIVE, Group, key
from fedrec_flwr.server_app import run_federation
from fedrec_flwr.stages import UploadRound, Uploads, UploadStage
from fedrec_lab.local_grid import LocalGrid
from fedrec_lab.testing import TINY

#: The grid's spacing: a power of two, so that sums of rounded rows stay on the grid exactly.
STEP = 2.0**-6


class GridKeys(Group):
    title = "Grid rounding (a toy stage)"

    grid_step: float = key(default=STEP, help="the grid's spacing", range=POSITIVE)


class GridRounding(UploadStage):
    """Each user's uploaded rows rounded to multiples of ``step``, on their device."""

    name = "grid"

    def __init__(self, step: float) -> None:
        self.step = step

    def transform(self, uploads: Uploads, upload_round: UploadRound) -> Uploads:
        return uploads.replace(rows=torch.round(uploads.rows / self.step) * self.step)


GRID = Plugin(
    name="grid",
    paper="a toy stage, defined in tests/node/test_toy_stage.py",
    enabled=lambda config: True,  # on in every run while it is registered
    node=lambda config, data: GridRounding(config.group(GridKeys).grid_step),
    keys=(GridKeys,),
)


@pytest.fixture
def grid_rounding():
    register_plugin(GRID)
    yield GRID
    unregister_plugin(GRID.name)


def uploaded_rows(tmp_path, **keys) -> np.ndarray:
    """Every row sum the nodes uploaded in a one-round in-process federation on the tiny
    synthetic data (2 nodes, so each row sum adds several users' rows)."""
    run_config = {**TINY, **keys, "num-server-rounds": 1, "results-dir": str(tmp_path)}
    grid = LocalGrid(client_app, run_config, num_nodes=2, keep_messages=True)
    summary = run_federation(grid, RunConfig.from_mapping(run_config))
    assert summary["rounds"] == 1
    sums = [
        record_arrays(reply.content[ARRAYS])["row-sums"]
        for reply in grid.replies
        if reply.metadata.message_type == "train"
    ]
    assert len(sums) == 2  # one per node
    return np.concatenate(sums)


def on_grid(rows: np.ndarray, step: float = STEP) -> bool:
    return bool(np.all(np.asarray(rows, np.float64) / step == np.round(rows / step)))


@pytest.mark.parametrize(
    "keys",
    [
        {"method": "pfedrec"},
        {"method": "fedmf", "ldp-mechanism": "gaussian", "decoy-ratio": 1.0},
    ],
    ids=["pfedrec", "fedmf-ldp-decoys"],
)
def test_a_registered_stage_rounds_every_upload_of_two_methods(grid_rounding, tmp_path, keys):
    assert list(PLUGINS)[-1] == "grid"  # after the built-in ones: it rounds the noised rows
    rows = uploaded_rows(tmp_path, **keys)
    assert len(rows) and on_grid(rows)
    assert np.abs(rows).max() > STEP  # real rows, not all rounded away


def test_the_stage_reads_its_own_key_which_the_run_config_composes(grid_rounding, tmp_path):
    assert RunConfig().group(GridKeys) == GridKeys(grid_step=STEP)
    with pytest.raises(ConfigError, match=r"grid-step=0\.0 must be > 0"):
        RunConfig.from_mapping({"grid-step": 0.0})
    coarse = 2.0**-2
    rows = uploaded_rows(tmp_path, method="pfedrec", **{"grid-step": coarse})
    assert on_grid(rows, coarse) and np.abs(rows).max() > coarse


def test_unregistered_the_uploads_are_the_tuned_rows(tmp_path):
    assert "grid" not in PLUGINS
    assert not on_grid(uploaded_rows(tmp_path, method="pfedrec"))
    with pytest.raises(ConfigError, match="unknown run-config key 'grid-step'"):
        RunConfig.from_mapping({"grid-step": STEP})
