"""The shape of the code: no import cycle between modules and a size budget.

The cycle check reads every ``import`` statement of ``fedrec_flwr/`` and ``fedrec_lab/``,
including those inside functions and under ``if TYPE_CHECKING:``: such an import hides a
cycle from Python at import time, not from a reader. The layers (core, data, methods, run
config, privacy, node | server, apps, the lab above all) are the import-linter contracts of
``pyproject.toml`` (``lint-imports``, run by ``.ci/run``); this test also catches cycles between
the modules of one package.

Budget: no module over 400 lines, no class over 250 lines, no function of the runtime
(``fedrec_flwr/``) over 60 lines, and ``NodeRuntime.train`` (what a node does with a train
message, the upload chain's stages aside) at most 40.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fedrec_flwr", "fedrec_lab")
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250
MAX_FUNCTION_LINES = 60
#: Functions held to a tighter budget: (path, qualified name) -> lines.
TIGHT_FUNCTIONS = {("fedrec_flwr/node/runtime.py", "NodeRuntime.train"): 40}


@dataclass(frozen=True)
class Import:
    """One import statement's edge: ``importer`` imports ``imported`` at ``path:line``."""

    importer: str
    imported: str
    path: Path
    line: int


def package_modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``packages`` under ``root``."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _known_module(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is one of ``modules`` (None: outside them)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute name a ``from ... import`` statement of ``module`` reads from."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def module_imports(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every import of ``module`` into ``modules``, wherever the statement stands."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, path, node)
            # `from package import submodule` imports the submodule; else the name's module.
            targets = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                for alias in node.names
            ]
        for target in targets:
            imported = _known_module(target, modules)
            if imported is not None and imported != module:
                found.append(Import(module, imported, path, node.lineno))
    return found


def import_graph(root: Path, packages: tuple[str, ...]) -> list[Import]:
    """Every import between the modules of ``packages`` under ``root``."""
    modules = package_modules(root, packages)
    return [edge for name, path in modules.items() for edge in module_imports(name, path, modules)]


def cycles(edges: list[Import]) -> list[list[str]]:
    """The import cycles: strongly connected groups of two or more modules (Tarjan)."""
    successors: dict[str, set[str]] = {}
    for edge in edges:
        successors.setdefault(edge.importer, set()).add(edge.imported)
        successors.setdefault(edge.imported, set())
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(successors):
        if start in index:
            continue
        work = [(start, iter(sorted(successors[start])))]
        index[start] = lowest[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    lowest[parent] = min(lowest[parent], lowest[node])
                if lowest[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
            elif child not in index:
                index[child] = lowest[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(successors[child]))))
            elif child in on_stack:
                lowest[node] = min(lowest[node], index[child])
    return sorted(groups)


def describe_cycle(group: list[str], edges: list[Import], root: Path) -> str:
    """A cycle and the import statements that make it, as ``path:line importer -> imported``."""
    members = set(group)
    lines = [
        f"  {edge.path.relative_to(root)}:{edge.line}  {edge.importer} -> {edge.imported}"
        for edge in sorted(set(edges), key=lambda e: (e.importer, e.line, e.imported))
        if edge.importer in members and edge.imported in members
    ]
    return " <-> ".join(group) + "\n" + "\n".join(lines)


def long_modules(root: Path, packages: tuple[str, ...], limit: int) -> dict[str, int]:
    """Modules of more than ``limit`` lines: path relative to ``root`` -> lines."""
    lengths = {
        str(path.relative_to(root)): len(path.read_text(encoding="utf-8").splitlines())
        for path in package_modules(root, packages).values()
    }
    return {path: lines for path, lines in lengths.items() if lines > limit}


def long_classes(root: Path, packages: tuple[str, ...], limit: int) -> dict[tuple[str, str], int]:
    """Classes of more than ``limit`` lines (decorators included): (path, name) -> lines."""
    found = {}
    for path in package_modules(root, packages).values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ClassDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - first + 1
                if lines > limit:
                    found[(str(path.relative_to(root)), node.name)] = lines
    return found


