"""The run configuration: composed from the keys their owners declare, it rejects what cannot
work with a message that says what to do; pyproject.toml and the reference follow it."""

import copy
import pickle
import tomllib
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest
from golden import FAMILIES

from fedrec_flwr.config import ConfigError, RunConfig, key_groups
from fedrec_flwr.learning_keys import LearningKeys
from fedrec_flwr.methods import FedMF, MethodCard, methods, register_method, unregister_method
from fedrec_flwr.methods.plgc import PlgcKeys
from fedrec_flwr.node.optim import SamKeys
from fedrec_flwr.schema import POSITIVE, Group, key
from fedrec_lab import configref
from fedrec_lab.presets import resolve

PROJECT = Path(__file__).resolve().parents[2]


def test_pyproject_holds_every_key_with_its_default_in_order():
    pyproject = tomllib.loads((PROJECT / "pyproject.toml").read_text())
    table = pyproject["tool"]["flwr"]["app"]["config"]
    declared = RunConfig().to_mapping()
    assert list(table) == list(declared)
    assert [(type(v), v) for v in table.values()] == [(type(v), v) for v in declared.values()]
    assert RunConfig.from_mapping(table) == RunConfig()


def test_the_generated_files_are_up_to_date():
    assert configref.problems(PROJECT) == []
    reference = (PROJECT / configref.REFERENCE).read_text()
    for name in RunConfig.key_names():
        assert f"| `{name}` |" in reference, name


def test_each_key_is_declared_once_by_its_owner():
    owners = {key.name: group.owner for group in key_groups() for key in group.keys}
    assert len(owners) == len(RunConfig.key_names())
    assert owners["fedrap-v1"] == "fedrec_flwr.methods.fedrap"
    assert owners["plgc-alpha"] == "fedrec_flwr.methods.plgc"
    assert owners["sam-rho-shared"] == "fedrec_flwr.node.optim"
    assert owners["ldp-epsilon"] == "fedrec_flwr.privacy.ldp"
    assert owners["decoy-ratio"] == "fedrec_flwr.privacy.decoys"
    assert owners["synthetic-users"] == "fedrec_flwr.data.registry"


