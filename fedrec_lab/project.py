"""Where the project folder is: the lab's presets (``conf/``), ``pyproject.toml`` and bench.

The lab never derives it from where its own code lies (an installed wheel has no ``conf/``).
The folder is, in this order:

1. given explicitly (``fedrec --project DIR``, or an argument of :func:`project_root`);
2. ``$FEDREC_PROJECT``;
3. the nearest folder, from the current one upwards, holding a ``pyproject.toml`` whose
   ``[project] name`` is ``fedrec-flwr``.

Otherwise :class:`ProjectNotFoundError` says what to do. Modules that offered a module-level
``PROJECT`` or ``CONF`` keep it through :func:`lazy_paths`: it is looked up when first read.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable
from pathlib import Path

PROJECT_NAME = "fedrec-flwr"
ENVIRONMENT = "FEDREC_PROJECT"


class ProjectNotFoundError(RuntimeError):
    """No fedrec-flwr project folder was given or found; the message says how to give one."""


def is_project(folder: str | Path) -> bool:
    """Whether ``folder`` holds a ``pyproject.toml`` naming the fedrec-flwr project."""
    pyproject = Path(folder) / "pyproject.toml"
    try:
        name = tomllib.loads(pyproject.read_text()).get("project", {}).get("name")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return name == PROJECT_NAME


def find_project(start: str | Path | None = None) -> Path | None:
    """The nearest project folder at or above ``start`` (default: the current folder)."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if is_project(folder):
            return folder
    return None


def project_root(given: str | Path | None = None) -> Path:
    """The project folder: ``given``, else ``$FEDREC_PROJECT``, else found from the current
    folder upwards; raises :class:`ProjectNotFoundError` naming the three ways to give it."""
    for source, value in (("--project", given), (ENVIRONMENT, os.environ.get(ENVIRONMENT))):
        if value:
            folder = Path(value).expanduser().resolve()
            if not is_project(folder):
                raise ProjectNotFoundError(
                    f"{source} {value}: no pyproject.toml with [project] name "
                    f"'{PROJECT_NAME}' there; give the folder of your fedrec-flwr checkout"
                )
            return folder
    found = find_project()
    if found is None:
        raise ProjectNotFoundError(
            f"no fedrec-flwr project found from {Path.cwd()} upwards (a pyproject.toml with "
            f"[project] name '{PROJECT_NAME}'). Run from your checkout (or a folder below "
            f"it), pass --project DIR, or set {ENVIRONMENT}=DIR."
        )
    return found


def conf_dir(given: str | Path | None = None) -> Path:
    """The project's preset folder, ``<project>/conf``."""
    return project_root(given) / "conf"


#: The lazily looked-up module-level names modules may offer, and how each is found.
LAZY_PATHS: dict[str, Callable[[], Path]] = {"PROJECT": project_root, "CONF": conf_dir}


def lazy_paths(module: str, *names: str) -> Callable[[str], Path]:
    """A module ``__getattr__`` that answers ``names`` (``PROJECT``, ``CONF``) when read::

    __getattr__ = lazy_paths(__name__, "PROJECT")
    """
    unknown = set(names) - set(LAZY_PATHS)
    if unknown:
        raise ValueError(f"lazy_paths: {sorted(unknown)} unknown; choose from {list(LAZY_PATHS)}")

    def module_getattr(name: str) -> Path:
        if name in names:
            return LAZY_PATHS[name]()
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return module_getattr