def function_lengths(root: Path, packages: tuple[str, ...]) -> dict[tuple[str, str], int]:
    """Every function's lines (decorators included): (path, qualified name) -> lines."""
    found = {}
    for path in package_modules(root, packages).values():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        scopes: list[tuple[ast.AST, str]] = [(tree, "")]
        while scopes:
            node, prefix = scopes.pop()
            for child in ast.iter_child_nodes(node):
                if not isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    scopes.append((child, prefix))
                    continue
                name = f"{prefix}{child.name}"
                scopes.append((child, f"{name}."))
                if isinstance(child, ast.ClassDef):
                    continue
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                lines = (child.end_lineno or child.lineno) - first + 1
                found[(str(path.relative_to(root)), name)] = lines
    return found


def test_no_import_cycles_counting_local_and_type_checking_imports():
    edges = import_graph(ROOT, PACKAGES)
    found = cycles(edges)
    assert not found, (
        "import cycles (move what both sides need into a lower module; a function-local or "
        "TYPE_CHECKING import only hides the cycle):\n"
        + "\n".join(describe_cycle(group, edges, ROOT) for group in found)
    )


def test_modules_within_the_line_budget():
    found = long_modules(ROOT, PACKAGES, MAX_MODULE_LINES)
    assert not found, (
        f"modules over {MAX_MODULE_LINES} lines (split them by responsibility): {found}"
    )


def test_classes_within_the_line_budget():
    found = long_classes(ROOT, PACKAGES, MAX_CLASS_LINES)
    assert not found, (
        f"classes over {MAX_CLASS_LINES} lines (move a responsibility into a part the class "
        f"holds): {found}"
    )


def test_runtime_functions_within_the_line_budget():
    lengths = function_lengths(ROOT, ("fedrec_flwr",))
    found = {where: n for where, n in lengths.items() if n > MAX_FUNCTION_LINES}
    assert not found, (
        f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps): {found}"
    )
    for where, limit in TIGHT_FUNCTIONS.items():
        assert lengths[where] <= limit, f"{where} has {lengths[where]} lines, over {limit}"


def test_function_lengths_are_counted_with_their_class_and_decorators(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "class A:\n    @staticmethod\n    def f():\n        return 1\n",
        },
    )
    assert function_lengths(tmp_path, ("pkg",)) == {("pkg/a.py", "A.f"): 3}


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(
    "hidden",
    [
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n",
        "def run():\n    from pkg import a\n    return a\n",
        "def run():\n    import pkg.a\n",
        "from . import a\n",
    ],
    ids=["type-checking", "function-local", "dotted", "relative"],
)
def test_a_cycle_behind_a_hidden_import_is_found(tmp_path, hidden):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a/__init__.py": "from pkg.b import B\n\nA = B\n",
            "pkg/a/inner.py": "",
            "pkg/b.py": hidden + "B = 1\n",
            "pkg/c.py": "from pkg.a import A\n",
        },
    )
    edges = import_graph(tmp_path, ("pkg",))
    assert cycles(edges) == [["pkg.a", "pkg.b"]]
    assert "pkg/b.py:" in describe_cycle(cycles(edges)[0], edges, tmp_path)


def test_no_cycle_where_imports_go_one_way(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low.py": "import os\n",
            "pkg/high.py": "from pkg.low import os\n\ndef f():\n    from pkg import low\n",
        },
    )
    assert cycles(import_graph(tmp_path, ("pkg",))) == []


def test_the_budget_counts_lines_and_class_bodies(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(6))
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/m.py": f"@dataclass\nclass Big:\n{body}\n"})
    assert long_modules(tmp_path, ("pkg",), 7) == {"pkg/m.py": 8}
    assert long_classes(tmp_path, ("pkg",), 7) == {("pkg/m.py", "Big"): 8}
    assert long_classes(tmp_path, ("pkg",), 8) == {}
