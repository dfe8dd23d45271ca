"""The run-config schema: keys declared by the modules that own them, and the values of a run.

A :class:`Key` is one flat run-config key (kebab-case, as Flower passes it): its default
(which fixes its type), help text, choices (an Enum, or a function for a registry such as
the methods'), range and check. A module declares its keys as one :class:`Group`, a
frozen dataclass with a field per key (key ``foo-bar`` is field ``foo_bar``), with the
checks that span several of its keys and, for a plug-in, its search space.
:class:`~fedrec_flwr.config.Settings` holds the values of a sequence of groups, one
:class:`Group` each; :class:`~fedrec_flwr.config.RunConfig` composes the groups of the
whole run.

This module imports nothing of the project: the methods, plug-ins and datasets that declare
keys sit above it, and the config that composes them above those.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar, dataclass_transform

Scalar = bool | int | float | str
Choices = type[enum.Enum] | Callable[[], Iterable[str]]


class ConfigError(ValueError):
    """A run configuration value is unknown, of the wrong type or impossible."""


GroupT = TypeVar("GroupT", bound="Group")
#: A key's type: that of its default.
ValueT = TypeVar("ValueT", bound=Scalar)


class RunValues(Protocol):
    """A run's values as the modules below the run config read them
    (:class:`~fedrec_flwr.run_keys.RunGroups`, :class:`~fedrec_flwr.config.RunConfig`): a
    group's values, typed, and (for a check across groups declared above the reader) one key
    by its run-config name."""

    def group(self, kind: type[GroupT]) -> GroupT: ...

    def value(self, name: str) -> Scalar: ...


class MethodTraits(Protocol):
    """What a group's ``tuned`` reads of the run's method: its layout
    (:class:`~fedrec_flwr.methods.layout.Layout`, built above this module)."""

    @property
    def personal_rows(self) -> bool: ...

    @property
    def train_from_personal(self) -> bool: ...


#: A check across a group's keys (raises :class:`ConfigError`).
GroupCheck = Callable[[RunValues], None]
#: When a group's checks run.
GroupApplies = Callable[[RunValues], bool]
#: When the search space of a group that is no plug-in's is tuned.
GroupTuned = Callable[[RunValues, MethodTraits], bool]


@dataclass(frozen=True)
class Range:
    """Allowed numbers: ``low`` .. ``high`` (None: unbounded), each end included or not."""

    low: float | None = None
    high: float | None = None
    low_included: bool = True
    high_included: bool = True

    def __contains__(self, value: float) -> bool:
        above = self.low is None or value > self.low or (value == self.low and self.low_included)
        below = (
            self.high is None or value < self.high or (value == self.high and self.high_included)
        )
        return above and below

    def __str__(self) -> str:
        """``> 0``, ``>= 5``, ``in [0, 1)``, ``<= 2``."""
        if self.low is not None and self.high is not None:
            left, right = "[" if self.low_included else "(", "]" if self.high_included else ")"
            return f"in {left}{self.low:g}, {self.high:g}{right}"
        if self.low is not None:
            return f"{'>=' if self.low_included else '>'} {self.low:g}"
        if self.high is not None:
            return f"{'<=' if self.high_included else '<'} {self.high:g}"
        return "any number"


POSITIVE = Range(0, low_included=False)
NON_NEGATIVE = Range(0)

#: The largest magnitude a float key accepts: beyond it a value is a typo or an attack (a
#: learning rate of 1e300 overflows the first update), whatever the key's own range says.
FLOAT_MAGNITUDE_LIMIT = 1e12


@dataclass(frozen=True)
class Key(Generic[ValueT]):
    """One run-config key, of its default's type.

    ``why`` follows the range in the error for a value outside it (what the value means).
    ``check(value)`` raises :class:`ConfigError` for a value of the right type and range that
    still cannot work. ``parse(value)`` turns a value of another TOML type into the key's,
    or returns None (``plgc-alpha = 0.5`` on the command line for the string ``"0.5"``).
    """

    name: str
    default: ValueT
    help: str
    choices: Choices | None = None
    range: Range | None = None
    why: str = ""
    check: Callable[[ValueT], object] | None = None
    parse: Callable[[object], ValueT | None] | None = None

    @property
    def field(self) -> str:
        """The attribute name: ``foo-bar`` -> ``foo_bar``."""
        return self.name.replace("-", "_")

    @property
    def type(self) -> type[ValueT]:
        return type(self.default)

    def choice_values(self) -> tuple[str, ...]:
        """The allowed values, in their declared order (empty: any value of the type)."""
        if self.choices is None:
            return ()
        if isinstance(self.choices, enum.EnumMeta):
            return tuple(str(member.value) for member in self.choices)
        return tuple(self.choices())

    def coerce(self, value: Any) -> Scalar:
        """``value`` (from TOML or the command line) as the key's type, or ConfigError."""
        kind = self.type
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if kind is float and numeric:
            self._validate_finite(float(value))  # also for a group that does not apply
            return float(value)
        if kind is int and isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
            return value
        if self.parse is not None and (parsed := self.parse(value)) is not None:
            return parsed
        raise ConfigError(
            f"run-config key '{self.name}' must be of type {kind.__name__}, got {value!r} "
            f"({type(value).__name__})."
        )

    def validate(self, value: Any) -> None:
        """Raise :class:`ConfigError` if ``value`` is not a choice, outside the range or
        refused by the check."""
        choices = self.choice_values()
        if choices and value not in choices:
            hint = difflib.get_close_matches(str(value), choices, n=1)
            raise ConfigError(
                f"{self.name}='{value}' is not known"
                + (f" (did you mean '{hint[0]}'?)" if hint else "")
                + f". Choose one of: {', '.join(choices)}."
            )
        if self.type is float:
            self._validate_finite(value)
        if self.range is not None and value not in self.range:
            raise ConfigError(f"{self.name}={value} must be {self.range}{self.why}.")
        if self.check is not None:
            self.check(value)

    def _validate_finite(self, value: float) -> None:
        """Refuse NaN, inf and magnitudes beyond :data:`FLOAT_MAGNITUDE_LIMIT` (every float
        key: a NaN passes no comparison, an inf passes an open-ended range)."""
        if not math.isfinite(value) or abs(value) > FLOAT_MAGNITUDE_LIMIT:
            raise ConfigError(
                f"{self.name}={value} is not a usable number: give a finite value of magnitude "
                f"at most {FLOAT_MAGNITUDE_LIMIT:g}"
                + (f" ({self.range})" if self.range is not None else "")
                + f", e.g. the default {self.name} = {self.default!r}."
            )


