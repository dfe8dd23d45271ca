"""Run-config values from the text of a command line: ``key=value`` read as the key's type.

``fedrec run dataset=file data-file=logs/clicks.csv seed=1`` reaches the program as the words
the shell leaves: a string key takes its word as it is, a number or a boolean is read as
written; a TOML literal (``dataset='file'``, kept by double quotes around it) still works.
The types are those the keys declare (:class:`~fedrec_flwr.schema.Key`). Imports nothing of
the project but the schema.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

from fedrec_flwr.schema import ConfigError, Key, Scalar


def toml_literal(text: str) -> Any:
    """``text`` read as one TOML value (``'file'``, ``0.5``, ``true``), None if it is none."""
    try:
        parsed = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        return None
    return parsed["v"] if list(parsed) == ["v"] else None


def python_number(text: str) -> int | float | None:
    """``text`` as Python reads an integer, else a float (``.5``, ``1.``); None if neither."""
    for kind in (int, float):
        try:
            return kind(text.strip())
        except ValueError:
            continue
    return None


def value_from_text(key: Key, text: str) -> Scalar:
    """The value of ``key=text`` on a command line, read as the key's type.

    A string key takes the text as it is (``dataset=file``, ``data-file=my logs.csv`` once
    the shell has removed its quotes), or the string of a quoted TOML literal
    (``dataset='file'``). A number or boolean is read as a TOML literal (``1e-3``, ``true``),
    then as Python reads a number (``.5``); else ConfigError, naming the type.
    """
    literal = toml_literal(text)
    if key.type is str:
        if isinstance(literal, str):
            return literal
        if literal is not None and key.parse is not None:
            parsed = key.parse(literal)
            if parsed is not None:
                return parsed
        return text
    if literal is None and key.type in (int, float):
        literal = python_number(text)
    if literal is None and key.type is bool and text.strip().lower() in ("true", "false"):
        literal = text.strip().lower() == "true"
    if literal is None:
        kind = {bool: "true or false", int: "an integer", float: "a number"}[key.type]
        example = str(key.default).lower() if key.type is bool else key.default
        raise ConfigError(
            f"{key.name}={text!r}: {key.name} takes {kind}, e.g. {key.name}={example}."
        )
    return key.coerce(literal)


def assignment(item: str, keys: Mapping[str, Key]) -> tuple[str, Scalar]:
    """``key=value`` of a command line: (key, value read as the key's type,
    :func:`value_from_text`). A key not in ``keys`` takes a TOML literal, else the text (the
    configuration's check names it). ConfigError if ``item`` is not ``key=value``."""
    name, sep, text = item.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ConfigError(
            f"'{item}' is not key=value: give each setting as key=value, e.g. seed=1."
        )
    if name in keys:
        return name, value_from_text(keys[name], text)
    literal = toml_literal(text)
    return name, text if literal is None else literal
