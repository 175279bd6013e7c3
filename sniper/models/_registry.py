"""Opening a dense model by name, or from any importable factory.

A training config says which model to train the way it says which scheduler and transport to
run: by a registered name, through the same :class:`~sniper._plugins.Plugins` registry.
``"mlp"`` (the numpy MLP, :class:`~sniper.models.MlpModel`) is built in and is the default.
Another distribution registers models in the ``sniper.models`` entry-point group::

    [project.entry-points."sniper.models"]
    deepfm = "theirpkg.models:DeepFM"      # a DenseModel subclass

and a model that is not packaged at all is named by its import path, ``"mypkg.models:build"``:
any callable ``build(inputs, **params)`` that returns a :class:`~sniper.models.DenseModel`, or
a ``torch.nn.Module`` (``forward(embeddings, dense)`` returning ``[batch, len(labels)]``
logits), which :class:`sniper.torch.TorchModel` adapts (the optional extra ``sniper[torch]``,
imported by name only then, as the zoo's entry points are). Either way, ``params`` are the
config's keyword arguments, and a factory that refuses them (an unknown keyword, a bad value)
fails before any process starts, naming the model.

The dense training settings (:data:`SETTINGS`: the ``[model]`` table's ``optimizer``, ``lr``
and ``device``, and the job's ``seed`` and ``threads``) are not params. A factory gets each
one it declares by name (a ``DenseModel`` subclass does: the numpy MLP takes ``lr`` and
``seed``, the zoo all five); the settings it does not declare apply to the ``nn.Module`` it
returns, which sniper puts on that device with that optimizer. ``optimizer``, ``lr`` or
``device`` given to a factory that neither declares it nor returns a module is an error: that
model brings its own, and the config would silently not apply. ``seed`` and ``threads`` are
offered, never required; with torch loaded, its generator is seeded before the factory runs,
so a module's initial weights follow the job's seed.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final

from sniper._plugins import Plugins
from sniper.models._abc import DenseModel, ModelInputs
from sniper.models._errors import ModelError, users_code

__all__ = ["ENTRY_POINT_GROUP", "MODEL_NAMES", "SETTINGS", "model_names", "open_model"]

ModelFactory = Callable[..., DenseModel]

MODEL_NAMES: Final = ("mlp",)
"""The built-in models."""

ENTRY_POINT_GROUP: Final = "sniper.models"
"""The entry-point group in which other distributions register models."""

SETTINGS: Final = ("optimizer", "lr", "device", "seed", "threads")
"""The dense training settings :func:`open_model` hands a factory that declares them."""
_REQUIRED: Final = ("optimizer", "lr", "device")
"""The settings that must reach the model: a factory that cannot take one is refused."""


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


def open_model(
    factory: str,
    inputs: ModelInputs,
    params: Mapping[str, Any],
    *,
    optimizer: str | None = None,
    lr: float | None = None,
    device: str | None = None,
    seed: int | None = None,
    threads: int | None = None,
) -> DenseModel:
    """The model ``factory`` builds for ``inputs`` with ``params`` and the dense training
    settings (None: not given; see the module's docstring for where each one goes).

    ``factory`` is a registered name or ``"module:attribute"``. ``LookupError`` for a name or
    path that does not open; ``ValueError`` for a factory that refuses ``params`` or a
    setting, or returns something that is neither a :class:`DenseModel` nor a torch module;
    :class:`~sniper.models.ModelError` for a factory named by import path, or its module's
    import, that raises anything else (the user's own bug).
    """
    build = _import_factory(factory) if ":" in factory else _registered(factory)
    given = {
        key: value
        for key, value in zip(SETTINGS, (optimizer, lr, device, seed, threads), strict=True)
        if value is not None
    }
    declared = _declared(build)
    twice = sorted(set(params) & set(given) & declared)
    if twice:
        raise ValueError(
            f"model {factory!r}: {twice[0]} is given twice, in params and as the "
            f"{twice[0]} setting; keep one"
        )
    passed = {key: value for key, value in given.items() if key in declared}
    torch = sys.modules.get("torch")
    if seed is not None and torch is not None:
        torch.manual_seed(seed)
    model = _built(factory, build, inputs, {**params, **passed})
    rest = {key: value for key, value in given.items() if key not in declared}
    if isinstance(model, DenseModel):
        refused = [key for key in _REQUIRED if key in rest]
        if refused:
            raise ValueError(
                f"model {factory!r} takes no {refused[0]} (it builds a "
                f"{type(model).__name__}, which brings its own); remove {refused[0]} from the "
                "config"
            )
        return model
    torch = sys.modules.get("torch")  # the factory may have imported it just now
    if torch is not None and isinstance(model, torch.nn.Module):
        adapter = importlib.import_module("sniper.torch")
        wrapped: DenseModel = adapter.TorchModel.build(model, inputs, **rest)
        return wrapped
    raise ValueError(
        f"model {factory!r} returned {type(model).__name__}, not a sniper.models.DenseModel "
        "or a torch.nn.Module"
    )


def _built(factory: str, build: ModelFactory, inputs: ModelInputs, kwargs: dict[str, Any]) -> Any:
    """``build(inputs, **kwargs)``. A ``TypeError`` is a refusal of the params (a registered
    factory's network, or a signature that does not bind them); any other error of a factory
    named by import path, the user's own code, is a :class:`ModelError` (a ``ValueError``
    stays: a factory's documented refusal)."""
    users = ":" in factory
    guard: contextlib.AbstractContextManager[None] = (
        users_code(f"model {factory!r}", keep=(ValueError,)) if users else contextlib.nullcontext()
    )
    try:
        if users:
            with contextlib.suppress(ValueError):  # no signature to read (a builtin): calling
                inspect.signature(build).bind(inputs, **kwargs)  # it tells
        with guard:
            return build(inputs, **kwargs)
    except TypeError as exc:
        raise ValueError(f"model {factory!r} does not take these params: {exc}") from exc


def _declared(build: Callable[..., Any]) -> set[str]:
    """The settings ``build`` takes by name (a ``**kwargs`` takes none: it may pass them on
    to a module that does not want them)."""
    try:
        parameters = inspect.signature(build).parameters
    except (TypeError, ValueError):
        return set()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {name for name, p in parameters.items() if name in SETTINGS and p.kind in kinds}


def _importable_from_here() -> None:
    """Put the current directory on ``sys.path`` where it is not, as ``python -m`` does: the
    ``sniper`` script has its own directory there instead, and a user's ``mymodels/`` beside
    the config would be found by ``python -m sniper`` but not by ``sniper``."""
    here = os.getcwd()
    if not any(entry in ("", here) for entry in sys.path):
        sys.path.insert(0, here)


def _registered(factory: str) -> ModelFactory:
    """A registered model's factory; an unknown name that looks like a dotted import path
    (``mymodels.build``) is told the form of one, ``module:attribute``."""
    try:
        return PLUGINS.load(factory)
    except LookupError as exc:
        module, dot, attribute = factory.rpartition(".")
        if not (dot and module and attribute) or attribute == "py":  # mymodel.py: a file
            raise
        raise LookupError(
            f"{exc}; a factory of your own is named module:attribute ({module}:{attribute})"
        ) from None


def _import_factory(path: str) -> ModelFactory:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise LookupError(
            f"model factory {path!r} must be module:attribute, say mypkg.models:build"
        )
    _importable_from_here()
    try:
        with users_code(f"model factory {path!r}: importing {module_name}"):
            module = importlib.import_module(module_name)
    except ModelError as exc:
        cause = exc.__cause__
        if isinstance(cause, ImportError):
            # Where the user's module itself is not found, say where it is looked for.
            name = cause.name if isinstance(cause, ModuleNotFoundError) else None
            missing = name is not None and f"{module_name}.".startswith(f"{name}.")
            where = " (it is imported from the current directory and PYTHONPATH)" if missing else ""
            raise LookupError(
                f"model factory {path!r}: cannot import {module_name}: {cause}{where}"
            ) from cause
        raise
    build = getattr(module, attribute, None)
    if not callable(build):
        raise LookupError(f"model factory {path!r}: {module_name} has no callable {attribute!r}")
    factory: ModelFactory = build
    return factory
