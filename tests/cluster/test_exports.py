"""The public surface of ``sniper.cluster`` is exactly ``__all__`` (trio's test_exports)."""

from __future__ import annotations

import types

import sniper.cluster


def test_all_names_exist_and_nothing_else_is_public() -> None:
    public = {
        name
        for name, value in vars(sniper.cluster).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(sniper.cluster.__all__)


def test_exported_names_live_in_private_modules() -> None:
    for name in sniper.cluster.__all__:
        value = getattr(sniper.cluster, name)
        module = getattr(value, "__module__", None)
        if isinstance(value, type | types.FunctionType):
            assert module is not None and module.startswith("sniper.cluster._"), name


def test_exported_classes_and_functions_have_docstrings() -> None:
    for name in sniper.cluster.__all__:
        value = getattr(sniper.cluster, name)
        if isinstance(value, type | types.FunctionType):
            assert value.__doc__, f"{name} has no docstring"
