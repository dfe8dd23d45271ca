"""How a plug-in composes with a run: one declaration, the places it acts.

A plug-in is a :class:`Plugin` declaration in the registry (``register_plugin``): its name,
when a run config enables it, the checks that it applies to the configured method, and what
it contributes where it acts. The run composes every enabled plug-in's contributions in
registry order, each place from the same list:

- ``method``: :func:`~fedrec_flwr.methods.registry.build_method` passes the method through
  it: PLGC wraps it in a :class:`MethodPlugin` subclass, DualPer turns its dense parameters
  and score function private and its item rows personal;
- ``local_update``: the node's local optimiser is passed through it (SAM wraps it:
  :func:`fedrec_flwr.node.optim.local_optimizer`);
- ``node``: a stage of the node's upload chain (:class:`fedrec_flwr.stages.UploadStage`:
  malicious clients, decoys, LDP, secure aggregation's masking);
- ``server``: a stage of the server's chain in front of its optimiser
  (:class:`fedrec_flwr.stages.ServerStage`: secure aggregation's decoding, LDP denoising,
  the defences against poisoning).

A :class:`MethodPlugin` holds the base method and delegates every member of :class:`Method`
it does not override, automatically and completely; the parameter-name lists are computed
from the composition (:func:`fedrec_flwr.methods.layout.layout`), so parameters a plug-in
adds are counted.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedrec_flwr.methods.base import Method
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.schema import Group
from fedrec_flwr.stages import ServerStage, UploadStage

#: The places a plug-in may act, as :class:`Plugin` fields.
PLACES = ("method", "local_update", "node", "server")


@dataclass(frozen=True)
class Plugin:
    """A plug-in's declaration.

    ``enabled(config)``: does the run config switch it on? ``check(config, method)``: raise
    ``ConfigError`` (saying what to do) when it does not apply to the configured ``method``
    (the method as the plug-ins before it left it). What it contributes, each built from the
    run config where the run composes that place:

    - ``method(config, num_items, method)``: the method it returns in place of ``method``;
    - ``local_update(config, method, optimizer)``: the optimiser it returns in place of the
      local ``optimizer``;
    - ``node(config, data)``: its stage of the node's upload chain (``data``: the node's);
    - ``server(config, method, num_items)``: its stage of the server's chain, or None when
      the run needs none.

    ``keys``: the groups of run-config keys it reads (:class:`~fedrec_flwr.schema.Group`
    classes), which the run config composes from the registry
    (:func:`~fedrec_flwr.methods.registry.plugin_key_groups`). ``presets``: the words naming
    it in a plug-in preset's file name (``conf/``: SAM's ``sam``, and ``nosam`` for a method
    that takes SAM by default run without it).
    """

    name: str
    paper: str
    enabled: Callable[[RunGroups], bool]
    check: Callable[[RunGroups, Method], None] | None = None
    method: Callable[[RunGroups, int, Method], Method] | None = None
    local_update: Callable[[RunGroups, Method, Any], Any] | None = None
    node: Callable[[RunGroups, Any], UploadStage] | None = None
    server: Callable[[RunGroups, Method, int], ServerStage | None] | None = None
    keys: tuple[type[Group], ...] = ()
    presets: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.acts_on:
            raise ValueError(
                f"plug-in '{self.name}' contributes nothing: give it a method, local_update, "
                "node or server contribution."
            )

    @property
    def acts_on(self) -> tuple[str, ...]:
        """The places it acts (:data:`PLACES` it contributes to)."""
        return tuple(place for place in PLACES if getattr(self, place) is not None)

    def attach(self, config: RunGroups, num_items: int, method: Method) -> Method:
        """``method`` with this plug-in: checked, then passed through its ``method``
        contribution (if any)."""
        if self.check is not None:
            self.check(config, method)
        if self.method is None:
            return method
        return self.method(config, num_items, method)


def method_members() -> frozenset[str]:
    """Every member :class:`Method` declares (functions, properties, class attributes and
    annotated class variables), dunders aside."""
    names: set[str] = set()
    for klass in Method.__mro__:
        if klass in (abc.ABC, object):
            continue
        names.update(vars(klass))
        names.update(vars(klass).get("__annotations__", {}))
    return frozenset(n for n in names if not n.startswith("__") and n != "_abc_impl")


class Delegated:
    """A member read from the wrapped method (``instance.base``). Not a data descriptor: a
    plug-in instance may still set its own value."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, instance: MethodPlugin | None, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return getattr(instance.base, self.name)

    def __repr__(self) -> str:
        return f"Delegated({self.name!r})"


def _delegating(cls: type[MethodPlugin]) -> type[MethodPlugin]:
    """Give ``cls`` a :class:`Delegated` member for every member of :class:`Method`, so that
    nothing silently falls back to Method's default."""
    for name in sorted(method_members()):
        setattr(cls, name, Delegated(name))
    abc.update_abstractmethods(cls)
    return cls


@_delegating
class MethodPlugin(Method):
    """A plug-in that wraps a base method: it overrides what it changes and the base method
    answers the rest (``self.base``). Attributes the base method sets on itself (``dim``,
    ``dual``, FedNCF's ``mlp_dim``) are read from it too."""

    def __init__(self, config: RunGroups, num_items: int, base: Method) -> None:
        self.config = config
        self.num_items = num_items
        self.base = base

    def __getattr__(self, name: str) -> Any:
        if name == "base" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.base, name)
