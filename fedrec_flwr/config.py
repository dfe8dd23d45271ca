"""The run configuration: one typed, validated object built from Flower's run config.

Flower hands both apps ``context.run_config`` (the ``[tool.flwr.app.config]`` table of
``pyproject.toml`` merged with ``--run-config`` overrides). :func:`RunConfig.from_mapping` turns
it into a :class:`RunConfig`, rejecting unknown keys, wrong types and impossible values with a
message that says what to do.

Each key is declared once, by the module that owns it, as a typed group
(:class:`fedrec_flwr.schema.Group`): the run's own keys in :mod:`fedrec_flwr.run_keys` and
:mod:`fedrec_flwr.learning_keys`, a method's in its module (its card's ``keys``), a
plug-in's beside it (its declaration's ``keys``: DualPer, PLGC, SAM in
:mod:`fedrec_flwr.node.optim`, malicious clients, LDP, decoys and secure aggregation in
:mod:`fedrec_flwr.privacy`), a dataset's in :mod:`fedrec_flwr.data.registry`. This module
composes them (:func:`key_groups`), the methods' and the plug-ins' from the registry;
``pyproject.toml`` and ``docs/reference/configuration.md`` are checked against it
(``python -m fedrec_lab.configref``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, Self, TypeVar

from fedrec_flwr.aggregation import DefenceKeys
from fedrec_flwr.data.registry import DataKeys, dataset_key_groups
from fedrec_flwr.data.settings import DATA_DIR_ENV, DataSettings
from fedrec_flwr.learning_keys import LearningKeys, ScheduleKeys, ServerKeys, ServerOptimizerKeys
from fedrec_flwr.methods import Method, build_method, methods, plugin_key_groups
from fedrec_flwr.methods.heads import check_score_init
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.run_keys import (
    EvaluationKeys,
    ExecutionKeys,
    FaultKeys,
    KeepPersonalRows,
    OutputKeys,
    RunGroups,
    TrainingKeys,
)
from fedrec_flwr.sampling import NegativeSamplerKeys
from fedrec_flwr.schema import ConfigError, Group, Key, Scalar, key

__all__ = [
    "DATA_DIR_ENV",
    "ConfigError",
    "RunConfig",
    "key_groups",
    "reference_defaults",
    "with_reference_defaults",
]


def method_names() -> tuple[str, ...]:
    """The registered methods (:func:`fedrec_flwr.methods.methods`)."""
    return tuple(methods())


class MethodKeys(Group):
    title = "Method"

    method: str = key(
        default="pfedrec",
        help="the federated method: a registered one (`docs/methods/`)",
        choices=method_names,
    )


def method_key_groups() -> tuple[type[Group], ...]:
    """The keys of the registered methods (their cards' ``keys``), each group once."""
    groups: list[type[Group]] = []
    for card in methods().values():
        if card.keys is not None and card.keys not in groups:
            groups.append(card.keys)
    return tuple(groups)


def key_groups() -> tuple[type[Group], ...]:
    """Every group of run-config keys, in key order (that of ``pyproject.toml``,
    ``config.json`` and the configuration reference): the run's own, the registered
    methods' among them, the registered plug-ins' (in the order they act), the datasets'.
    A group two of them declare comes once."""
    groups: list[type[Group]] = []
    for group in (
        MethodKeys,
        DataKeys,
        TrainingKeys,
        NegativeSamplerKeys,
        OutputKeys,
        LearningKeys,
        ScheduleKeys,
        ServerKeys,
        ServerOptimizerKeys,
        *method_key_groups(),
        EvaluationKeys,
        ExecutionKeys,
        FaultKeys,
        DefenceKeys,
        *plugin_key_groups(),
        *dataset_key_groups(),
    ):
        if group not in groups:
            groups.append(group)
    return tuple(groups)


def reference_defaults(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """The paper values the mapping's method declares (its card's ``reference_defaults``) for
    the keys the mapping leaves unset: each declared set of keys is filled when the mapping
    sets none of its keys, so keys set explicitly always win (FedRecGEL's two SAM radii)."""
    card = methods().get(str(mapping.get("method", MethodKeys.keys[0].default)))
    filled: dict[str, Any] = {}
    for values in card.reference_defaults if card is not None else ():
        if not any(key in mapping for key in values):
            filled.update(values)
    return filled


def with_reference_defaults(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """``mapping`` with its method's reference defaults for the keys it leaves unset (before
    a full table of defaults, such as ``pyproject.toml``'s, is merged under it)."""
    return {**reference_defaults(mapping), **mapping}


G = TypeVar("G", bound=Group)


def flatten(groups: Sequence[type[Group]]) -> tuple[Key, ...]:
    """The keys of ``groups`` in order; raises if two groups declare the same key."""
    owners: dict[str, str] = {}
    keys = []
    for group in groups:
        for item in group.keys:
            if item.name in owners:
                raise ValueError(
                    f"run-config key '{item.name}' is declared by both {owners[item.name]} and "
                    f"{group.owner}: rename one of them."
                )
            owners[item.name] = group.owner
            keys.append(item)
    return tuple(keys)


def owner_of(groups: Sequence[type[Group]], field: str) -> type[Group] | None:
    """The group of ``groups`` that declares attribute ``field`` (None: none)."""
    return next((group for group in groups for key in group.keys if key.field == field), None)


@dataclass(frozen=True, eq=False, repr=False)
class Settings:
    """The values of the keys of :meth:`key_groups`, held by group: ``groups`` holds one
    frozen :class:`~fedrec_flwr.schema.Group` of values per group (a group it does not hold
    reads as its defaults: one registered after the settings were made).

    :meth:`group` gives a group's values, typed; :meth:`value` one key by its name. A key
    is no attribute (``config.foo_bar`` raises, naming the group that holds it).
    :meth:`from_fields` takes attribute names and checks nothing (tests, internal copies);
    :meth:`from_mapping` takes run-config keys, converts and validates them.
    """

    groups: tuple[Group, ...] = ()

    kind: ClassVar[str] = "run-config"

    @classmethod
    def key_groups(cls) -> tuple[type[Group], ...]:
        """The groups whose keys these settings hold, in key order."""
        raise NotImplementedError(f"{cls.__name__} must say which key groups it holds")

    @classmethod
    def declared_keys(cls) -> tuple[Key, ...]:
        return flatten(cls.key_groups())

    @classmethod
    def key_names(cls) -> list[str]:
        """Every key (kebab-case), in order."""
        return [key.name for key in cls.declared_keys()]

    @classmethod
    def from_fields(cls, **values: Scalar) -> Self:
        """Settings from attribute names (``num_server_rounds=3``); a field left out takes
        its key's default. Unchecked: :meth:`from_mapping` and :meth:`replace` validate."""
        groups = cls.key_groups()
        known = {key.field for key in flatten(groups)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(
                f"{cls.__name__}.from_fields() got unknown fields {unknown}: fields are the "
                f"{cls.kind} keys with '_' for '-' (e.g. num_server_rounds)."
            )
        return cls(
            tuple(
                group(**{key.field: values[key.field] for key in group.keys if key.field in values})
                for group in groups
            )
        )

    @cached_property
    def _by_kind(self) -> dict[type[Group], Group]:
        return {type(values): values for values in self.groups}

    @cached_property
    def _owners(self) -> dict[str, type[Group]]:
        """The group of each attribute name."""
        return {key.field: group for group in self.key_groups() for key in group.keys}

    def group(self, kind: type[G]) -> G:
        """The values of the keys of group ``kind``."""
        values = self._by_kind.get(kind)
        if isinstance(values, kind):
            return values
        if kind not in self.key_groups():
            raise KeyError(
                f"{kind.__name__} is not a group of {type(self).__name__}'s keys: declare it "
                "where the run config composes it (a method card's or a plug-in's keys)."
            )
        return kind()

    def value(self, name: str) -> Scalar:
        """Run-config key ``name`` (``decoy-ratio``), read through its group."""
        field = name.replace("-", "_")
        owner = self._owners.get(field) or owner_of(self.key_groups(), field)
        if owner is None:
            raise KeyError(f"unknown {self.kind} key '{name}'")
        return getattr(self.group(owner), field)

    if not TYPE_CHECKING:  # hidden from the type checker, which refuses a read by key name

        def __getattr__(self, name: str) -> NoReturn:
            """A key is no attribute of the settings: the error says where it is read."""
            owner = None if name.startswith("_") else owner_of(self.key_groups(), name)
            if owner is None:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            raw = name.replace("_", "-")
            raise AttributeError(
                f"{type(self).__name__} has no attribute {name!r}: {self.kind} key '{raw}' is "
                f"read through its group, config.group({owner.__name__}).{name} (or by name, "
                f"config.value({raw!r}))."
            )

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.to_mapping() == other.to_mapping()

    def __hash__(self) -> int:
        return hash(tuple(self.to_mapping().items()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{field}={value!r}" for field, value in self.fields().items())
        return f"{type(self).__name__}({fields})"

    @classmethod
    def reference_defaults(cls, mapping: Mapping[str, Any]) -> dict[str, Any]:
        """Values for keys ``mapping`` leaves unset that its other keys call for (a method's
        paper values); none here. Keys set in ``mapping`` always win over them."""
        return {}

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> Self:
        """Build and validate from kebab-case keys (missing keys take their reference
        defaults, :meth:`reference_defaults`, else their defaults)."""
        by_name = {key.name: key for key in cls.declared_keys()}
        values: dict[str, Scalar] = {}
        for name, value in {**cls.reference_defaults(mapping), **mapping}.items():
            if name not in by_name:
                hint = difflib.get_close_matches(name, by_name, n=1)
                raise ConfigError(
                    f"unknown {cls.kind} key '{name}'"
                    + (f" (did you mean '{hint[0]}'?)" if hint else "")
                    + f". Valid keys: {', '.join(sorted(by_name))}."
                )
            key = by_name[name]
            values[key.field] = key.coerce(value)
        settings = cls.from_fields(**values)
        settings.validate()
        return settings

    def fields(self) -> dict[str, Scalar]:
        """The values by attribute name, in key order."""
        return {
            key.field: getattr(self.group(group), key.field)
            for group in self.key_groups()
            for key in group.keys
        }

    def to_mapping(self) -> dict[str, Scalar]:
        """The values as kebab-case keys, in key order (as written to ``config.json``)."""
        return {
            key.name: getattr(self.group(group), key.field)
            for group in self.key_groups()
            for key in group.keys
        }

    def replace(self, **changes: Scalar) -> Self:
        """A validated copy with some fields changed (attribute names)."""
        settings = type(self).from_fields(**{**self.fields(), **changes})
        settings.validate()
        return settings

    def active_groups(self) -> list[type[Group]]:
        """The groups whose checks run for these values (:meth:`Group.active`)."""
        return [group for group in self.key_groups() if group.active(self)]

    def validate(self) -> None:
        """Raise :class:`ConfigError` for an impossible value: each key's own checks, then
        each group's checks across its keys (groups that apply only)."""
        groups = self.active_groups()
        for group in groups:
            values = self.group(group)
            for item in group.keys:
                item.validate(getattr(values, item.field))
        for group in groups:
            if group.check is not None:
                group.check(self)


@dataclass(frozen=True, eq=False, repr=False)
class RunConfig(Settings, RunGroups):
    """Resolved run configuration, by group (``config.group(SamKeys)``, ``config.training``;
    ``config.value("decoy-ratio")`` by name). A frozen dataclass of its groups' values
    (:class:`Settings`)."""

    @classmethod
    def key_groups(cls) -> tuple[type[Group], ...]:
        return key_groups()

    @classmethod
    def reference_defaults(cls, mapping: Mapping[str, Any]) -> dict[str, Any]:
        """The method's paper values for the keys ``mapping`` leaves unset."""
        return reference_defaults(mapping)

    def active_groups(self) -> list[type[Group]]:
        """The groups whose checks run: a dataset's keys when it is the run's dataset, the
        others when they apply (:meth:`~fedrec_flwr.schema.Group.active`)."""
        dataset = self.group(DataKeys).dataset
        of_dataset = dataset_key_groups()
        return [
            group for group in super().active_groups() if of_dataset.get(group, dataset) == dataset
        ]

    def validate(self) -> None:
        """Raise :class:`ConfigError` for impossible values: each key's and each group's
        checks, then the method's and its plug-ins' own (building it), then
        ``keep-personal-rows`` and ``score-init`` against the method."""
        super().validate()
        method = build_method(self, num_items=1)
        self._validate_keep_personal_rows(method)
        check_score_init(self, method, methods())

    def _validate_keep_personal_rows(self, method: Method) -> None:
        """``keep-personal-rows``: only for a method that keeps personal rows, and not with
        ``plgc-persist`` (whose local rows are trained from, not only evaluated with)."""
        keep = self.evaluation.keep_personal_rows
        if keep == KeepPersonalRows.TUNED:
            return
        if not layout(method).personal_rows:
            raise ConfigError(
                f"keep-personal-rows='{keep}' applies to a method that "
                f"keeps personal item rows (pfedrec, personalization='dual', plgc); method "
                f"'{self.method_name}' keeps none: leave keep-personal-rows = 'tuned'."
            )
        if layout(method).train_from_personal:
            raise ConfigError(
                "keep-personal-rows='positives' and plgc-persist = true do not combine: "
                "persistent local rows are trained from in later rounds, not only evaluated "
                "with. Set one of them back (keep-personal-rows = 'tuned' or plgc-persist = "
                "false)."
            )

    @property
    def method_name(self) -> str:
        """The ``method`` key: the registered method the run trains."""
        return self.group(MethodKeys).method

    @cached_property
    def data(self) -> DataSettings:
        """What the data layer reads: the dataset, where its files are, the protocol, the
        keys of the generated and of the user's own dataset."""
        return DataSettings.of(self)

    def resolved_data_dir(self) -> str:
        """``data-dir``, else ``$FEDREC_DATA_DIR``, else '' (= download into the cache)."""
        return DataSettings.of(self).resolved_data_dir()

    def results_path(self, run_name: str) -> Path:
        """Folder of one run's results."""
        return Path(self.outputs.results_dir) / run_name
