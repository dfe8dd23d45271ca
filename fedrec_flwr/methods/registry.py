"""The registry: methods by name (their cards), and plug-ins in the order they act.

Built-in methods are the :class:`~fedrec_flwr.methods.card.MethodCard` objects declared in
the modules of :mod:`fedrec_flwr.methods` (:func:`register_builtin_methods`, listed by their
``order``); they need no installed package metadata, so a FAB extracted on a SuperNode knows
them. A method from another installed package joins through an entry point of the group
``fedrec_flwr.methods`` naming its card (``toy = "fedrec_toy:CARD"``), loaded the first time
the registry is read, so ``flwr run``, ``fedrec tune`` and ``fedrec audit`` run it like a
built-in one; a script or a test may also call :func:`register_method`
(``docs/adding-a-method.md``). The built-in plug-ins are declared beside the code that
carries them out (:data:`BUILTIN_PLUGINS`) and join the registry when it is first read;
another joins with :func:`register_plugin` (``docs/adding-a-stage.md``). Config validation,
the node, the server, tuning, the presets and the audit all read these registries.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import TypeVar

from fedrec_flwr.methods.base import Method
from fedrec_flwr.methods.card import MethodCard
from fedrec_flwr.methods.plugin import MethodPlugin, Plugin
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.schema import ConfigError, Group

#: The entry-point group of methods defined outside this package.
METHOD_ENTRY_POINTS = "fedrec_flwr.methods"
#: The entry-point group of plug-ins defined outside this package.
PLUGIN_ENTRY_POINTS = "fedrec_flwr.plugins"

#: Method cards by name (``method`` run-config key), in registration order.
_METHODS: dict[str, MethodCard] = {}

#: The built-in plug-ins, ``module:attribute`` of each declaration, in the order they act:
#: the method's (DualPer, then PLGC around it), the local optimiser's (SAM), the upload's
#: (a malicious client's poisoning, then decoys, then LDP on every row; secure aggregation
#: finishes), the server's (decoding, denoising, the defences).
BUILTIN_PLUGINS = (
    "fedrec_flwr.methods.plugins:DUALPER",
    "fedrec_flwr.node.optim:SAM_PLUGIN",
    "fedrec_flwr.methods.plgc:PLUGIN",
    "fedrec_flwr.node.malicious:PLUGIN",
    "fedrec_flwr.privacy.uploads:DECOYS",
    "fedrec_flwr.privacy.uploads:LDP",
    "fedrec_flwr.privacy.secure_upload:PLUGIN",
    "fedrec_flwr.server.defences:PLUGIN",
)


class PluginRegistry(Mapping[str, Plugin]):
    """Plug-in declarations by name, in the order they act. The built-in ones
    (:data:`BUILTIN_PLUGINS`) are read from their modules when the registry is first used:
    those modules sit above this one (the node, the privacy mechanisms, the server); then
    those that installed packages name by entry points of the group
    :data:`PLUGIN_ENTRY_POINTS` (``grid = "fedrec_grid:PLUGIN"``)."""

    def __init__(self, builtin: tuple[str, ...]) -> None:
        self._builtin = builtin
        self._plugins: dict[str, Plugin] = {}
        self._loaded = False

    def _load(self) -> dict[str, Plugin]:
        if not self._loaded:
            self._loaded = True  # first, so that a module read here may read the registry
            try:
                for entry in self._builtin:
                    module, _, attribute = entry.partition(":")
                    self.add(getattr(importlib.import_module(module), attribute))
                for point in entry_points(group=PLUGIN_ENTRY_POINTS):
                    self.add(_entry_point_plugin(point))
            except BaseException:
                self._loaded = False
                self._plugins.clear()
                raise
        return self._plugins

    def add(self, plugin: Plugin) -> None:
        plugins = self._load()
        _claim(plugins, "plug-in", plugin.name, plugin)
        plugins[plugin.name] = plugin

    def remove(self, name: str) -> None:
        self._load().pop(name)

    def __getitem__(self, name: str) -> Plugin:
        return self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._load()))

    def __len__(self) -> int:
        return len(self._load())

    def __repr__(self) -> str:
        return f"PluginRegistry({list(self)})"


#: Plug-in declarations by name, in the order they act.
PLUGINS = PluginRegistry(BUILTIN_PLUGINS)

_entry_points = {"loaded": False, "loading": False}

Entry = TypeVar("Entry")


def methods() -> Mapping[str, MethodCard]:
    """Every registered method's card by name, in registration order (the entry points of
    installed packages loaded on the first call)."""
    _load_entry_points()
    return MappingProxyType(_METHODS)


def method_card(name: str) -> MethodCard:
    """The card of method ``name``, or ConfigError naming the registered ones."""
    cards = methods()
    if name not in cards:
        raise ConfigError(
            f"method='{name}' is not registered. Choose one of: {', '.join(cards)}; a method "
            f"of another package joins through an entry point of the group "
            f"'{METHOD_ENTRY_POINTS}' (docs/adding-a-method.md)."
        )
    return cards[name]


def register_method(card: MethodCard) -> MethodCard:
    """Register a method by its card; raises if its name is taken by another card."""
    if not isinstance(card, MethodCard):
        raise TypeError(
            f"register_method takes a MethodCard (fedrec_flwr.methods.card), got {card!r}; "
            "declare one beside the method: CARD = MethodCard(MyMethod, title=..., paper=...)."
        )
    cls = card.method
    if not (isinstance(cls, type) and issubclass(cls, Method)) or issubclass(cls, MethodPlugin):
        raise TypeError(
            f"a MethodCard describes a Method subclass, got {cls!r}; a plug-in that wraps a "
            "method is declared with register_plugin(Plugin(..., method=...))."
        )
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__} needs a class attribute name = '<its method key>'.")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise TypeError(f"method '{name}' ({cls.__name__}) does not define: {missing}.")
    _claim(_METHODS, "method", name, card)
    _METHODS[name] = card
    return card


def register_builtin_methods() -> None:
    """Register the cards declared in the modules of this package, by their ``order``."""
    package = importlib.import_module(__package__)
    cards: list[MethodCard] = []
    for module in pkgutil.iter_modules(package.__path__, f"{__package__}."):
        for value in vars(importlib.import_module(module.name)).values():
            if isinstance(value, MethodCard) and value.method.__module__ == module.name:
                cards.append(value)
    for card in sorted(cards, key=lambda card: (card.order, card.name)):
        register_method(card)


def _load_entry_points() -> None:
    """Register the cards named by the entry points of installed packages, once."""
    state = _entry_points
    if state["loaded"] or state["loading"]:
        return
    state["loading"] = True
    try:
        for point in entry_points(group=METHOD_ENTRY_POINTS):
            register_method(_entry_point_card(point))
        state["loaded"] = True
    finally:
        state["loading"] = False


def _loaded(point, group: str) -> tuple[str, object]:
    """(where the entry point is declared, the object it names)."""
    where = f"entry point '{point.name} = {point.value}' of the group '{group}'"
    if point.dist is not None:
        where += f" (package {point.dist.name})"
    try:
        return where, point.load()
    except Exception as error:
        raise ImportError(
            f"{where} failed to load: {error!r}. Fix that package or uninstall it."
        ) from error


def _entry_point_card(point) -> MethodCard:
    where, card = _loaded(point, METHOD_ENTRY_POINTS)
    if not isinstance(card, MethodCard) or card.name != point.name:
        raise TypeError(
            f"{where} must name a MethodCard whose method's name is '{point.name}', got {card!r}."
        )
    return card


def _entry_point_plugin(point) -> Plugin:
    where, plugin = _loaded(point, PLUGIN_ENTRY_POINTS)
    if not isinstance(plugin, Plugin) or plugin.name != point.name:
        raise TypeError(
            f"{where} must name a Plugin declaration whose name is '{point.name}', got {plugin!r}."
        )
    return plugin


def register_plugin(plugin: Plugin) -> Plugin:
    """Register ``plugin`` after those already registered; raises if its name is taken."""
    if not isinstance(plugin, Plugin):
        raise TypeError(f"register_plugin takes a Plugin declaration, got {plugin!r}.")
    PLUGINS.add(plugin)
    return plugin


def unregister_method(name: str) -> None:
    """Remove method ``name`` (a method registered for a test or a script)."""
    _METHODS.pop(name)


def unregister_plugin(name: str) -> None:
    """Remove plug-in ``name``."""
    PLUGINS.remove(name)


def _claim(registry: Mapping[str, Entry], kind: str, name: str, entry: Entry) -> None:
    if name in registry and registry[name] is not entry:
        raise ValueError(
            f"{kind} name '{name}' is already registered ({registry[name]!r}); choose another "
            f"name, or unregister_{kind.replace('-', '')}('{name}') first."
        )


def plugin_key_groups() -> tuple[type[Group], ...]:
    """The keys of the registered plug-ins (their ``keys``), in the order they act, each
    group once."""
    groups: list[type[Group]] = []
    for plugin in PLUGINS.values():
        groups += [group for group in plugin.keys if group not in groups]
    return tuple(groups)


def enabled_plugins(config: RunGroups, place: str | None = None) -> tuple[Plugin, ...]:
    """The plug-ins ``config`` switches on, in the order they act (those acting at
    ``place``, one of :data:`~fedrec_flwr.methods.plugin.PLACES`, if given)."""
    return tuple(
        plugin
        for plugin in PLUGINS.values()
        if plugin.enabled(config) and (place is None or getattr(plugin, place) is not None)
    )


def plugin_enabled(name: str, config: RunGroups) -> bool:
    """Does ``config`` switch plug-in ``name`` on? (Its own test, the one place it is
    written.)"""
    return PLUGINS[name].enabled(config)


def build_method(config: RunGroups, num_items: int) -> Method:
    """The configured method with every enabled plug-in attached (raises ConfigError for
    impossible combinations)."""
    method: Method = method_card(config.method_name).method(config, num_items)
    for plugin in enabled_plugins(config):
        method = plugin.attach(config, num_items, method)
    return method
