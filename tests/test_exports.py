"""Every public package's surface is exactly its ``__all__``, re-exported from private modules
and documented (trio's test_exports), and the top-level package stays cheap to import."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

PACKAGES = [
    "sniper",
    "sniper.placement",
    "sniper.roles",
    "sniper.rpc",
    "sniper.store",
    "sniper.cluster",
    "sniper.experiment",
    "sniper.monitoring",
    "sniper.testing",
    "sniper.transport",
]


def _public(module: types.ModuleType) -> set[str]:
    return {
        name
        for name in dir(module)
        if not name.startswith("_") and not isinstance(getattr(module, name), types.ModuleType)
    }


@pytest.mark.parametrize("package", PACKAGES)
def test_all_names_exist_and_nothing_else_is_public(package: str) -> None:
    module = importlib.import_module(package)
    exported = set(module.__all__) - {"__version__"}
    missing = [name for name in exported if not hasattr(module, name)]
    assert not missing
    assert _public(module) - {"annotations"} == exported


@pytest.mark.parametrize("package", PACKAGES)
def test_exported_names_live_in_private_modules_and_have_docstrings(package: str) -> None:
    module = importlib.import_module(package)
    for name in set(module.__all__) - {"__version__"}:
        value = getattr(module, name)
        if isinstance(value, type | types.FunctionType):
            where = value.__module__
            assert "._" in where or where == "sniper.rpc._generated", (name, where)
            assert value.__doc__, f"{package}.{name} has no docstring"


def test_importing_sniper_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, sniper\n"
        "heavy = [m for m in ('numba', 'grpclib', 'numpy', 'pyarrow') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == ""


def test_the_top_level_names_are_the_packages_own() -> None:
    import sniper
    import sniper.roles
    import sniper.transport

    assert sniper.PsRole is sniper.roles.PsRole
    assert sniper.open_transport is sniper.transport.open_transport
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = sniper.nope


def test_the_lazy_table_and_all_agree() -> None:
    import sniper

    assert set(sniper.__all__) - {"__version__"} == set(sniper._EXPORTS)
