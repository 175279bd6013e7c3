"""The ``[model]`` table of a training config: which dense model, with what, trained how.

::

    [model]
    factory = "dlrm"                 # a registered name ("mlp", the default) or "mypkg.mod:build"
    params = { bottom = [64, 16] }   # the factory's keywords
    optimizer = "adam"               # the dense optimizer (torch.optim by name for torch models)
    lr = 0.001                       # its learning rate
    device = "cpu"                   # or "cuda", "cuda:N", "auto" (a GPU when there is one)

``optimizer``, ``lr`` and ``device`` are the dense training settings every model has; they are
not factory ``params``, so that a factory that returns a plain ``torch.nn.Module`` never sees
them (sniper builds that module's optimizer and moves it to the device). Left out, each is the
model's own default (Adam, on the CPU, each model's learning rate). How they reach the model:
:func:`sniper.models.open_model`.

A checkpoint records this table (:meth:`ModelConfig.to_dict`) with the trainer's state, so
``sniper eval --checkpoint`` rebuilds the model it saved without being told.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sniper._config import Validated, from_mapping
from sniper.models._abc import DenseModel, ModelInputs
from sniper.models._registry import open_model

__all__ = ["ModelConfig"]

_DEVICES = ("cpu", "cuda", "auto")


@dataclass(frozen=True)
class ModelConfig(Validated):
    """The dense model of a job: the ``[model]`` table's keys."""

    factory: str = "mlp"
    """A registered model name (:func:`sniper.models.model_names`) or ``"module:attribute"``,
    a callable ``build(inputs, **params)`` returning a ``DenseModel`` or a ``torch.nn.Module``."""
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The factory's keyword arguments (its layers and the like)."""
    optimizer: str = ""
    """The dense optimizer by name ("": the model's own, Adam). For a torch model any
    ``torch.optim`` class, case-insensitive: ``adam``, ``adagrad``, ``sgd``, ``adamw``..."""
    lr: float = 0.0
    """The dense optimizer's learning rate (0: the model's own default)."""
    device: str = ""
    """Where the dense model runs ("": the model's own, the CPU): ``cpu``, ``cuda``,
    ``cuda:N``, or ``auto`` (``cuda`` when a GPU is visible, else ``cpu``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.factory:
            raise ValueError("model.factory must name a model, got ''")
        if self.lr < 0:
            raise ValueError(f"model.lr must be positive (or 0: the model's own), got {self.lr}")
        base = self.device.partition(":")[0]
        if self.device and (base not in _DEVICES or (":" in self.device and base != "cuda")):
            raise ValueError(f"model.device must be cpu, cuda, cuda:N or auto, got {self.device!r}")

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str = "[model]") -> ModelConfig:
        """The config of a ``[model]`` table (or of :meth:`to_dict`); errors name the key."""
        return from_mapping(cls, table, where, prefix="model.")

    def to_dict(self) -> dict[str, Any]:
        """This config as JSON-able data (what a checkpoint records)."""
        return dataclasses.asdict(self)

    def open(self, inputs: ModelInputs, *, seed: int = 0, threads: int = 0) -> DenseModel:
        """The model this config names, built for ``inputs``; ``seed`` and ``threads`` (the
        trainer's ``seed`` and ``blas_threads``) go to a factory that declares them.

        ``LookupError`` or ``ValueError`` for a model that does not open (see
        :func:`~sniper.models.open_model`)."""
        return open_model(
            self.factory,
            inputs,
            self.params,
            optimizer=self.optimizer or None,
            lr=self.lr or None,
            device=self.device or None,
            seed=seed,
            threads=threads,
        )
