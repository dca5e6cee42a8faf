"""The package's shape, read from its source: no import circles between ``promem_fast`` modules and no module
longer than a reader can hold, so that each new feature (the store, the service, Ray) has one obvious place
to go and a module can be read, tested and replaced on its own (issue 17).

Imports are found with :mod:`ast`, without importing anything. An import inside a function counts as much
as one at the top: it runs later, but it still ties the two modules together, and a circle closed by one
(the old ``cli`` <-> ``eval.cli`` pair) is a circle in the layering all the same.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "promem_fast"

MAX_LINES = 450
"""Past this, a module has usually grown a second concern that deserves a module of its own."""


@dataclass(frozen=True)
class Import:
    """One import statement's edge from the importing module to a ``promem_fast`` module."""

    source: str
    target: str
    line: int
    deferred: bool
    """Inside a function: it runs when the function is called, not when the module is imported."""

    def __str__(self) -> str:
        where = " (inside a function)" if self.deferred else ""
        return f"{self.source} line {self.line} imports {self.target}{where}"


def module_files(package: Path) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` file of ``package`` (a package is its ``__init__``)."""
    files: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def _bound_names(tree: ast.Module) -> set[str]:
    """Names a module defines at its top level (what ``from module import name`` can take from it); ``*``
    among them when it star-imports, since its names are then not all known without importing it."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def _deferred_lines(tree: ast.Module) -> set[int]:
    """Line numbers of the import statements that sit inside a function body."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines.update(n.lineno for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return lines


def imports(package: Path) -> list[Import]:
    """Every import from one module of ``package`` to another.

    ``from pkg import name`` points at the submodule ``pkg.name`` when there is one, else at ``pkg`` itself
    when its ``__init__`` defines ``name``; a name that is neither is a compiled submodule (``_native``),
    which has no Python imports of its own and so closes no circle.
    """
    files = module_files(package)
    trees = {name: ast.parse(path.read_text(encoding="utf-8"), str(path)) for name, path in files.items()}

    def known(dotted: str) -> str | None:
        while dotted and dotted not in files:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found: list[Import] = []
    for source, tree in trees.items():
        deferred = _deferred_lines(tree)
        is_package = files[source].name == "__init__.py"
        for node in ast.walk(tree):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [known(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = source if is_package else source.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                for alias in node.names:
                    if f"{base}.{alias.name}" in files:
                        targets.append(f"{base}.{alias.name}")
                    elif base in files and alias.name != "*" and not {alias.name, "*"} & _bound_names(trees[base]):
                        targets.append(None)
                    else:
                        targets.append(known(base))
            for target in dict.fromkeys(targets):
                if target is not None and target != source:
                    found.append(Import(source, target, node.lineno, node.lineno in deferred))
    return found


def circles(edges: list[Import]) -> list[list[Import]]:
    """The import circles: for each group of modules that reach each other, the imports inside the group.

    Groups are the strongly connected components of the import graph (Tarjan's algorithm, iteratively).
    """
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in sorted(graph):
        if root in order:
            continue
        work = [(root, iter(sorted(graph[root])))]
        order[root] = low[root] = len(order)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == order[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(group)
            elif child not in order:
                order[child] = low[child] = len(order)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], order[child])
    return [sorted((e for e in edges if e.source in g and e.target in g), key=str) for g in groups]


def long_files(package: Path) -> dict[str, int]:
    """Path under ``package`` -> line count, for the modules past :data:`MAX_LINES`."""
    counts = {path.relative_to(package).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
              for path in package.rglob("*.py")}
    return {name: n for name, n in sorted(counts.items()) if n > MAX_LINES}


# ---------------------------------------------------------------------------------------------- the package
def test_no_import_circles_between_modules() -> None:
    found = circles(imports(PACKAGE))
    assert not found, "import circles:\n" + "\n\n".join("\n".join(map(str, circle)) for circle in found)


def test_no_module_is_longer_than_the_limit() -> None:
    over = long_files(PACKAGE)
    assert not over, f"past {MAX_LINES} lines (split where a reader would look for separate things): {over}"


# -------------------------------------------------------------------------------------------- the checkers
def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_a_circle_closed_by_an_import_inside_a_function_is_found(tmp_path: Path) -> None:
    """The shape of the old ``cli`` <-> ``eval.cli`` circle: one side at the top, the other in a function."""
    package = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/cli.py": "def main():\n    from pkg.eval.cli import add\n    return add\n",
        "pkg/eval/__init__.py": "",
        "pkg/eval/cli.py": "from .. import cli\n\ndef add():\n    return cli\n",
        "pkg/eval/data.py": "from ..cli import main\n",
    })
    found = circles(imports(package))
    assert [[str(edge) for edge in circle] for circle in found] == [[
        "pkg.cli line 2 imports pkg.eval.cli (inside a function)",
        "pkg.eval.cli line 1 imports pkg.cli",
    ]]


@pytest.mark.parametrize(("files", "expected"), [
    pytest.param({
        "pkg/__init__.py": "from pkg import native\nfrom pkg.engine import Engine\n",
        "pkg/native.py": "from pkg import _native\n",
        "pkg/engine.py": "from . import native\nfrom .types import Session\n\nclass Engine:\n    pass\n",
        "pkg/types.py": "import json\n\nclass Session:\n    pass\n",
    }, {("pkg", "pkg.native", False), ("pkg", "pkg.engine", False), ("pkg.engine", "pkg.native", False),
        ("pkg.engine", "pkg.types", False)}, id="layers-and-a-compiled-submodule"),
    pytest.param({
        "pkg/__init__.py": "from pkg.engine import Engine\n",
        "pkg/engine.py": "class Engine:\n    pass\n",
        "pkg/helper.py": "from pkg import Engine\n",
        "pkg/other.py": "def f():\n    import pkg.helper\n",
    }, {("pkg", "pkg.engine", False), ("pkg.helper", "pkg", False), ("pkg.other", "pkg.helper", True)},
        id="a-name-taken-from-a-package"),
])
def test_each_import_points_at_the_module_that_provides_the_name(
    tmp_path: Path, files: dict[str, str], expected: set[tuple[str, str, bool]]
) -> None:
    """Relative and absolute forms alike; a compiled submodule (``_native``) is no edge, so it closes no circle."""
    edges = imports(_write(tmp_path, files))
    assert {(e.source, e.target, e.deferred) for e in edges} == expected
    assert circles(edges) == []


def test_long_files_counts_lines_per_module(tmp_path: Path) -> None:
    package = _write(tmp_path, {"pkg/__init__.py": "", "pkg/sub/long.py": "x = 1\n" * (MAX_LINES + 1),
                                "pkg/short.py": "x = 1\n" * MAX_LINES})
    assert long_files(package) == {"sub/long.py": MAX_LINES + 1}
