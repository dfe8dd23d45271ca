"""Plug-ins compose with a base method through one mechanism, and the registry.

A :class:`MethodPlugin` delegates every member of :class:`Method` that it does not override
(the parameter-name lists are computed from the composition); these tests fail when a
member of Method is left to its default instead."""

import inspect
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest
import torch

from fedrec_flwr.config import ConfigError, RunConfig, key_groups
from fedrec_flwr.data.registry import dataset_key_groups
from fedrec_flwr.methods import (
    PLACES,
    PLGC,
    PLUGIN_ENTRY_POINTS,
    PLUGINS,
    FedMF,
    Method,
    MethodCard,
    MethodPlugin,
    Plugin,
    build_method,
    enabled_plugins,
    method_card,
    methods,
    register_method,
    register_plugin,
    registry,
    unregister_method,
    unregister_plugin,
)
from fedrec_flwr.methods.itemitem import uploads_statistics
from fedrec_flwr.methods.layout import describe, layout
from fedrec_flwr.methods.plugin import Delegated, method_members
from fedrec_flwr.methods.plugins import dual
from fedrec_flwr.schema import POSITIVE, Group, key
from fedrec_flwr.stages import UploadStage
from fedrec_lab.testing import user_params


class DoesNothing(MethodPlugin):
    """A plug-in that overrides nothing: it must behave as its base method."""


def configs() -> list[RunConfig]:
    """Every registered method, and its dual variant where it has one."""
    out = []
    for name, card in methods().items():
        extra = {"sam-rho-private": 0.01} if name == "fedrecgel" else {}
        out.append(RunConfig.from_mapping({"method": name, "embedding-dim": 4, **extra}))
        if card.supports_dual:
            out.append(out[-1].replace(personalization="dual"))
    return out


@pytest.mark.parametrize("plugin", [MethodPlugin, PLGC])
def test_every_method_member_is_overridden_delegated_or_derived(plugin):
    members = method_members()
    assert {"logits", "roles", "loss", "name", "after_step"} <= members
    own = plugin.__mro__[: plugin.__mro__.index(MethodPlugin)]  # the plug-in's classes
    for name in sorted(members):
        overridden = any(name in vars(klass) for klass in own)
        delegated = isinstance(inspect.getattr_static(plugin, name), Delegated)
        assert overridden or delegated, name
    assert not inspect.isabstract(plugin)


@pytest.mark.parametrize(
    "config", configs(), ids=lambda c: f"{c.method_name}-{c.value('personalization')}"
)
def test_a_plugin_that_overrides_nothing_answers_as_its_base_method(config):
    base = build_method(config, num_items=12)
    wrapped = DoesNothing(config, 12, base)
    for name in sorted(method_members()):
        ours, theirs = getattr(wrapped, name), getattr(base, name)
        if inspect.ismethod(theirs):
            assert ours.__func__ is theirs.__func__ and ours.__self__ is base, name
        else:
            assert ours == theirs, name
    assert layout(wrapped) == layout(base) and describe(wrapped) == describe(base)
    assert uploads_statistics(wrapped) == uploads_statistics(base)
    for name, value in vars(base).items():  # what the base method set on itself
        if not name.startswith("_"):
            assert getattr(wrapped, name) is value, name
    rng = np.random.default_rng(0)
    params = user_params(base, np.arange(3), rng)
    rows = torch.from_numpy(rng.normal(size=(3, 5, base.row_dim)).astype(np.float32))
    assert torch.equal(wrapped.logits(params, rows), base.logits(params, rows))


def test_plgc_adds_its_parameters_to_the_base_methods_and_delegates_the_rest():
    config = RunConfig.from_mapping({"method": "pfedrec", "plgc": True, "embedding-dim": 4})
    method = build_method(config, num_items=12)
    assert isinstance(method, PLGC) and method.name == "pfedrec"
    base = method.base
    assert layout(method).kept_private == (*layout(base).kept_private, "plgc-alpha")
    assert layout(method).global_rows == ("plgc-global",)
    assert layout(method).rows == (*layout(base).rows, "plgc-global")
    assert (layout(method).personal_rows, layout(method).eval_table, method.row_dim) == (
        layout(base).personal_rows,
        layout(base).eval_table,
        base.row_dim,
    )
    assert method.stages() == base.stages() and method.dim == base.dim == 4


def test_build_method_attaches_the_enabled_plugins_in_registry_order():
    config = RunConfig.from_mapping(
        {"method": "fedmf", "personalization": "dual", "plgc": True, "sam-rho-shared": 0.1}
    )
    assert [p.name for p in enabled_plugins(config)] == ["dualper", "sam", "plgc"]
    assert [p.name for p in enabled_plugins(config, "method")] == ["dualper", "plgc"]
    assert [p.name for p in enabled_plugins(config, "local_update")] == ["sam"]
    assert list(PLUGINS)[:3] == ["dualper", "sam", "plgc"]
    assert {place for p in PLUGINS.values() for place in p.acts_on} == set(PLACES)
    method = build_method(config, num_items=5)
    assert isinstance(method, PLGC) and type(method.base) is FedMF and method.base.dual
    with pytest.raises(ConfigError, match="does not apply to method 'fedrap'"):
        RunConfig.from_mapping({"method": "fedrap", "personalization": "dual"})


