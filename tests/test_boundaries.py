"""Package boundaries hold: no package imports another's private module, and no package's
modules import each other in a cycle.

A package's private modules (``sniper.X._y``) are its implementation; another package uses what
``sniper.X`` exports, so that moving code inside X never breaks a caller (trio keeps the same
rule with its ``_core``). Modules of the ``sniper`` package itself (``sniper._config``,
``sniper._bench``...) are shared by all of its subpackages and are not checked here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import sniper

ROOT = Path(sniper.__file__).parent
GENERATED = ROOT / "rpc" / "_generated"


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(ROOT.rglob("*.py")):
        if GENERATED in path.parents:
            continue
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def _imported(module: str, path: Path) -> Iterator[tuple[int, str]]:
    """Every module named by an import in ``path`` (relative imports resolved), with its
    line; ``from a import b`` names ``a`` and, when it is a module, ``a.b``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def _owner(module: str) -> str | None:
    """The public subpackage ``sniper.X`` whose private module ``module`` is, if any."""
    parts = module.split(".")
    if len(parts) < 3 or parts[0] != "sniper" or parts[1].startswith("_"):
        return None
    if not any(part.startswith("_") and not part.startswith("__") for part in parts[2:]):
        return None
    return ".".join(parts[:2])


def test_no_package_imports_another_package_s_private_module() -> None:
    found = []
    for module, path in _modules():
        mine = module.split(".")[:2]
        for line, name in _imported(module, path):
            owner = _owner(name)
            if owner is not None and owner.split(".") != mine:
                found.append(f"{path.relative_to(ROOT.parent)}:{line}: {name}")
    assert sorted(set(found)) == []


LAYERS = (
    "hashing",
    "runtime",
    "store",
    "scheduler",
    "data",
    "placement",
    "rpc",
    "models",
    "torch",
    "roles",
    "transport",
    "monitoring",
    "cluster",
    "_contracts",
    "testing",
    "_bench",
    "experiment",
    "cli",
    "__main__",
)
"""sniper's packages from the bottom up: each imports only those before it (and the ``sniper``
package's own modules, ``sniper._config`` and the like, which import none of these). Runtime code
never imports benchmark code, and the contract sits below the roles that speak it."""


def test_each_package_imports_only_the_layers_below_it() -> None:
    rank = {name: index for index, name in enumerate(LAYERS)}
    found = []
    for module, path in _modules():
        parts = module.split(".")
        if len(parts) < 2:
            continue
        mine = parts[1]
        for line, name in _imported(module, path):
            theirs = name.split(".")
            if theirs[0] != "sniper" or len(theirs) < 2 or theirs[1] == mine:
                continue
            if theirs[1] not in rank:  # a module of the sniper package itself
                continue
            # The sniper package's own modules import none of the packages.
            if mine not in rank or rank[theirs[1]] > rank[mine]:
                found.append(f"{path.relative_to(ROOT.parent)}:{line}: {name}")
    assert sorted(set(found)) == []


def test_every_package_has_its_layer() -> None:
    packages = {path.name for path in ROOT.iterdir() if (path / "__init__.py").exists()}
    assert packages <= set(LAYERS)


WIRE = ("sniper.rpc.v1", "sniper.rpc._generated")
"""The generated protobuf code: the wire's, not the API's."""
SPEAKS_THE_WIRE = ("sniper.rpc", "sniper.transport", "sniper._bench._canned_peer")
"""The packages that convert between sniper's values and the messages (the clients, the
gRPC service), and the benchmark peer that answers with canned message bytes."""


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in packages)


def test_only_the_wire_s_own_code_imports_the_generated_messages() -> None:
    """``PsApi`` and ``HubApi`` speak sniper's own types (``VariableConfig``, ``PsStats``...):
    a role, the job or a tool that imported a generated message would tie itself to protobuf
    again."""
    found = []
    for module, path in _modules():
        if _within(module, SPEAKS_THE_WIRE):
            continue
        for line, name in _imported(module, path):
            if _within(name, WIRE):
                found.append(f"{path.relative_to(ROOT.parent)}:{line}: {name}")
    assert sorted(set(found)) == []
