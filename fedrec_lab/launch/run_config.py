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

from fedrec_lab.presets import resolve
from fedrec_lab.project import project_root


class ConfigError(ValueError):
    """The run configuration would be refused (unknown key, wrong type, impossible value)."""


def merged_run_config(preset: str | Path | None, overrides: Sequence[str]) -> dict[str, Any]:
    """A preset's keys (if any, its base's included) updated with ``key=value`` overrides
    (TOML literals), and its method's reference defaults for the keys neither sets (before
    ``pyproject.toml``'s defaults fill the rest: :func:`~fedrec_flwr.config.reference_defaults`)."""
    config: dict[str, Any] = {}
    if preset:
        config.update(resolve(preset))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"override '{item}' is not key=value")
        try:
            config.update(tomllib.loads(f"{key.strip()} = {value}"))
        except tomllib.TOMLDecodeError:
            raise SystemExit(
                f"override '{item}': the value is not a TOML literal (quote strings: "
                f"{key.strip()}='{value}'; floats need a dot: 1.0)"
            ) from None
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


def check_run_config(config: dict[str, Any], project: Path | None = None) -> list[str]:
    """Refuse, naming the key, what Flower would refuse with only "Invalid run configuration".

    Keys are checked against the project's ``[tool.flwr.app.config]``; then the merged
    configuration is validated as the ServerApp will (types, impossible values). A user's
    file (``dataset = "file"``) is read and split here, so that a bad one is refused before
    the run starts; returns its dataset card (empty for the named datasets).
    """
    project = project_root(project)
    defaults = project_defaults(project)
    unknown = unknown_key_message(config, list(defaults))
    if unknown:
        raise ConfigError(
            f"{unknown}. The keys are those of [tool.flwr.app.config] in "
            f"{project / 'pyproject.toml'} (README: Run configuration)."
        )
    from fedrec_flwr.config import RunConfig  # imports torch: only when a run is checked
    from fedrec_flwr.data import user_dataset
    from fedrec_flwr.data.prepared import check_user_file

    try:
        checked = RunConfig.from_mapping({**defaults, **config})
        return check_user_file(checked) if checked.dataset == user_dataset.FILE_DATASET else []
    except ValueError as error:
        raise ConfigError(str(error)) from None


def write_run_config(config: dict[str, Any], path: Path) -> Path:
    """Write a flat run config as TOML (strings quoted, booleans lower-case)."""
    path.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in config.items()))
    return path
