"""The package's three floors (README, Layout), checked by reading every import of every module.

- the library (top-level modules and `compat`) never imports the tools (`cli`, `report`,
  `torch`) or the experiments;
- the tools and the experiments import only public names of the floors below them: no
  `neuroneval._x` module, no `from neuroneval.x import _y`, except between modules of one
  subpackage;
- the experiments are imported by no one but the CLI's `demo` command;
- no import circle between modules, counting imports inside functions too;
- no module over 900 lines.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import neuroneval
import pytest

PACKAGE = Path(neuroneval.__file__).parent
TOOLS = ("cli", "report", "torch")
EXPERIMENTS = ("experiments",)
MAX_LINES = 900


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, e.g. neuroneval.cli.score
    target: str  # the imported module, e.g. neuroneval.sources
    name: str | None  # the name taken from it, for `from target import name`
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def is_module(name: str) -> bool:
    """A module of the package: a .py file, a subpackage or the compiled extension (its stubs)."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file() or path.with_suffix(".pyi").is_file()


def imports_of(name: str, path: Path) -> Iterator[Import]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "neuroneval":
                    yield Import(name, alias.name, None, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "neuroneval":
                continue
            for alias in node.names:
                if is_module(f"{target}.{alias.name}"):  # `from pkg import submodule`
                    yield Import(name, f"{target}.{alias.name}", None, node.lineno)
                else:
                    yield Import(name, target, alias.name, node.lineno)


def floor(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in TOOLS:
        return "tools"
    if len(parts) > 1 and parts[1] in EXPERIMENTS:
        return "experiments"
    if module == "neuroneval.__main__":
        return "tools"  # `python -m neuroneval` is the CLI
    return "library"


def subpackage(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def is_private(imp: Import) -> bool:
    parts = imp.target.split(".")[1:]
    private_module = any(p.startswith("_") and not p.startswith("__") for p in parts)
    private_name = imp.name is not None and imp.name.startswith("_") and not imp.name.startswith("__")
    return private_module or private_name


ALL_IMPORTS = [imp for name, path in modules().items() for imp in imports_of(name, path)]


def where(imp: Import) -> str:
    taken = f" ({imp.name})" if imp.name else ""
    return f"{imp.source}:{imp.line} imports {imp.target}{taken}"


def test_walker_sees_every_floor() -> None:
    """The walker itself finds the imports it must judge (a walker that sees nothing passes everything)."""
    floors = {floor(m) for m in modules()}
    assert floors == {"library", "tools", "experiments"}
    assert any(i.source == "neuroneval" and i.target == "neuroneval._score" for i in ALL_IMPORTS)
    assert any(floor(i.source) == "tools" and floor(i.target) == "library" for i in ALL_IMPORTS)
    assert is_private(Import("x", "neuroneval._core", None, 1))
    assert is_private(Import("x", "neuroneval.sources", "_open", 1))
    assert not is_private(Import("x", "neuroneval.sources", "open_activations", 1))


def test_library_imports_no_tool_or_experiment() -> None:
    bad = [where(i) for i in ALL_IMPORTS if floor(i.source) == "library" and floor(i.target) != "library"]
    assert not bad, "the library imports a floor above it:\n" + "\n".join(bad)


def test_tools_and_experiments_import_public_names_only() -> None:
    bad = [
        where(i)
        for i in ALL_IMPORTS
        if floor(i.source) != "library" and is_private(i) and subpackage(i.source) != subpackage(i.target)
    ]
    assert not bad, "a private name imported across floors:\n" + "\n".join(bad)


def test_experiments_are_imported_only_by_the_demo_command() -> None:
    bad = [
        where(i)
        for i in ALL_IMPORTS
        if floor(i.target) == "experiments" and floor(i.source) != "experiments" and i.source != "neuroneval.cli.demo"
    ]
    assert not bad, "\n".join(bad)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components with more than one module, or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_strongly_connected_finds_a_circle() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_import_circle() -> None:
    graph: dict[str, set[str]] = {}
    for i in ALL_IMPORTS:
        graph.setdefault(i.source, set()).add(i.target)
    circles = strongly_connected(graph)
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


@pytest.mark.parametrize("name", sorted(modules()))
def test_module_is_short(name: str) -> None:
    lines = len(modules()[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines (at most {MAX_LINES})"