class Halved(MethodPlugin):
    """Half the base method's scores."""

    def logits(self, params, rows):
        return self.base.logits(params, rows) / 2


def test_a_plugin_registered_at_run_time_is_attached_where_its_config_enables_it():
    plugin = Plugin(
        name="halved",
        paper="",
        enabled=lambda config: config.training.seed == 7,
        method=Halved,
    )
    register_plugin(plugin)
    try:
        assert list(PLUGINS)[-1] == "halved"  # after the built-in ones
        assert type(build_method(RunConfig.from_fields(method="fedmf", seed=7), 5)) is Halved
        assert type(build_method(RunConfig.from_fields(method="fedmf", seed=8), 5)) is FedMF
        with pytest.raises(ValueError, match="already registered"):
            register_plugin(Plugin("halved", "", bool, method=Halved))
    finally:
        unregister_plugin("halved")
    assert "halved" not in PLUGINS
    with pytest.raises(ValueError, match="contributes nothing"):
        Plugin("bad", "", bool)


def test_register_method_rejects_what_is_not_a_complete_named_method():
    class Nameless(FedMF):
        name = ""

    class Unfinished(Method):
        name = "unfinished"

    class Imposter(FedMF):
        name = "fedmf"

    def card(cls: type) -> MethodCard:
        return MethodCard(cls, title=cls.__name__, paper="")

    with pytest.raises(TypeError, match="takes a MethodCard"):
        register_method(FedMF)
    with pytest.raises(TypeError, match="describes a Method subclass"):
        register_method(card(PLGC))
    with pytest.raises(ValueError, match="needs a class attribute name"):
        register_method(card(Nameless))
    with pytest.raises(TypeError, match="does not define: init_private, logits"):
        register_method(card(Unfinished))
    with pytest.raises(ValueError, match="'fedmf' is already registered"):
        register_method(card(Imposter))
    fedmf = method_card("fedmf")
    assert register_method(fedmf) is fedmf  # registering the same card again is harmless
    with pytest.raises(KeyError):
        unregister_method("unfinished")


def test_the_architecture_page_lists_every_built_in_plugin_in_order():
    from fedrec_flwr.methods.registry import BUILTIN_PLUGINS

    page = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    section = page.split("## Plug-ins and stages")[1].split("\n## ")[0]
    listed = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    assert listed == list(PLUGINS)[: len(BUILTIN_PLUGINS)]


def test_a_plugin_of_another_package_joins_through_an_entry_point_with_its_keys(monkeypatch):
    class EchoKeys(Group):
        title = "Echo"

        echo_level: int = key(default=2, help="a toy plug-in's key", range=POSITIVE)

    echo = Plugin(
        name="echo",
        paper="a toy plug-in",
        enabled=lambda config: config.group(EchoKeys).echo_level > 2,
        node=lambda config, data: UploadStage(),
        keys=(EchoKeys,),
    )
    point = EntryPoint("echo", "fedrec_echo:PLUGIN", PLUGIN_ENTRY_POINTS)
    monkeypatch.setattr(point.__class__, "load", lambda self: echo)
    monkeypatch.setattr(
        registry, "entry_points", lambda group: [point] if group == PLUGIN_ENTRY_POINTS else []
    )
    plugins = registry.PluginRegistry(registry.BUILTIN_PLUGINS)
    monkeypatch.setattr(registry, "PLUGINS", plugins)
    assert list(plugins)[-1] == "echo"  # after the built-in ones
    assert key_groups()[-len(dataset_key_groups()) - 1] is EchoKeys
    config = RunConfig.from_mapping({"echo-level": 3})
    assert config.group(EchoKeys) == EchoKeys(echo_level=3)
    assert [plugin.name for plugin in enabled_plugins(config, "node")] == ["echo"]


def test_an_entry_point_must_name_a_plugin_of_its_name(monkeypatch):
    point = EntryPoint("echo", "fedrec_echo:PLUGIN", PLUGIN_ENTRY_POINTS)
    monkeypatch.setattr(point.__class__, "load", lambda self: PLUGINS["sam"])
    monkeypatch.setattr(registry, "entry_points", lambda group: [point])
    with pytest.raises(TypeError, match="must name a Plugin declaration whose name is 'echo'"):
        list(registry.PluginRegistry(()))


def test_the_layout_follows_dualper_set_after_it_was_first_read():
    method = build_method(RunConfig.from_fields(method="fedmf"), num_items=6)
    assert layout(method).personal_rows is False  # computed and cached before the flag
    assert dual(method.config, 6, method) is method
    assert layout(method).personal_rows is True
    assert layout(method).eval_table == "round-start"
