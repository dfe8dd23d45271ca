"""``ncf-dense-init``: nn.Linear's default init of NeuMF's dense layers, or that of
FedRecGEL's reference code (Xavier / Kaiming uniform weights, zero biases)."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.methods import build_method
from fedrec_flwr.methods.fedncf import NcfKeys


def dense(init: str, seed: int = 0) -> dict[str, np.ndarray]:
    config = RunConfig.from_fields(
        method="fedrecgel",
        embedding_dim=32,
        ncf_mlp_dim=128,
        ncf_layers="128,64,32",
        ncf_dense_init=init,
        sam_rho_private=0.01,
        sam_rho_shared=0.01,
        seed=seed,
    )
    return build_method(config, num_items=50).init_dense()


def test_the_default_is_pytorch_and_the_reference_keeps_names_and_shapes():
    default = RunConfig.from_fields(method="fedrecgel")
    assert default.group(NcfKeys).ncf_dense_init == "pytorch"
    pytorch, reference = dense("pytorch"), dense("reference")
    assert {k: v.shape for k, v in pytorch.items()} == {k: v.shape for k, v in reference.items()}
    assert pytorch["mlp-0-bias"].any() and not reference["mlp-0-bias"].any()


def test_the_reference_init_matches_the_reference_codes_bounds():
    # The reference's server model: a tower 256 -> 128 -> 64 -> 32 and an output layer 64 -> 1.
    params = dense("reference")
    tower = nn.Sequential(nn.Linear(256, 128), nn.Linear(128, 64), nn.Linear(64, 32))
    predict = nn.Linear(64, 1)
    for m in tower:
        nn.init.xavier_uniform_(m.weight)
    nn.init.kaiming_uniform_(predict.weight, a=1, nonlinearity="sigmoid")
    theirs = [*(m.weight for m in tower), predict.weight]
    ours = [params[f"mlp-{i}-weight"] for i in range(3)] + [params["out-weight"][:, None]]
    for mine, their in zip(ours, theirs, strict=True):
        fan_out, fan_in = their.shape
        bound = math.sqrt(3 / fan_in) if fan_out == 1 else math.sqrt(6 / (fan_in + fan_out))
        assert mine.shape == (fan_in, fan_out)  # stored as [in, out]
        assert np.abs(mine).max() <= bound and torch.abs(their).max().item() <= bound
        assert np.abs(mine).max() > 0.95 * bound  # uniform over the whole range
        # the same distribution: the standard deviation of U(-b, b) is b / sqrt(3)
        assert np.std(mine) == pytest.approx(bound / math.sqrt(3), rel=0.25)
    for name in ("mlp-0-bias", "mlp-1-bias", "mlp-2-bias", "out-bias"):
        assert not params[name].any()
    assert not np.array_equal(params["mlp-0-weight"], dense("reference", seed=1)["mlp-0-weight"])


def test_an_unknown_init_is_refused():
    with pytest.raises(ConfigError, match="reference"):
        RunConfig.from_mapping({"method": "fedrecgel", "ncf-dense-init": "xavier"})
