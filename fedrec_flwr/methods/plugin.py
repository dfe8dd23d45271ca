"""How a plug-in composes with a base method: one declaration, one way to attach.

A plug-in is a :class:`Plugin` declaration in the registry (``register_plugin``): its name,
when a run config enables it, the checks that it applies to the configured method, and where
it acts (:class:`Attachment`). ``build_method`` builds the configured method, then attaches
every enabled plug-in in registry order:

- ``method``: the plug-in wraps the method in a :class:`MethodPlugin` subclass (PLGC);
- ``roles``: the method reads the plug-in's flag and changes its roles and phases (DualPer,
  for methods that declare ``supports_dual``);
- ``local-update``: the node's local optimiser reads the plug-in's keys (SAM);
- ``upload``: the node's uploads read the plug-in's keys (LDP, decoys).

A :class:`MethodPlugin` holds the base method and delegates every member of :class:`Method`
it does not override, automatically and completely; the members that :class:`Method`
computes from the others (:data:`DERIVED`: the parameter-name lists, ``describe``) run on the
composition, so parameters a plug-in adds are counted.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fedrec_flwr.methods.base import Method
from fedrec_flwr.run_keys import RunGroups


class Attachment(StrEnum):
    """Where a plug-in acts."""

    METHOD = "method"
    ROLES = "roles"
    LOCAL_UPDATE = "local-update"
    UPLOAD = "upload"


@dataclass(frozen=True)
class Plugin:
    """A plug-in's declaration.

    ``enabled(config)``: does the run config switch it on? ``check(config, method)``: raise
    ``ConfigError`` (saying what to do) when it does not apply to the configured ``method``.
    ``wrapper``: the :class:`MethodPlugin` subclass it wraps the method in (``METHOD`` only).
    ``module``: where it is carried out.
    """

    name: str
    paper: str
    attaches_to: Attachment
    enabled: Callable[[RunGroups], bool]
    module: str
    check: Callable[[RunGroups, Method], None] | None = None
    wrapper: type[MethodPlugin] | None = None

    def __post_init__(self) -> None:
        if (self.wrapper is None) == (self.attaches_to is Attachment.METHOD):
            raise ValueError(
                f"plug-in '{self.name}': give a wrapper (a MethodPlugin subclass) exactly when "
                "it attaches to the method (attaches_to=Attachment.METHOD)."
            )

    def attach(self, config: RunGroups, num_items: int, method: Method) -> Method:
        """``method`` with this plug-in: checked, then wrapped (``METHOD``) or as it is (the
        other attachments read the plug-in's keys from the config)."""
        if self.check is not None:
            self.check(config, method)
        if self.wrapper is None:
            return method
        return self.wrapper(config, num_items, method)


#: Members of :class:`Method` computed from its other members: a :class:`MethodPlugin` runs
#: Method's own code for them on the composition instead of asking the base method.
DERIVED = frozenset(
    {
        "_names",
        "_with_role",
        "dense_names",
        "describe",
        "global_row_names",
        "kept_private_names",
        "private_names",
        "private_row_names",
        "row_names",
        "shared_dense_names",
    }
)


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
    """Give ``cls`` a :class:`Delegated` member for every member of :class:`Method` that is
    not derived, so that nothing silently falls back to Method's default."""
    for name in sorted(method_members() - DERIVED):
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
