"""The FAB (what ``flwr run`` ships to every SuperLink, SuperNode and app process) holds the
two top-level component files and the runtime package only: ``flwr build`` of the project,
its files listed, and the ServerApp and ClientApp loaded from it with the lab unimportable."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = "fedrec_flwr"
#: The components Flower loads, thin files at the top of the project.
COMPONENTS = ("server_app.py", "client_app.py")
#: Flower's own metadata in every FAB.
FLOWER_FILES = (".info/",)
#: What the project folder holds besides the runtime: none of it belongs in the FAB.
LAB_PARTS = ("fedrec_lab", "conf", "tests", "docs")

# Loads the components from the unpacked FAB (the current folder) with fedrec_lab refused,
# as Flower does: "module:attribute".
LOAD = """
import importlib, sys
from pathlib import Path

class NoLab:
    def find_spec(self, name, path=None, target=None):
        if name == "fedrec_lab" or name.startswith("fedrec_lab."):
            raise ImportError(f"{name} imported by the runtime")

sys.meta_path.insert(0, NoLab())
sys.path.insert(0, str(Path.cwd()))
for reference in sys.argv[1:]:
    module, attribute = reference.split(":")
    app = getattr(importlib.import_module(module), attribute)
    print(reference, type(app).__name__, importlib.import_module(module).__file__)
print("fedrec_flwr", "package", importlib.import_module("fedrec_flwr").__file__)
"""


@pytest.fixture(scope="module")
def fab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``flwr build`` of a copy of the project (the folder's name must be a valid app name),
    lab included, so that the build has to leave it out."""
    app = tmp_path_factory.mktemp("fab") / "fedrec-app"
    app.mkdir()
    for name in ("pyproject.toml", ".gitignore", "README.md", *COMPONENTS):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, app / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in (RUNTIME, *LAB_PARTS):
        if (ROOT / part).is_dir():
            shutil.copytree(ROOT / part, app / part, ignore=ignore)
    flwr = Path(sys.executable).with_name("flwr")
    done = subprocess.run(
        [str(flwr) if flwr.exists() else "flwr", "build", "--app", str(app)],
        cwd=app.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    built = list(app.parent.glob("*.fab"))
    assert len(built) == 1, done.stdout
    return built[0]


def test_the_fab_holds_pyproject_the_components_and_the_runtime_package_only(fab: Path) -> None:
    names = zipfile.ZipFile(fab).namelist()
    assert set(COMPONENTS) <= set(names)
    outside = [
        n
        for n in names
        if n not in ("pyproject.toml", *COMPONENTS)
        and not n.startswith(f"{RUNTIME}/")
        and not n.startswith(FLOWER_FILES)
    ]
    assert outside == []
    assert not [n for n in names if n.startswith(tuple(f"{part}/" for part in LAB_PARTS))]
    runtime = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / RUNTIME).rglob("*.py"))
    assert sorted(n for n in names if n.startswith(f"{RUNTIME}/")) == runtime


def test_the_components_load_from_the_fab_without_the_lab(fab: Path, tmp_path: Path) -> None:
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(fab).extractall(unpacked)
    pyproject = tomllib.loads((unpacked / "pyproject.toml").read_text())
    components = pyproject["tool"]["flwr"]["app"]["components"]
    references = [components["serverapp"], components["clientapp"]]
    assert references == ["server_app:app", "client_app:app"]
    done = subprocess.run(
        [sys.executable, "-c", LOAD, *references],
        cwd=unpacked,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    loaded = [line.split() for line in done.stdout.splitlines()]
    assert [(ref, kind) for ref, kind, _ in loaded] == [
        ("server_app:app", "ServerApp"),
        ("client_app:app", "ClientApp"),
        ("fedrec_flwr", "package"),  # the apps the components name: the FAB's own copy
    ]
    assert all(Path(file).is_relative_to(unpacked) for _, _, file in loaded)
