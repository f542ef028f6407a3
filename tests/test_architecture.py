"""The package's shape, checked from its source (AST only: fast, imports nothing, no Spark).

Why: the flow sources -> decode -> history -> state -> reconcile stays readable only while
nothing imports upward, no two modules import each other, no module reaches into another's
private names, and no file or function grows past what a reader takes in at once. These
rules are cheap to break by accident and hard to see in review, so they are tests.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "pipelines"
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80

#: package -> the pipelines packages it must never import (the flow only goes downward).
LAYERS = {
    "pipelines.decode": ("sources", "history", "state", "reconcile", "lake"),
    "pipelines.sources": ("history", "state", "reconcile", "lake"),
    "pipelines.history": ("state", "reconcile"),
    "pipelines.state": ("reconcile",),
}
#: modules below every package: they import no pipelines module at all.
BASE_MODULES = ("pipelines.model", "pipelines.shipped_schemas")
#: the only importer of the demo generator outside its own package: the CLI's demo command.
DEMO_IMPORTERS = ("pipelines.cli.demo",)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module (a submodule when ``from pkg import submodule``)
    names: tuple[str, ...]  # names taken with ``from ... import``
    line: int
    top_level: bool  # runs at import time (not in a function, not under TYPE_CHECKING)

    def where(self) -> str:
        return f"{self.module}:{self.line} imports {self.target}"


def _module_name(repo: Path, path: Path) -> str:
    parts = path.relative_to(repo).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules(repo: Path) -> dict[str, Path]:
    return {_module_name(repo, p): p for p in sorted((repo / "pipelines").rglob("*.py"))}


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module name of a ``from`` import (relative ones resolved)."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(body: list[ast.stmt], top_level: bool) -> Iterator[tuple[ast.stmt, bool]]:
    """Every statement, with whether it runs when the module is imported."""
    for node in body:
        yield node, top_level
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _walk(node.body, False)
        elif isinstance(node, ast.ClassDef):
            yield from _walk(node.body, top_level)
        elif isinstance(node, ast.If):
            inner = top_level and not _is_type_checking(node)
            yield from _walk(node.body, inner)
            yield from _walk(node.orelse, top_level)
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(node, field, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.AST):
                    yield from _walk(block, top_level)  # type: ignore[arg-type]


@cache
def _imports(repo: Path) -> tuple[Import, ...]:
    modules = _modules(repo)
    found = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node, top in _walk(tree.body, True):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("pipelines"):
                        found.append(Import(module, alias.name, (), node.lineno, top))
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, path, node)
                if not base.startswith("pipelines"):
                    continue
                names = tuple(a.name for a in node.names)
                subs = [n for n in names if f"{base}.{n}" in modules]
                for sub in subs:
                    found.append(Import(module, f"{base}.{sub}", (), node.lineno, top))
                rest = tuple(n for n in names if n not in subs)
                if rest or not subs:
                    found.append(Import(module, base, rest, node.lineno, top))
    return tuple(found)


def _in(target: str, package: str) -> bool:
    return target == package or target.startswith(package + ".")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


# ------------------------------------------------------------------------------ the rules


def import_cycles(repo: Path) -> list[str]:
    """Cycles of module-level imports (function-level and TYPE_CHECKING imports excluded)."""
    graph: dict[str, set[str]] = {m: set() for m in _modules(repo)}
    for imp in _imports(repo):
        if imp.top_level and imp.target in graph and imp.target != imp.module:
            graph[imp.module].add(imp.target)
    cycles, state = [], dict.fromkeys(graph, 0)  # 0 new, 1 on the stack, 2 done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state[nxt] == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt):], nxt]))
            elif state[nxt] == 0:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if state[node] == 0:
            visit(node, [])
    return cycles


def private_imports(repo: Path) -> list[str]:
    """``from x import _name`` (or a private module) taken from another module."""
    bad = [f"{i.where()} {', '.join(n for n in i.names if _private(n))}"
           for i in _imports(repo) if i.target != i.module and any(_private(n) for n in i.names)]
    bad += [i.where() for i in _imports(repo)
            if _private(i.target.rsplit(".", 1)[-1])
            and i.target.rsplit(".", 1)[0] != i.module.rsplit(".", 1)[0]]
    return bad


def too_large(repo: Path) -> list[str]:
    """Files over MAX_FILE_LINES and functions (decorators included) over MAX_FUNCTION_LINES."""
    bad = []
    for path in _modules(repo).values():
        text = path.read_text()
        lines = text.count("\n") + (not text.endswith("\n") and bool(text))
        if lines > MAX_FILE_LINES:
            bad.append(f"{path.relative_to(repo)}: {lines} lines > {MAX_FILE_LINES}")
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = (node.end_lineno or node.lineno) - start + 1
                if length > MAX_FUNCTION_LINES:
                    bad.append(f"{path.relative_to(repo)}:{node.lineno} {node.name}: "
                               f"{length} lines > {MAX_FUNCTION_LINES}")
    return bad


def upward_imports(repo: Path) -> list[str]:
    """Imports (at any level) against LAYERS, and any pipelines import of a base module."""
    bad = []
    for imp in _imports(repo):
        for package, forbidden in LAYERS.items():
            if _in(imp.module, package):
                bad += [f"{imp.where()} ({package} must not import pipelines.{f})"
                        for f in forbidden if _in(imp.target, f"pipelines.{f}")]
        if imp.module in BASE_MODULES and imp.target != imp.module:
            bad.append(f"{imp.where()} ({imp.module} imports no pipelines module)")
    return bad


def demo_imports(repo: Path) -> list[str]:
    """Importers of the demo generator other than its own package and the demo command."""
    return [imp.where() for imp in _imports(repo)
            if _in(imp.target, "pipelines.demo") and not _in(imp.module, "pipelines.demo")
            and imp.module not in DEMO_IMPORTERS]


# ------------------------------------------------------------------------------ the tests


def test_the_checks_see_the_package() -> None:
    """A guard for the guard: the walker finds the modules and the imports it must judge."""
    assert {"pipelines.model", "pipelines.ingest", "pipelines.queries"} <= set(_modules(REPO))
    assert any(i.module == "pipelines.state.offsets" and i.target == "pipelines.model"
               and i.top_level for i in _imports(REPO))


def test_the_checks_catch_each_kind_of_offence(tmp_path: Path) -> None:
    """A small package breaking every rule once: each check must name its offender."""
    files = {
        "pipelines/__init__.py": "",
        "pipelines/model.py": "from pipelines.decode import codec\n",
        "pipelines/decode/__init__.py": "",
        "pipelines/decode/codec.py": "from pipelines.decode.wire import read\n"
                                     "def f():\n    from pipelines.state.fold import g\n",
        "pipelines/decode/wire.py": "import pipelines.decode.codec\nfrom pipelines.decode.codec import _x\n"
                                    "from typing import TYPE_CHECKING\n"
                                    "if TYPE_CHECKING:\n    from pipelines.state import fold\n",
        "pipelines/state/__init__.py": "",
        "pipelines/state/fold.py": "from pipelines.demo import make\n"
                                   "def g():\n" + "    x = 1\n" * MAX_FUNCTION_LINES,
        "pipelines/demo/__init__.py": "from pipelines.demo.stories import make\n",
        "pipelines/demo/stories.py": "make = 1\n" * (MAX_FILE_LINES + 1),
        "pipelines/cli/__init__.py": "",
        "pipelines/cli/demo.py": "from pipelines.demo import make\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert import_cycles(tmp_path) == ["pipelines.decode.codec -> pipelines.decode.wire -> "
                                       "pipelines.decode.codec"]
    assert private_imports(tmp_path) == ["pipelines.decode.wire:2 imports pipelines.decode.codec _x"]
    assert too_large(tmp_path) == [
        f"pipelines/demo/stories.py: {MAX_FILE_LINES + 1} lines > {MAX_FILE_LINES}",
        f"pipelines/state/fold.py:2 g: {MAX_FUNCTION_LINES + 1} lines > {MAX_FUNCTION_LINES}"]
    upward = upward_imports(tmp_path)
    assert any(u.startswith("pipelines.decode.codec:3 imports pipelines.state.fold") for u in upward)
    assert any(u.startswith("pipelines.decode.wire:5 imports pipelines.state.fold") for u in upward)
    assert any(u.startswith("pipelines.model:1 imports pipelines.decode.codec") for u in upward)
    assert len(upward) == 3, upward
    assert demo_imports(tmp_path) == ["pipelines.state.fold:1 imports pipelines.demo"]


def test_no_import_cycles() -> None:
    cycles = import_cycles(REPO)
    assert not cycles, "import cycles (module-level imports):\n" + "\n".join(cycles)


def test_no_private_names_imported_across_modules() -> None:
    bad = private_imports(REPO)
    assert not bad, "private names imported from another module:\n" + "\n".join(bad)


def test_files_and_functions_stay_small() -> None:
    bad = too_large(REPO)
    assert not bad, "too large:\n" + "\n".join(bad)


def test_packages_only_import_downward() -> None:
    bad = upward_imports(REPO)
    assert not bad, "imports against the flow sources -> decode -> history -> state -> " \
                    "reconcile:\n" + "\n".join(bad)


def test_only_the_demo_command_imports_the_demo_generator() -> None:
    bad = demo_imports(REPO)
    assert not bad, "the demo generator is test data, not part of the product's paths:\n" + \
        "\n".join(bad)