def test_every_method_has_a_golden_family():
    """Each method is recorded: its own preset, or (``golden_own`` False) its variants."""
    for name, card in methods().items():
        assert card.golden_families and set(card.golden_families) <= set(FAMILIES), name


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
        ({"init-std": 0.0}, "init-std=0.0 must be > 0"),
        ({"lr": -0.1}, "lr=-0.1 must be >= 0"),
        ({"seed": -1}, "seed=-1 must be >= 0"),
        ({"torch-threads": -1}, r"must be >= 0 \(0 = PyTorch's default\)"),
        ({"results-dir": ""}, "results-dir must not be empty"),
        ({"fedrap-v2": -1.0}, r"fedrap-v2=-1.0 must be >= 0 \(0 = off\)"),
        ({"fedrap-distance": "l1"}, "Choose one of: squared, bounded"),
        ({"plgc-alpha": "1.5"}, "must be 'ntk' or a number in"),
        ({"plgc-decorrelation": -1.0}, "plgc-decorrelation"),
        ({"dataset": "synthetic", "synthetic-items": 10}, "at least twice"),
    ],
)
def test_bad_values_fail_early_with_a_hint(mapping, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_mapping(mapping)


def test_integers_are_accepted_for_floats():
    config = RunConfig.from_mapping({"lr": 1, "item-lr": 2})
    assert config.learning.lr == 1.0 and isinstance(config.learning.lr, float)
    assert config.learning.item_learning_rate(100) == 200.0
    assert RunConfig.from_mapping(
        {"item-lr-scaling": "none", "item-lr": 3}
    ).learning.item_learning_rate(100) == pytest.approx(3.0)


def test_a_number_is_accepted_for_plgc_alpha():
    assert RunConfig.from_mapping({"plgc-alpha": 0.5}).group(PlgcKeys).plgc_alpha == "0.5"
    with pytest.raises(ConfigError, match="'plgc-persist' must be of type bool"):
        RunConfig.from_mapping({"plgc-persist": 1})


def test_the_synthetic_keys_are_checked_only_for_the_synthetic_dataset():
    assert RunConfig.from_mapping({"synthetic-users": 0}).value("synthetic-users") == 0
    with pytest.raises(ConfigError, match="synthetic-users=0 must be > 0"):
        RunConfig.from_mapping({"dataset": "synthetic", "synthetic-users": 0})


def test_a_config_is_a_frozen_value():
    config = RunConfig.from_mapping({"method": "fedmf", "lr": 0.5})
    assert config == RunConfig.from_fields(method="fedmf", lr=0.5) != RunConfig()
    assert hash(config) == hash(RunConfig.from_fields(method="fedmf", lr=0.5))
    assert pickle.loads(pickle.dumps(config)) == config == copy.deepcopy(config)
    assert config.replace(lr=0.25).learning.lr == 0.25 and config.learning.lr == 0.5
    with pytest.raises(FrozenInstanceError):
        config.lr = 1.0
    with pytest.raises(TypeError, match="unknown fields \\['learning_rate'\\]"):
        RunConfig.from_fields(learning_rate=0.1)
    with pytest.raises(ConfigError, match="server-lr only applies"):
        config.replace(server_lr=0.5)
    assert "method='fedmf'" in repr(config)


def test_a_key_is_read_through_its_group_not_as_an_attribute():
    config = RunConfig.from_mapping({"method": "fedmf", "lr": 0.5, "sam-rho-private": 0.1})
    assert config.learning.lr == config.group(LearningKeys).lr == config.value("lr") == 0.5
    assert config.group(SamKeys).sam_rho_private == config.value("sam-rho-private") == 0.1
    with pytest.raises(
        AttributeError,
        match=r"key 'sam-rho-private' is read through its group, "
        r"config\.group\(SamKeys\)\.sam_rho_private",
    ):
        config.sam_rho_private  # noqa: B018
    with pytest.raises(AttributeError, match="config\\.group\\(LearningKeys\\)\\.lr"):
        config.lr  # noqa: B018
    with pytest.raises(AttributeError, match="'RunConfig' object has no attribute 'no_such_key'"):
        config.no_such_key  # noqa: B018
    assert not hasattr(config, "lr")
    with pytest.raises(KeyError, match="unknown run-config key 'no-such-key'"):
        config.value("no-such-key")


class ScaledMF(FedMF):
    """A method declared after the config was composed, with a key of its own."""

    name = "scaled-mf"


class ScaledKeys(Group):
    title = "Scaled MF"

    scaled_mf_scale: float = key(default=2.0, help="a scale of the scores", range=POSITIVE)


SCALED_MF = MethodCard(ScaledMF, title="Scaled MF", paper="", keys=ScaledKeys)


def test_a_method_registered_later_brings_its_keys():
    before = RunConfig()
    register_method(SCALED_MF)
    try:
        config = RunConfig.from_mapping({"method": "scaled-mf", "scaled-mf-scale": 3})
        assert config.group(ScaledKeys).scaled_mf_scale == 3.0
        assert before.group(ScaledKeys).scaled_mf_scale == 2.0
        assert "scaled-mf-scale" in RunConfig.key_names()
        with pytest.raises(ConfigError, match=r"scaled-mf-scale=0.0 must be > 0"):
            config.replace(scaled_mf_scale=0.0)
    finally:
        unregister_method(ScaledMF.name)
    assert "scaled-mf-scale" not in RunConfig.key_names()
    with pytest.raises(ConfigError, match="unknown run-config key 'scaled-mf-scale'"):
        RunConfig.from_mapping({"scaled-mf-scale": 3.0})


# ------------------------------------------------------------ reference defaults
def test_fedrecgel_named_alone_takes_the_papers_radii():
    config = RunConfig.from_mapping({"method": "fedrecgel"})
    sam = config.group(SamKeys)
    assert (sam.sam_rho_private, sam.sam_rho_shared) == (0.01, 0.01)
    assert RunConfig.from_mapping(config.to_mapping()) == config  # config.json reads back


@pytest.mark.parametrize(
    ("mapping", "radii"),
    [
        ({"sam-rho-private": 0.3}, (0.3, 0.0)),  # one radius set: the other keeps its default
        ({"sam-rho-shared": 0.02}, (0.0, 0.02)),
        ({"sam-rho-private": 0.2, "sam-rho-shared": 0.01}, (0.2, 0.01)),
    ],
)
def test_radii_set_explicitly_win_over_the_reference_defaults(mapping, radii):
    config = RunConfig.from_mapping({"method": "fedrecgel", **mapping})
    sam = config.group(SamKeys)
    assert (sam.sam_rho_private, sam.sam_rho_shared) == radii


def test_explicit_zero_radii_are_fedrecgel_without_sam():
    """Both radii set to 0: FedRecGEL's round with plain SGD (the ablation preset's)."""
    from fedrec_flwr.methods import build_method
    from fedrec_flwr.node.optim import SGD, local_optimizer

    config = RunConfig.from_mapping(
        {"method": "fedrecgel", "sam-rho-private": 0.0, "sam-rho-shared": 0}
    )
    sam = config.group(SamKeys)
    assert (sam.sam_rho_private, sam.sam_rho_shared) == (0.0, 0.0)
    method = build_method(config, num_items=5)
    assert type(local_optimizer(method, config)) is SGD


def test_reference_defaults_fill_nothing_for_other_methods():
    for name in ("pfedrec", "fedncf", "fedmf"):
        config = RunConfig.from_mapping({"method": name})
        assert config == RunConfig.from_fields(method=name)
    assert RunConfig.from_mapping({}) == RunConfig()


def test_every_declared_reference_default_is_a_valid_key_value():
    keys = {key.name: key for key in RunConfig.declared_keys()}
    for name, card in methods().items():
        for values in card.reference_defaults:
            assert values and set(values) <= set(keys), (name, values)
            for key_name, value in values.items():
                keys[key_name].validate(keys[key_name].coerce(value))
            RunConfig.from_mapping({"method": name})  # named alone, it is accepted


def test_the_launcher_fills_them_before_pyprojects_defaults():
    from fedrec_lab.launch.run_config import merged_run_config, project_defaults

    config = merged_run_config(None, ["method='fedrecgel'"])
    assert config["sam-rho-private"] == 0.01 and config["sam-rho-shared"] == 0.01
    full = RunConfig.from_mapping({**project_defaults(PROJECT), **config})
    assert full.group(SamKeys).sam_rho_private == 0.01
    explicit = merged_run_config(None, ["method='fedrecgel'", "sam-rho-shared=0.05"])
    assert "sam-rho-private" not in explicit


def test_every_fedrecgel_preset_sets_its_radii_itself():
    """The presets' figures do not depend on the reference defaults."""
    for path in sorted((PROJECT / "conf").glob("*.toml")):
        preset = resolve(path)
        if preset.get("method") == "fedrecgel":
            assert {"sam-rho-private", "sam-rho-shared"} & set(preset), path.name
