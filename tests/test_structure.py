"""The package's shape, read from its source: a layer contract between its packages, no import circles
between modules or packages, and no module longer than a reader can hold, so that each new feature (the
store, the service, Ray) has one obvious place to go and a module can be read, tested and replaced on its
own (issues 17 and 25).

The contract (:data:`LAYERS`, DESIGN.md's order): foundations -> backends -> requests and services ->
pipeline -> persistence -> engine -> store -> eval and distributed -> serve -> cli, with the test stand-ins
(``promem_fast.testing``) above them all. A package may import its own layer and those below it, never one
above; so the product never imports ``promem_fast.testing``, nor names it: the stand-ins join the backend
registry as a plugin (an entry point), read only when the ``scripted`` profile asks for one of them.

Imports are found with :mod:`ast`, without importing anything. An import inside a function counts as much
as one at the top: it runs later, but it still ties the two modules together, and a circle closed by one
(the old ``cli`` <-> ``eval.cli`` pair) is a circle in the layering all the same.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "promem_fast"

MAX_LINES = 450
"""Past this, a module has usually grown a second concern that deserves a module of its own."""

LAYERS: tuple[tuple[str, ...], ...] = (
    ("types", "errors", "version", "deps", "config", "config_merge", "config_ranking", "config_compression",
     "prompts", "native", "jsonl", "io", "models", "manifest", "run_summary", "isolation", "progress", "shapes", "names",
     "private", "prefix_cache", "times", "loops",
     "verbatim"),
    ("backends",),
    ("requests", "services", "parsing", "context"),
    ("pipeline",),
    ("persistence",),
    ("engine", "driver", "calibration"),
    ("store", "adding", "memory", "async_memory"),
    ("eval", "distributed"),
    ("serve", "client"),
    ("cli",),
    ("testing",),
)
"""The layers, lowest first; each name is a module or subpackage directly under ``promem_fast``."""


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


def unit_of(module: str) -> str | None:
    """The contract's unit of a dotted module: ``promem_fast.store.qa`` -> ``store``; ``None`` for the
    package's face (``promem_fast`` itself, which only hands names on) and for modules of another package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def layer_of(unit: str) -> int | None:
    """The unit's layer (0 = foundations), ``None`` for one missing from :data:`LAYERS`."""
    return next((number for number, names in enumerate(LAYERS) if unit in names), None)


def package_edges(edges: list[Import]) -> list[Import]:
    """The module imports that cross from one unit (:func:`unit_of`) to another, named by unit."""
    out = []
    for edge in edges:
        source, target = unit_of(edge.source), unit_of(edge.target)
        if source and target and source != target:
            out.append(Import(source, target, edge.line, edge.deferred))
    return out


def against_the_layers(edges: list[Import]) -> list[str]:
    """Every import from a unit to one on a higher layer, with the module and line that makes it (units with
    no layer are left to :func:`test_every_package_and_top_module_has_a_layer`)."""
    wrong = []
    for edge in edges:
        source, target = unit_of(edge.source), unit_of(edge.target)
        low, high = (layer_of(source) if source else None), (layer_of(target) if target else None)
        if low is not None and high is not None and high > low:
            wrong.append(str(edge))
    return sorted(wrong)


def two_way(edges: list[Import]) -> list[tuple[str, str]]:
    """The pairs of units that import each other (the shortest circles, the way a reader counts them)."""
    pairs = {(e.source, e.target) for e in edges}
    return sorted((a, b) for a, b in pairs if a < b and (b, a) in pairs)


# ---------------------------------------------------------------------------------------------- the package
def test_every_package_and_top_module_has_a_layer() -> None:
    units = {unit_of(name) for name in module_files(PACKAGE)} - {None}
    missing = sorted(u for u in units if not any(u in names for names in LAYERS))  # type: ignore[operator]
    assert not missing, f"promem_fast units with no layer in LAYERS: {missing}"


def test_no_import_runs_up_the_layers() -> None:
    wrong = against_the_layers(imports(PACKAGE))
    assert not wrong, "imports against the layer contract:\n" + "\n".join(wrong)


