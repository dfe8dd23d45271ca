"""The run configuration: one typed, validated object built from Flower's run config.

Flower hands both apps ``context.run_config`` (the ``[tool.flwr.app.config]`` table of
``pyproject.toml`` merged with ``--run-config`` overrides). :func:`RunConfig.from_mapping` turns
it into a :class:`RunConfig`, rejecting unknown keys, wrong types and impossible values with a
message that says what to do.

Each key is declared once, by the module that owns it (:mod:`fedrec_flwr.schema`): the run's
own keys in :mod:`fedrec_flwr.run_keys`, a method's in its module (its card's ``keys``), a
plug-in's beside it (DualPer, PLGC, SAM in :mod:`fedrec_flwr.node.optim`, the local
schedule in :mod:`fedrec_flwr.node.schedule`, LDP, decoys and
secure aggregation in :mod:`fedrec_flwr.privacy`), a dataset's in
:mod:`fedrec_flwr.data.registry`. This module composes them (:func:`key_groups`);
``pyproject.toml`` and ``docs/reference/configuration.md`` are checked against it
(``python -m fedrec_lab.configref``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

from fedrec_flwr.aggregation import DefenceKeys
from fedrec_flwr.data.registry import DataKeys, dataset_key_groups
from fedrec_flwr.data.settings import DATA_DIR_ENV, DataSettings
from fedrec_flwr.methods import Method, build_method, methods
from fedrec_flwr.methods.plgc import PlgcKeys
from fedrec_flwr.methods.plugins import DualKeys
from fedrec_flwr.node.malicious import MALICIOUS_KEYS
from fedrec_flwr.node.optim import SAM_KEYS
from fedrec_flwr.privacy.decoys import DECOY_KEYS
from fedrec_flwr.privacy.ldp import LDP_KEYS
from fedrec_flwr.privacy.secagg import SECAGG_KEYS
from fedrec_flwr.run_keys import (
    EvaluationKeys,
    ExecutionKeys,
    FaultKeys,
    KeepPersonalRows,
    LearningKeys,
    OutputKeys,
    RunGroups,
    ScheduleKeys,
    ServerKeys,
    ServerOptimizerKeys,
    TrainingKeys,
)
from fedrec_flwr.sampling import NegativeSamplerKeys
from fedrec_flwr.schema import AnyGroup, ConfigError, Group, Settings, key

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


def key_groups() -> tuple[AnyGroup, ...]:
    """Every group of run-config keys, in key order (that of ``pyproject.toml``,
    ``config.json`` and the configuration reference)."""
    return (
        MethodKeys,
        DualKeys,
        DataKeys,
        TrainingKeys,
        NegativeSamplerKeys,
        OutputKeys,
        LearningKeys,
        ScheduleKeys,
        SAM_KEYS,
        ServerKeys,
        ServerOptimizerKeys,
        *method_key_groups(),
        PlgcKeys,
        EvaluationKeys,
        ExecutionKeys,
        FaultKeys,
        MALICIOUS_KEYS,
        DefenceKeys,
        LDP_KEYS,
        DECOY_KEYS,
        SECAGG_KEYS,
        *dataset_key_groups(),
    )


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


class RunConfig(Settings, RunGroups):
    """Resolved run configuration; attribute ``foo_bar`` is run-config key ``foo-bar``."""

    @classmethod
    def key_groups(cls) -> tuple[AnyGroup, ...]:
        return key_groups()

    @classmethod
    def reference_defaults(cls, mapping: Mapping[str, Any]) -> dict[str, Any]:
        """The method's paper values for the keys ``mapping`` leaves unset."""
        return reference_defaults(mapping)

    def active_groups(self) -> list[AnyGroup]:
        """The groups whose checks run: a dataset's keys when it is the run's dataset, the
        others when they apply (:meth:`~fedrec_flwr.schema.Group.active`)."""
        dataset = self.group(DataKeys).dataset
        of_dataset = dataset_key_groups()
        return [
            group
            for group in super().active_groups()
            if not isinstance(group, type) or of_dataset.get(group, dataset) == dataset
        ]

    def validate(self) -> None:
        """Raise :class:`ConfigError` for impossible values: each key's and each group's
        checks, then the method's and its plug-ins' own (building it), then
        ``keep-personal-rows`` against the method."""
        super().validate()
        self._validate_keep_personal_rows(build_method(self, num_items=1))

    def _validate_keep_personal_rows(self, method: Method) -> None:
        """``keep-personal-rows``: only for a method that keeps personal rows, and not with
        ``plgc-persist`` (whose local rows are trained from, not only evaluated with)."""
        keep = self.evaluation.keep_personal_rows
        if keep == KeepPersonalRows.TUNED:
            return
        if not method.personal_rows:
            raise ConfigError(
                f"keep-personal-rows='{keep}' applies to a method that "
                f"keeps personal item rows (pfedrec, personalization='dual', plgc); method "
                f"'{self.method_name}' keeps none: leave keep-personal-rows = 'tuned'."
            )
        if method.train_from_personal:
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
