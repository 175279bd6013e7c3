"""The dense model's interface: what the trainer asks of the model it is given.

The trainer owns the pipeline (prefetch, the staleness bound, reading order, pauses for
checkpoints and moves) and pushes gradients to the ps; the model owns everything dense: its
layers, its loss and its optimizer. torchrec's ``TrainPipelineSparseDist`` pipelines any model
the same way, and PERSIA's ``TrainCtx`` hands the user's module its embeddings and takes its
loss. The seam is one batch at a time:

- the trainer's lookups write a ``[batch, width]`` float32 matrix, each variable's pooled
  embedding in its own columns (:attr:`ModelInputs.columns`), then the dense features;
- :meth:`DenseModel.train_step` computes the loss for the labels and ``d(loss)/d(pooled)`` of
  each variable, which the trainer pushes at once; the model's own update
  (:meth:`TrainStep.update`) runs after, while the push is under way;
- :meth:`DenseModel.predict` scores held-out batches and the evaluation data.

Sequence variables (pooling ``none``: DIN/BST-style behaviour sequences) are not pooled, so
they have no columns in the matrix: :attr:`ModelInputs.sequences` names them, and
``train_step`` and ``predict`` take them as ``sequences``, each a jagged block
``(values float32[n, dim], offsets int64[batch + 1])`` (example ``b``'s values are
``values[offsets[b]:offsets[b + 1]]``); :attr:`TrainStep.input_grads` gives ``[n, dim]`` for
each. A model built without sequences is never passed the keyword.

Every call of one model comes from one thread, the trainer's model thread, one at a time and in
order, so a model needs no lock; none comes from the event loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["DenseModel", "GradientAverage", "Jagged", "ModelInputs", "TrainStep"]

F32 = NDArray[np.float32]
Jagged = tuple[NDArray[np.float32], NDArray[np.int64]]
"""A sequence variable's batch: ``(values float32[n, dim], offsets int64[batch + 1])``."""

GradientAverage = Callable[[list[Any]], bool]
"""Averages a list of gradients (numpy arrays or torch tensors) in place across the job's
trainer ranks (``num_trainers`` > 1); False: no rank trained this step, so there is nothing to
apply (``sniper.roles._ranks``)."""


@dataclass(frozen=True)
class ModelInputs:
    """What a model factory is told about its input: ``build(inputs, **params)``."""

    dims: Mapping[str, int]
    """Each variable's embedding width, in the order of the input matrix's columns."""
    dense_features: int
    """Dense features per example; they follow the embeddings in the input matrix."""
    labels: tuple[str, ...] = ("label",)
    """The label names, one output column each."""
    sequences: Mapping[str, int] = field(default_factory=dict)
    """Each sequence variable's embedding width (pooling ``none``): not in the input
    matrix; its values come as a :data:`Jagged` block of ``sequences``."""
    regression: tuple[str, ...] = ()
    """The labels that are regression targets: their output is the prediction itself, fit
    with squared error. The others are binary: their output is a logit, fit with log loss,
    and their prediction its sigmoid."""
    columns: Mapping[str, tuple[int, int]] = field(init=False)
    """Each variable's ``(start, stop)`` columns in the input matrix."""

    def __post_init__(self) -> None:
        if self.dense_features < 0:
            raise ValueError(f"dense_features must be at least 0, got {self.dense_features}")
        bad = {name: dim for name, dim in {**self.dims, **self.sequences}.items() if dim < 1}
        if bad:
            raise ValueError(f"embedding widths must be at least 1, got {bad}")
        if not self.labels:
            raise ValueError("a model needs at least one label")
        unknown = [name for name in self.regression if name not in self.labels]
        if unknown:
            raise ValueError(f"regression labels {unknown} are not labels {list(self.labels)}")
        both = sorted(set(self.dims) & set(self.sequences))
        if both:
            raise ValueError(f"variable {both[0]!r} cannot be both pooled and a sequence")
        bounds = np.cumsum([0, *self.dims.values()])
        columns = {name: (int(bounds[i]), int(bounds[i + 1])) for i, name in enumerate(self.dims)}
        object.__setattr__(self, "dims", dict(self.dims))
        object.__setattr__(self, "sequences", dict(self.sequences))
        object.__setattr__(self, "columns", columns)

    @property
    def regression_mask(self) -> NDArray[np.bool_]:
        """Per output column, whether its label is a regression target."""
        return np.array([name in self.regression for name in self.labels])

    @property
    def embedding_width(self) -> int:
        """Columns of the input matrix that hold pooled embeddings."""
        return sum(self.dims.values())

    @property
    def width(self) -> int:
        """Columns of the whole input matrix: embeddings, then dense features."""
        return self.embedding_width + self.dense_features


