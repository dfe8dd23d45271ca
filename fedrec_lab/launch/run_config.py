"""A run's configuration: a preset merged with ``key=value`` overrides, checked before a
run is submitted, written as the flat TOML ``flwr run --run-config`` reads.

:func:`merged_run_config` is where every lab command reads a preset with its overrides.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedrec_flwr.data.user_keys import FILE_DATASET
from fedrec_lab.presets import resolve
from fedrec_lab.project import project_root


class ConfigError(ValueError):
    """The run configuration would be refused (unknown key, wrong type, impossible value)."""


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``key=value`` items of a command line, each value read as its key's declared type
    (:func:`fedrec_flwr.key_text.value_from_text`): ``dataset=file``, ``data-file=logs/x.csv``
    and ``seed=1`` as typed in a shell, TOML literals (``dataset='file'``) too. Raises
    :class:`ConfigError` for an item that is not ``key=value`` or a value not of its type."""
    from fedrec_flwr.config import RunConfig  # imports torch: only when a run is configured
    from fedrec_flwr.key_text import assignment
    from fedrec_flwr.schema import ConfigError as SchemaError

    keys = {key.name: key for key in RunConfig.declared_keys()}
    config: dict[str, Any] = {}
    for item in overrides_of(items):
        try:
            key, value = assignment(item, keys)
        except SchemaError as error:
            raise ConfigError(str(error)) from None
        config[key] = value
    return config


def overrides_of(items: Sequence[str]) -> list[str]:
    """The items, each checked to be ``key=value`` (a path or a stray word is named)."""
    for item in items:
        if "=" not in item or not item.partition("=")[0].strip():
            hint = " (a preset comes first, and ends in .toml)" if item.endswith(".toml") else ""
            raise ConfigError(f"'{item}' is not key=value{hint}: give settings as key=value, "
                              "e.g. seed=1 dataset=file")  # fmt: skip
    return list(items)


def merged_run_config(preset: str | Path | None, overrides: Sequence[str]) -> dict[str, Any]:
    """A preset's keys (if any, its base's included) updated with ``key=value`` overrides
    (:func:`parse_overrides`), and its method's reference defaults for the keys neither sets
    (before ``pyproject.toml``'s defaults fill the rest:
    :func:`~fedrec_flwr.config.reference_defaults`)."""
    config: dict[str, Any] = {}
    if preset:
        config.update(resolve(preset))
    config.update(parse_overrides(overrides))
    from fedrec_flwr.config import with_reference_defaults  # imports torch: only when run

    return with_reference_defaults(config)


def project_defaults(project: Path | None = None) -> dict[str, Any]:
    """``[tool.flwr.app.config]`` of the project's ``pyproject.toml``: the keys Flower accepts."""
    pyproject = tomllib.loads((project_root(project) / "pyproject.toml").read_text())
    return dict(pyproject["tool"]["flwr"]["app"]["config"])


def unknown_key_message(config: dict[str, Any], known: Sequence[str]) -> str | None:
    """Name the first key not in ``known`` with the closest known key; None if all are known."""
    for key in config:
        if key not in known:
            hint = difflib.get_close_matches(key, known, n=1)
            return f"unknown run-config key '{key}'" + (
                f" (did you mean '{hint[0]}'?)" if hint else ""
            )
    return None


def check_run_config(
    config: dict[str, Any], project: Path | None = None, data: bool = True
) -> list[str]:
    """Refuse, naming the key, what Flower would refuse with only "Invalid run configuration".

    Keys are checked against the project's ``[tool.flwr.app.config]``; then the merged
    configuration is validated as the ServerApp will (types, impossible values). With
    ``data``, a user's file (``dataset = "file"``) is read and split here, so that a bad one
    is refused before the run starts; returns its dataset card (empty otherwise).
    """
    checked = checked_run_config(config, project)
    if data and checked.data.dataset == FILE_DATASET:
        return check_data(config, project)
    return []


def checked_run_config(config: dict[str, Any], project: Path | None = None) -> Any:
    """The :class:`~fedrec_flwr.config.RunConfig` of ``config`` over the project's defaults;
    :class:`ConfigError` naming an unknown key, a wrong type or an impossible value."""
    project = project_root(project)
    defaults = project_defaults(project)
    unknown = unknown_key_message(config, list(defaults))
    if unknown:
        raise ConfigError(
            f"{unknown}. The keys are those of [tool.flwr.app.config] in "
            f"{project / 'pyproject.toml'} (README: Run configuration)."
        )
    from fedrec_flwr.config import RunConfig  # imports torch: only when a run is checked

    try:
        return RunConfig.from_mapping({**defaults, **config})
    except ValueError as error:
        raise ConfigError(str(error)) from None


def check_data(config: dict[str, Any], project: Path | None = None) -> list[str]:
    """Split the run's dataset into the cache, unless it is there already (the nodes then
    open it): a named dataset is found in its data folder or downloaded, a user's file read
    and checked. Its dataset card; :class:`ConfigError` with the reason and the fix if the
    data cannot be had (a missing file, a download that fails, a bad row)."""
    from fedrec_flwr.data.prepared import check_prepared

    checked = checked_run_config(config, project)
    try:
        return check_prepared(checked)
    except (ValueError, OSError) as error:  # DataError among them: it says what to do
        raise ConfigError(str(error)) from None


def with_absolute_paths(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with its relative ``results-dir``, ``data-dir``, ``data-file`` and
    ``resume`` made absolute against the current folder (the run's processes start
    elsewhere)."""
    config = dict(config)
    for key in ("results-dir", "data-dir", "data-file", "resume"):
        if config.get(key):
            config[key] = str(Path(config[key]).expanduser().resolve())
    return config


def write_run_config(config: dict[str, Any], path: Path) -> Path:
    """Write a flat run config as TOML (strings quoted, booleans lower-case)."""
    path.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in config.items()))
    return path
