"""No import cycle among the modules of ``sniper.cluster``, ``sniper.roles`` and ``sniper.rpc``.

A cycle makes the order of imports matter (the module imported first sees the other half
initialised) and means the two modules are one concern split in two. Each module's source is
parsed, not imported. Every import statement is an edge, a deferred one inside a function
included: deferring an import hides a cycle from the interpreter, not from the reader (the job
launcher's ``_train.py`` and ``_inprocess.py`` once imported each other so). Only imports under
``if TYPE_CHECKING:`` are left out: they never run, and annotations may name any module.
``from pkg._a import b`` is an edge to ``pkg._a``, or to ``pkg._a.b`` when that is a module;
relative imports are resolved against the importing module's package. Importing a package's
submodule also runs the package's ``__init__``, which is not counted as an edge, or every
package that re-exports its modules would be a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _modules(package: str) -> dict[str, Path]:
    """Every module of ``package`` (subpackages included) by dotted name."""
    base = ROOT.joinpath(*package.split("."))
    found = {}
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree`` except those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]))
        else:
            yield from _imports(node)


def _imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            source = ".".join(anchor + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            targets.add(submodule if submodule in known else source)
    return {target for target in targets if target in known and target != name}


def _graph(package: str) -> dict[str, set[str]]:
    modules = _modules(package)
    known = set(modules)
    return {name: _imported(name, path, known) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``a -> b -> ... -> a``) through each strongly connected component of more
    than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [_a_cycle(graph, component) for component in components]


def _a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside it."""
    start, inside = component[0], set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & inside):
                if target == start:
                    return paths[node] + [start]
                if target not in paths:
                    paths[target] = paths[node] + [target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"{component} is not strongly connected")


def test_the_walk_finds_edges_and_cycles() -> None:
    graph = _graph("sniper.cluster")
    assert "sniper.cluster._config" in graph["sniper.cluster._plan"]
    assert "sniper.cluster._config" not in graph["sniper.cluster._abc"]  # TYPE_CHECKING only
    tree = ast.parse("def f():\n    import a\nif TYPE_CHECKING:\n    import b\nelse:\n    import c")
    assert [alias.name for node in _imports(tree) for alias in node.names] == ["a", "c"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", ["sniper.cluster", "sniper.roles", "sniper.rpc"])
def test_no_import_cycle_among_a_packages_modules(package: str) -> None:
    cycles = _cycles(_graph(package))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)
