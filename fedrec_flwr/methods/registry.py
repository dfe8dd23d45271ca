"""The registry: methods by name and plug-ins in the order they attach.

The built-in methods and plug-ins are registered by :mod:`fedrec_flwr.methods`; a method or
plug-in defined anywhere else joins with :func:`register_method` / :func:`register_plugin`
before the run config is built (``docs/adding-a-method.md``). Config validation, the node,
the server, tuning and the audit all read these two dictionaries.
"""

from __future__ import annotations

import inspect
from typing import TypeVar

from fedrec_flwr.methods.base import Method
from fedrec_flwr.methods.plugin import MethodPlugin, Plugin
from fedrec_flwr.schema import ConfigError, Settings

#: Method classes by name (``method`` run-config key), in registration order.
METHODS: dict[str, type[Method]] = {}
#: Plug-in declarations by name, in the order ``build_method`` attaches them.
PLUGINS: dict[str, Plugin] = {}

MethodClass = TypeVar("MethodClass", bound=type[Method])


def register_method(cls: MethodClass) -> MethodClass:
    """Register ``cls`` under its ``name`` (usable as a class decorator); raises if the name
    is taken by another class."""
    if not (isinstance(cls, type) and issubclass(cls, Method)) or issubclass(cls, MethodPlugin):
        raise TypeError(
            f"register_method takes a Method subclass, got {cls!r}; a plug-in that wraps a "
            "method is declared with register_plugin(Plugin(..., wrapper=...))."
        )
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__} needs a class attribute name = '<its method key>'.")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise TypeError(f"method '{name}' ({cls.__name__}) does not define: {missing}.")
    _claim(METHODS, "method", name, cls)
    METHODS[name] = cls
    return cls


def register_plugin(plugin: Plugin) -> Plugin:
    """Register ``plugin`` after those already registered; raises if its name is taken."""
    if not isinstance(plugin, Plugin):
        raise TypeError(f"register_plugin takes a Plugin declaration, got {plugin!r}.")
    _claim(PLUGINS, "plug-in", plugin.name, plugin)
    PLUGINS[plugin.name] = plugin
    return plugin


def unregister_method(name: str) -> None:
    """Remove method ``name`` (a method registered for a test or a session)."""
    METHODS.pop(name)


def unregister_plugin(name: str) -> None:
    """Remove plug-in ``name``."""
    PLUGINS.pop(name)


def _claim(registry: dict, kind: str, name: str, entry: object) -> None:
    if name in registry and registry[name] is not entry:
        raise ValueError(
            f"{kind} name '{name}' is already registered ({registry[name]!r}); choose another "
            f"name, or unregister_{kind.replace('-', '')}('{name}') first."
        )


def enabled_plugins(config: Settings) -> tuple[Plugin, ...]:
    """The plug-ins ``config`` switches on, in the order they attach."""
    return tuple(plugin for plugin in PLUGINS.values() if plugin.enabled(config))


def build_method(config: Settings, num_items: int) -> Method:
    """The configured method with every enabled plug-in attached (raises ConfigError for
    impossible combinations)."""
    if config.method not in METHODS:
        raise ConfigError(
            f"method='{config.method}' is not registered. Choose one of: "
            f"{', '.join(METHODS)}, or register_method() it before building the config."
        )
    method: Method = METHODS[config.method](config, num_items)
    for plugin in enabled_plugins(config):
        method = plugin.attach(config, num_items, method)
    return method
