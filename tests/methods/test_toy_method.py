"""Adding a method is one module: the toy method of its own package (``tests/toy_method``),
registered at run time, then validated, federated, tuned and listed by the audit like a
built-in one, and held to the whole conformance suite (``docs/adding-a-method.md`` walks
through it). Installed, the package is found through its entry point instead
(``tests/apps/test_out_of_tree_method.py``)."""

from __future__ import annotations

from typing import ClassVar

import pytest
from fedrec_toy import CARD, ToyKeys, ToyMF

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.methods import method_card, register_method, unregister_method
from fedrec_flwr.schema import Dim
from fedrec_flwr.server_app import run_federation
from fedrec_lab.audit.command import config_keys
from fedrec_lab.audit.run import auditable_methods
from fedrec_lab.local_grid import LocalGrid
from fedrec_lab.testing import TINY, MethodConformance
from fedrec_lab.tuning import space_for


@pytest.fixture(autouse=True, scope="module")
def toy_registered():
    """The toy method is registered for this module's tests only."""
    register_method(CARD)
    yield
    unregister_method(CARD.name)


def test_config_validation_accepts_it_and_its_keys():
    config = RunConfig.from_mapping({"method": "toy", "toy-temperature": 2, "toy-bias": False})
    keys = config.group(ToyKeys)
    assert (config.method_name, keys.toy_temperature, keys.toy_bias) == ("toy", 2.0, False)
    assert method_card("toy") is CARD and CARD.method is ToyMF
    # A registered group has its defaults in every config, one made before it too.
    assert RunConfig().group(ToyKeys) == ToyKeys(toy_temperature=1.0, toy_bias=True)


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
