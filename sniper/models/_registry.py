"""Opening a dense model by name, or from any importable factory.

A training config says which model to train the way it says which scheduler and transport to
run: by a registered name, through the same :class:`~sniper._plugins.Plugins` registry.
``"mlp"`` (the numpy MLP, :class:`~sniper.models.MlpModel`) is built in and is the default.
Another distribution registers models in the ``sniper.models`` entry-point group::

    [project.entry-points."sniper.models"]
    deepfm = "theirpkg.models:DeepFM"      # a DenseModel subclass

and a model that is not packaged at all is named by its import path, ``"mypkg.models:build"``:
any callable ``build(inputs, **params)`` that returns a :class:`~sniper.models.DenseModel`.
Either way, ``params`` are the config's keyword arguments, and a factory that refuses them
(an unknown keyword, a bad value) fails before any process starts, naming the model.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from sniper._plugins import Plugins
from sniper.models._abc import DenseModel, ModelInputs

__all__ = ["ENTRY_POINT_GROUP", "MODEL_NAMES", "model_names", "open_model"]

ModelFactory = Callable[..., DenseModel]

MODEL_NAMES: Final = ("mlp",)
"""The built-in models."""

ENTRY_POINT_GROUP: Final = "sniper.models"
"""The entry-point group in which other distributions register models."""


def _builtin(name: str) -> ModelFactory:
    module = importlib.import_module(f"sniper.models._{name}")
    factory: ModelFactory = module.MODEL
    return factory


PLUGINS: Final[Plugins[ModelFactory]] = Plugins(
    kind="model",
    group=ENTRY_POINT_GROUP,
    builtins=MODEL_NAMES,
    load_builtin=_builtin,
    base=DenseModel,
    log=logging.getLogger("sniper.models"),
)


def model_names() -> tuple[str, ...]:
    """Every name :func:`open_model` accepts besides import paths: built-ins, then plugins."""
    return PLUGINS.names()


def open_model(factory: str, inputs: ModelInputs, params: Mapping[str, Any]) -> DenseModel:
    """The model ``factory`` builds for ``inputs`` with ``params``.

    ``factory`` is a registered name or ``"module:attribute"``. ``LookupError`` for a name or
    path that does not open; ``ValueError`` for a factory that refuses ``params`` or returns
    something that is not a :class:`DenseModel`.
    """
    build = _import_factory(factory) if ":" in factory else PLUGINS.load(factory)
    try:
        model = build(inputs, **params)
    except TypeError as exc:
        raise ValueError(f"model {factory!r} does not take these params: {exc}") from exc
    if not isinstance(model, DenseModel):
        raise ValueError(
            f"model {factory!r} returned {type(model).__name__}, not a sniper.models.DenseModel"
        )
    return model


def _import_factory(path: str) -> ModelFactory:
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise LookupError(f"model factory {path!r}: cannot import {module_name}: {exc}") from exc
    build = getattr(module, attribute, None)
    if not callable(build):
        raise LookupError(f"model factory {path!r}: {module_name} has no callable {attribute!r}")
    factory: ModelFactory = build
    return factory
