"""Adding a method is one module: a toy method defined in this file alone, registered at run
time, then validated, federated, tuned and listed by the audit like a built-in one, and held
to the whole conformance suite (``docs/adding-a-method.md`` walks through this file)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
import torch
from conformance import TINY, MethodConformance

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.methods import (
    ROWS,
    Method,
    Step,
    method_card,
    register_method,
    unregister_method,
)
from fedrec_flwr.methods.base import bce_grad, linear_logits, linear_logits_all, user_normal
from fedrec_flwr.methods.card import ITEM_LR, LR, AuditImitation, MethodCard
from fedrec_flwr.schema import POSITIVE, Dim, Key, KeyGroup
from fedrec_flwr.server_app import run_federation
from fedrec_lab.audit.command import config_keys
from fedrec_lab.audit.run import auditable_methods
from fedrec_lab.local_grid import LocalGrid
from fedrec_lab.tuning import space_for

USER, BIAS = "toy-user", "toy-bias"

TOY_KEYS = KeyGroup(
    title="Toy",
    owner=__name__,
    keys=(
        Key(
            "toy-temperature",
            1.0,
            "the toy method's scores are divided by it",
            range=POSITIVE,
        ),
        Key("toy-bias", True, "`true`: each user trains a private bias; `false`: none"),
    ),
)


class ToyMF(Method):
    """Matrix factorisation with an optional private user bias, its scores divided by a
    temperature (``toy-temperature``)."""

    name = "toy"
    rowwise_logits = True  # linear_logits: a product and a sum over each row

    def init_private(self, users: np.ndarray) -> dict[str, torch.Tensor]:
        """User vectors ~ N(0, init-std^2), keyed by (seed, user); biases 0."""
        params = {USER: torch.from_numpy(user_normal(self.config, users, self.dim, key=9))}
        if self.config.toy_bias:
            params[BIAS] = torch.zeros(len(users))
        return params

    def logits(self, params: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        scores = linear_logits(rows, params[USER], params.get(BIAS))
        return scores / self.config.toy_temperature

    def logits_all(self, params: dict[str, torch.Tensor], table: torch.Tensor) -> torch.Tensor:
        scores = linear_logits_all(table, params[USER], params.get(BIAS))
        return scores / self.config.toy_temperature

    def closed_form_grads(self, step: Step, params, rows, wrt):
        """The BCE's gradients by hand (autograd's, which the conformance suite checks)."""
        logits = self.logits(params, rows)
        grad_logits = bce_grad(logits, step) / self.config.toy_temperature
        grads = {}
        if USER in wrt:
            grads[USER] = (grad_logits.unsqueeze(-1) * rows).sum(1)
        if BIAS in wrt:
            grads[BIAS] = grad_logits.sum(-1)
        if ROWS in wrt:
            grads[ROWS] = grad_logits.unsqueeze(-1) * params[USER].unsqueeze(1)
        return grads, logits


CARD = MethodCard(
    ToyMF,
    title="Toy",
    paper="a toy method, defined in tests/methods/test_toy_method.py",
    keys=TOY_KEYS,
    search_space={"lr": LR, "item-lr": ITEM_LR, "toy-temperature": Dim(0.25, 4.0)},
    # At temperature 1, FedMF with a bias: the audit's shadow steps user and rows jointly.
    audit=AuditImitation(update="joint", head="random", train_bias=True, ldp_clip=3.0),
)


@pytest.fixture(autouse=True, scope="module")
def toy_registered():
    """The toy method is registered for this module's tests only."""
    register_method(CARD)
    yield
    unregister_method(CARD.name)


def test_config_validation_accepts_it_and_its_keys():
    config = RunConfig.from_mapping({"method": "toy", "toy-temperature": 2, "toy-bias": False})
    assert (config.method, config.toy_temperature, config.toy_bias) == ("toy", 2.0, False)
    assert method_card("toy") is CARD and CARD.method is ToyMF
    assert RunConfig().toy_temperature == 1.0  # a registered key has its default everywhere


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"toy-temperature": 0.0}, r"toy-temperature=0.0 must be > 0"),
        ({"toy-temperature": "hot"}, r"'toy-temperature' must be of type float"),
        ({"toy-bias": "yes"}, r"'toy-bias' must be of type bool"),
        ({"toy-temprature": 2.0}, r"did you mean 'toy-temperature'"),
        ({"personalization": "dual"}, r"does not apply to method 'toy'"),
        ({"plgc": True}, r"plgc = true needs a method with personal item rows; method 'toy'"),
    ],
)
def test_config_validation_rejects_bad_values_saying_what_to_do(mapping, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_mapping({"method": "toy", **mapping})


def test_one_federated_round_runs_in_process(tmp_path):
    run_config = {
        **TINY,
        "method": "toy",
        "toy-temperature": 0.5,
        "num-server-rounds": 1,
        "results-dir": str(tmp_path / "results"),
    }
    grid = LocalGrid(client_app, run_config, num_nodes=2)
    summary = run_federation(grid, RunConfig.from_mapping(run_config))
    assert summary["rounds"] == 1
    (run_dir,) = (tmp_path / "results").iterdir()
    header, row = (run_dir / "rounds.csv").read_text().splitlines()
    values = dict(zip(header.split(","), row.split(","), strict=True))
    assert int(values["train-users"]) == TINY["synthetic-users"]
    assert float(values["train-loss"]) > 0 and 0 <= float(values["val-hr@10"]) <= 1


def test_its_tuning_space_is_listed():
    space = space_for({"method": "toy"})
    assert list(space) == ["lr", "item-lr", "toy-temperature"]
    assert space["toy-temperature"] == Dim(0.25, 4.0)


def test_it_appears_in_the_audits_method_listing():
    assert "toy" in auditable_methods()
    assert config_keys("ldp", "toy", {}, {})["ldp-clip"] == 3.0


class TestToyMF(MethodConformance):
    """The whole conformance suite, inherited."""

    config: ClassVar = {"method": "toy", "toy-temperature": 0.5}


class TestToyMFWithoutBias(MethodConformance):
    config: ClassVar = {"method": "toy", "toy-bias": False}