class TrainStep(ABC):
    """One batch's forward and backward pass, whose update is not applied yet."""

    loss: float
    """The batch's mean training loss."""
    predictions: F32
    """The model's predictions for the batch (probabilities for binary labels), ``[batch]``
    for one label: the trainer's training AUC is computed over them."""
    input_grads: dict[str, F32]
    """``d(loss)/d(pooled embedding)`` of each variable, ``[batch, dim]`` float32 (``[n, dim]``
    for a sequence variable: one row per value): what the trainer pushes to the ps. The
    arrays must not change after :meth:`DenseModel.train_step` returns (a push may read them
    while :meth:`update` runs)."""

    @abstractmethod
    def update(self) -> None:
        """Apply the optimizer's step for this batch. Called once, on the model's thread,
        before the model's next :meth:`DenseModel.train_step` or :meth:`DenseModel.predict`."""

    def update_averaged(self, average: GradientAverage) -> None:
        """:meth:`update`, with the gradients of the model's parameters first averaged across
        the job's trainer ranks by ``average`` (and nothing applied where it answers False), so
        that every rank applies the same step. A model that trains with ``num_trainers`` > 1
        overrides this; the numpy MLP and :class:`~sniper.torch.TorchModel` do."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot train with num_trainers > 1: it does not average "
            "its gradients across ranks (TrainStep.update_averaged)"
        )


class DenseModel(ABC):
    """A dense model the trainer trains: the numpy MLP (the default) or a user's.

    Subclasses take ``(inputs: ModelInputs, **params)``; see :mod:`sniper.models` for how a
    model is chosen by name.
    """

    inputs: ModelInputs
    """The input layout the model was built for."""

    @abstractmethod
    def train_step(
        self, inputs: F32, labels: F32, *, sequences: Mapping[str, Jagged] | None = None
    ) -> TrainStep:
        """Forward and backward on one batch: its loss for ``labels`` (``[batch]`` for one
        label), predictions, and the gradient with respect to each variable's pooled
        embedding. ``inputs`` is the ``[batch, width]`` matrix of :class:`ModelInputs`; the
        trainer reuses it once the step and its update are done, so keep no reference to it
        past :meth:`TrainStep.update`. ``sequences``: each sequence variable's block, given
        only to a model built with :attr:`ModelInputs.sequences`."""

    @abstractmethod
    def predict(self, inputs: F32, *, sequences: Mapping[str, Jagged] | None = None) -> F32:
        """Predictions for a batch without training (``[batch]`` for one label)."""

    @abstractmethod
    def state(self) -> dict[str, NDArray[np.generic]]:
        """Every array of the model and its optimizer, by name: what a checkpoint stores."""

    @abstractmethod
    def load_state(self, arrays: Mapping[str, NDArray[np.generic]]) -> None:
        """Take the arrays of :meth:`state` as this model's; a mismatch (another config's
        checkpoint) raises ``ValueError`` naming the array."""

    def learning_rate(self) -> float | None:
        """The dense optimizer's learning rate as this model trains with it (its default,
        where the config gave none): what a job checkpoint records and a resume compares
        (``lr``). None: the model does not say, and the config's ``lr`` is recorded."""
        return None

    def warm_up(self) -> None:  # noqa: B027 (optional, with nothing to do by default)
        """Compile or load whatever the first step would otherwise pay for inside training
        (the trainer calls this before its clock starts)."""