@dataclass(frozen=True)
class Dim:
    """One tuned key of a search space: ``low`` .. ``high`` (log scale if ``log``), or
    ``choices``."""

    low: float = 0.0
    high: float = 0.0
    log: bool = True
    integer: bool = False
    choices: tuple = ()

    def __contains__(self, value: Any) -> bool:
        return value in self.choices if self.choices else self.low <= value <= self.high

    def describe(self) -> str:
        if self.choices:
            return "{" + ", ".join(map(str, self.choices)) + "}"
        return f"[{self.low:g}, {self.high:g}]" + (" log" if self.log else "")


#: The metadata entry of a :class:`Group` field that holds its :class:`KeyInfo`.
KEY_INFO = "fedrec-key"


@dataclass(frozen=True)
class KeyInfo(Generic[ValueT]):
    """What a :class:`Group` field says of its key besides its name, default and type (the
    :class:`Key` arguments of the same names)."""

    help: str
    choices: Choices | None = None
    range: Range | None = None
    why: str = ""
    check: Callable[[ValueT], object] | None = None
    parse: Callable[[object], ValueT | None] | None = None


def key(
    *,
    default: ValueT,
    help: str,
    choices: Choices | None = None,
    range: Range | None = None,
    why: str = "",
    check: Callable[[ValueT], object] | None = None,
    parse: Callable[[object], ValueT | None] | None = None,
) -> Any:
    """A field of a :class:`Group`: one run-config key, named as the field with ``-`` for
    ``_``; the arguments are those of :class:`Key`."""
    info: KeyInfo[ValueT] = KeyInfo(help, choices, range, why, check, parse)
    return field(default=default, metadata={KEY_INFO: info})


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(key,))
class Group:
    """One module's run-config keys as a frozen, typed dataclass: a field per key
    (:func:`key`), read as ``group.field`` by the code that takes the group.

    A subclass is made a frozen, keyword-only dataclass; it states its ``title``, and may
    state ``plugin`` (the registered plug-in its keys belong to: its ``search_space`` is
    tuned when the plug-in is enabled), ``search_space`` (over its own keys), ``owner``
    (default: its module), ``check(config)`` (checks across keys, raising
    :class:`ConfigError`; default: none), ``applies(config)`` (when the keys' own checks and
    ``check`` run; default: always) and ``tuned(config, method)`` (when the search space of a
    group that is no plug-in's is tuned; default: always). ``keys``, its :class:`Key`
    declarations in field order, is made from the fields.
    """

    title: ClassVar[str] = ""
    owner: ClassVar[str] = ""
    plugin: ClassVar[str | None] = None
    search_space: ClassVar[Mapping[str, Dim]] = {}
    check: ClassVar[GroupCheck | None] = None
    applies: ClassVar[GroupApplies | None] = None
    tuned: ClassVar[GroupTuned | None] = None
    keys: ClassVar[tuple[Key[Any], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclass(frozen=True, kw_only=True)(cls)
        if "owner" not in vars(cls):
            cls.owner = cls.__module__
        cls.keys = tuple(_declared_key(item) for item in dataclasses.fields(cls))  # type: ignore[arg-type]
        names = [item.name for item in cls.keys]
        if not set(cls.search_space) <= set(names):
            raise ValueError(
                f"{cls.__name__}: give a search space over the group's own keys (keys "
                f"{names}, search space {list(cls.search_space)})."
            )

    @classmethod
    def active(cls, config: RunValues) -> bool:
        return cls.applies is None or cls.applies(config)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Self:
        """The group's values from ``values``, attribute names (``num_server_rounds``) of at
        least every field; unchecked (:class:`Settings` checks them)."""
        return cls(**{item.field: values[item.field] for item in cls.keys})


def _declared_key(item: dataclasses.Field[Any]) -> Key[Any]:
    info = item.metadata.get(KEY_INFO)
    if not isinstance(info, KeyInfo):
        raise TypeError(f"field '{item.name}' of a Group must be declared with key(...)")
    if not isinstance(item.default, bool | int | float | str):
        raise TypeError(f"field '{item.name}' of a Group needs a default: key(default=...)")
    return Key(
        item.name.replace("_", "-"),
        item.default,
        info.help,
        choices=info.choices,
        range=info.range,
        why=info.why,
        check=info.check,
        parse=info.parse,
    )