def test_the_product_loads_no_stand_in_until_the_scripted_profile_asks_for_one() -> None:
    """What the import graph cannot see (an ``importlib`` call, a registry string): every product layer
    imported, then the ``scripted`` backends created through the registry, in a fresh interpreter."""
    code = (
        "import importlib, sys\n"
        "for name in ('promem_fast', 'promem_fast.cli', 'promem_fast.store.store', 'promem_fast.store.qa',\n"
        "             'promem_fast.eval.runner', 'promem_fast.eval.judges', 'promem_fast.distributed.driver',\n"
        "             'promem_fast.serve.app', 'promem_fast.serve.job_worker', 'promem_fast.backends'):\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('promem_fast.testing')))\n"
        "from promem_fast.backends import create\n"
        "from promem_fast.config import EngineConfig\n"
        "config = EngineConfig.profile('scripted')\n"
        "print(type(create('llm', 'scripted', config.llm)).__module__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["[]", "promem_fast.testing.llm_scripted"]


def test_no_string_of_the_product_names_a_stand_in() -> None:
    """A ``module:Class`` string or an ``importlib`` call would load a stand-in behind the import graph's back;
    the product's values (documentation apart: strings standing alone as statements) name none."""
    named = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "testing":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
        named += [f"{path.relative_to(PACKAGE)}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
                  and "promem_fast.testing" in node.value]
    assert named == []


BENCH_ROLES = ("common", "suites", "runs", "gpu", "tools")
"""The folders of ``benchmarks/`` (its README says what each holds)."""


def test_benchmarks_sit_in_role_folders_edit_no_path_and_share_no_imports_with_the_tests() -> None:
    """Benchmarks are modules of the ``benchmarks`` package run from the repository root: no ``sys.path``
    edit, nothing imported from ``tests/``, and no test imports them (what both need is in ``testing``)."""
    bench, tests = PACKAGE.parent / "benchmarks", PACKAGE.parent / "tests"
    loose = [p.name for p in bench.glob("*.py") if p.name != "__init__.py"]
    unknown = [p.name for p in bench.iterdir() if p.is_dir() and p.name not in (*BENCH_ROLES, "results")
               and not p.name.startswith((".", "__"))]
    wrong: list[str] = []
    for folder, foreign in ((bench, ("tests", "conftest")), (tests, ("benchmarks",))):
        for path in folder.rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text)
            named = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
            named |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
            if any(n.split(".")[0] in foreign for n in named) or (folder == bench and "sys.path" in text):
                wrong.append(str(path.relative_to(PACKAGE.parent)))
    assert (loose, unknown, wrong) == ([], [], [])


def test_no_import_circles_between_packages() -> None:
    edges = package_edges(imports(PACKAGE))
    found = circles(edges)
    named = [sorted({e.source for e in circle}) for circle in found]
    assert not found, (f"packages that reach each other: {named}; of them importing each other directly: "
                       + ", ".join(f"{a} <-> {b}" for a, b in two_way(edges)))


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


def test_the_layer_checker_names_an_upward_import_and_a_package_circle() -> None:
    """``backends`` (layer 1) importing ``store`` (layer 6) is against the contract, and with the store's
    own import of ``backends`` it closes a package circle, as the scripted model did from ``backends/``."""
    edges = [Import("promem_fast.backends.llm_scripted", "promem_fast.store.prompts", 7, False),
             Import("promem_fast.store.store", "promem_fast.backends.base", 3, False),
             Import("promem_fast.store.store", "promem_fast.store.rows", 4, False)]
    assert against_the_layers(edges) == [
        "promem_fast.backends.llm_scripted line 7 imports promem_fast.store.prompts"]
    assert [sorted({e.source for e in c}) for c in circles(package_edges(edges))] == [["backends", "store"]]
    assert two_way(package_edges(edges)) == [("backends", "store")]
    assert unit_of("promem_fast") is None and unit_of("promem_fast.store.qa") == "store"


def private_reaches(package: Path) -> list[str]:
    """Places where a module touches another object's private name (``x._name``) or imports one from another
    package: ``self``/``cls`` are the object itself, and so is an instance a classmethod of its own class has
    just built (``found = cls(...)``); ``os._exit`` is the standard library's."""
    found = []
    for name, path in module_files(package).items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        built = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                 and node.value.func.id == "cls" for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                base = node.value
                if isinstance(base, ast.Name) and base.id in {"self", "cls", "os", *built}:
                    continue
                found.append(f"{name} line {node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(f"{package.name}."):
                unit = unit_of(node.module)
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__") and unit != unit_of(name):
                        found.append(f"{name} line {node.lineno}: imports {node.module}.{alias.name}")
    return found


@pytest.mark.parametrize("unit", ["store", "persistence", "serve", "eval", "cli", "memory"])
def test_no_private_name_crosses_an_object_or_a_package(unit: str) -> None:
    """The store's helpers, the service and the command line use public names only (issue 33: 16 reach-ins of
    ``store._x``, ``serve`` reading ``_user_pk``, a protocol made of private attributes)."""
    assert [r for r in private_reaches(PACKAGE) if r.startswith((f"promem_fast.{unit}.", f"promem_fast.{unit} "))] \
        == []
