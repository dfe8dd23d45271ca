"""The run configuration rejects what cannot work, with a message that says what to do."""

import tomllib

import pytest

from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_lab.launch import PROJECT
from fedrec_lab.presets import resolve


def test_pyproject_defaults_are_the_dataclass_defaults():
    pyproject = tomllib.loads((PROJECT / "pyproject.toml").read_text())
    defaults = pyproject["tool"]["flwr"]["app"]["config"]
    assert RunConfig.from_mapping(defaults) == RunConfig()
    assert sorted(defaults) == sorted(RunConfig.key_names())  # every key is declared in pyproject


def test_every_key_is_documented_in_the_readme():
    readme = (PROJECT / "README.md").read_text()
    for key in RunConfig.key_names():
        assert f"| `{key}` |" in readme, key


@pytest.mark.parametrize("preset", sorted((PROJECT / "conf").glob("*.toml")), ids=lambda p: p.name)
def test_presets_are_valid(preset):
    RunConfig.from_mapping(resolve(preset))


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"num-server-round": 3}, "did you mean 'num-server-rounds'"),
        ({"method": "pfedrc"}, "did you mean 'pfedrec'"),
        ({"dataset": "ml100k"}, "Choose one of"),
        ({"lr": "fast"}, "'lr' must be of type float"),
        ({"num-server-rounds": 2.5}, "must be of type int"),
        ({"fraction-train": 0.0}, "fraction-train"),
        ({"batch-size": 0}, "batch-size=0 must be > 0"),
        ({"aggregation": "mean"}, "round-mean, toucher-mean"),
        ({"device": "tpu"}, "use 'cpu', 'cuda'"),
        ({"dataset": "synthetic", "synthetic-mean-degree": 2}, ">= 5"),
        ({"fault-fraction": 1.0}, r"fault-fraction=1.0 must be in \[0, 1\)"),
        ({"fault-fraction": -0.1}, r"must be in \[0, 1\)"),
        ({"fault-mode": "hang"}, "Choose one of: crash, timeout"),
    ],
)
def test_bad_values_fail_early_with_a_hint(mapping, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_mapping(mapping)


def test_integers_are_accepted_for_floats():
    config = RunConfig.from_mapping({"lr": 1, "item-lr": 2})
    assert config.lr == 1.0 and isinstance(config.lr, float)
    assert config.item_learning_rate(100) == 200.0
    assert RunConfig.from_mapping({"item-lr-scaling": "none", "item-lr": 3}).item_learning_rate(
        100
    ) == pytest.approx(3.0)
