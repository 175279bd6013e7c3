"""The default dense model: an MLP in numpy with Adam, and its logistic loss.

Input is ``[pooled embeddings of every variable ‖ dense features]``; the output is one logit
per label (several labels share the hidden layers: a shared-bottom multi-task model).
The model is small next to the embeddings (1229 x 64 weights for seed_ctr), so numpy's
matrix products on the trainer's CPU are enough: about 10 ms per 1024-example batch forward
and backward on one BLAS thread (2.5 and 7.3 ms measured here). The gradient with respect to
each variable's columns of the input is returned, because that is what the trainer pushes
back to the ps.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from sniper.models._abc import DenseModel, GradientAverage, Jagged, ModelInputs, TrainStep
from sniper.models._kernels import adam_update
from sniper.models._loss import fit, predictions

__all__ = ["Backward", "Mlp", "MlpModel", "start_dense_kernels"]

F32 = NDArray[np.float32]


@dataclass
class _Adam:
    lr: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    t: int = 0

    def step(self, params: list[F32], grads: list[F32], moments: list[tuple[F32, F32]]) -> None:
        self.t += 1
        c1 = 1 - self.beta1**self.t
        c2 = 1 - self.beta2**self.t
        for p, g, (m, v) in zip(params, grads, moments, strict=True):
            adam_update(
                _flat(p),
                np.ascontiguousarray(g, dtype=np.float32).reshape(-1),
                _flat(m),
                _flat(v),
                self.lr / c1,
                self.beta1,
                self.beta2,
                c2,
                self.eps,
            )


def _flat(array: F32) -> F32:
    """``array`` as a flat view, which the Adam kernel writes through (a copy would lose the
    step, so an array that is not C-contiguous is refused)."""
    if not array.flags.c_contiguous:
        raise ValueError("Adam updates C-contiguous arrays in place; got a strided one")
    return array.reshape(-1)


class Mlp:
    """``input -> [Linear -> ReLU] * len(hidden) -> Linear -> logits``, trained with Adam;
    ``outputs`` logits per example."""

    def __init__(
        self, input_dim: int, hidden: tuple[int, ...], lr: float, seed: int = 0, outputs: int = 1
    ) -> None:
        if input_dim < 1 or outputs < 1 or any(h < 1 for h in hidden):
            raise ValueError(
                f"layer sizes must be positive, got {input_dim}, {hidden} and {outputs}"
            )
        rng = np.random.default_rng(seed)
        sizes = [input_dim, *hidden, outputs]
        self.weights = [
            (rng.normal(0, np.sqrt(2.0 / a), (a, b))).astype(np.float32)
            for a, b in itertools.pairwise(sizes)
        ]
        self.biases = [np.zeros(b, dtype=np.float32) for b in sizes[1:]]
        self._moments = [
            (np.zeros_like(p), np.zeros_like(p)) for p in [*self.weights, *self.biases]
        ]
        self._adam = _Adam(lr)

    @property
    def lr(self) -> float:
        """Adam's learning rate."""
        return self._adam.lr

    def state(self) -> dict[str, NDArray[np.generic]]:
        """Every array of the model and its optimizer, by name: what a checkpoint stores."""
        arrays: dict[str, NDArray[np.generic]] = {"adam_t": np.array(self._adam.t)}
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            arrays[f"w{i}"], arrays[f"b{i}"] = w, b
        for i, (m, v) in enumerate(self._moments):
            arrays[f"m{i}"], arrays[f"v{i}"] = m, v
        return arrays

    def load_state(self, arrays: Mapping[str, NDArray[np.generic]]) -> None:
        """Take the arrays of :meth:`state` (of a model of the same shape) as this model's."""
        own = self.state()
        for name, mine in own.items():
            theirs = arrays.get(name)
            if theirs is None or theirs.shape != mine.shape or theirs.dtype != mine.dtype:
                raise ValueError(
                    f"the dense model checkpoint's {name} does not fit this model "
                    f"(expected {mine.dtype} {mine.shape}); was it saved by another config?"
                )
            if name != "adam_t":
                mine[...] = theirs
        self._adam.t = int(arrays["adam_t"])

    def forward(self, x: F32) -> tuple[F32, list[F32]]:
        """Logits (``[batch]`` for one output, else ``[batch, outputs]``) and the
        activations backward needs."""
        activations = [x]
        h = x
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = h @ w + b
            if i < len(self.weights) - 1:
                h = np.maximum(h, 0, out=h)
            activations.append(h)
        return (h[:, 0] if h.shape[1] == 1 else h), activations

    def backward(
        self, activations: list[F32], d_logits: F32, columns: Sequence[tuple[int, int]]
    ) -> list[F32]:
        """Apply one Adam step for ``d(loss)/d(logits)``; return ``d(loss)/d(input)`` of each
        ``(start, stop)`` range of input columns (:meth:`backward_input`, then its update)."""
        backward = self.backward_input(activations, d_logits, columns)
        backward.update()
        return backward.d_input

    def backward_input(
        self, activations: list[F32], d_logits: F32, columns: Sequence[tuple[int, int]]
    ) -> Backward:
        """The first half of a backward pass: ``d(loss)/d(input)`` of each ``(start, stop)``
        range of input columns, and the Adam step still to apply (:meth:`Backward.update`),
        which needs nothing the caller waits for.

        Why split: the trainer pushes the input gradients as soon as they exist, and computes
        the weight gradients and the Adam step on its thread meanwhile (3 ms of a seed_ctr
        batch's 11, on the other core), where one call did them before the pushes could start.
        Why views: every range is a block of one product over the columns the ranges span
        (columns no range asks for at either end, the dense features', are never computed),
        taken transposed so that each block is contiguous in memory; a ps's push reads it in
        place, and a wire encoding copies it as it writes. For seed_ctr's 76 ranges the one
        product took 2.0-2.7 ms where a product per range took 3.0-3.1 (two MFLOP each, too
        small for BLAS to run at speed; alternated runs). Copying untransposed column blocks
        out, or reading them in place, cost about a millisecond back: each row of such a block
        lies on another page.
        """
        grad = d_logits.reshape(len(d_logits), -1).astype(np.float32)
        layer_grads = [grad]  # d(loss)/d(output) of each layer, the last layer's first
        for i in range(len(self.weights) - 1, 0, -1):
            grad = grad @ self.weights[i].T
            grad *= activations[i] > 0
            layer_grads.append(grad)
        layer_grads.reverse()
        return Backward(
            _column_blocks(grad, self.weights[0], columns), self, activations, layer_grads
        )

    def _update(
        self,
        activations: list[F32],
        layer_grads: list[F32],
        average: GradientAverage | None = None,
    ) -> None:
        """Weight and bias gradients from each layer's input and output gradient, averaged
        across the job's ranks by ``average`` (None: one rank); Adam."""
        weight_grads = [a.T @ g for a, g in zip(activations[:-1], layer_grads, strict=True)]
        bias_grads = [g.sum(axis=0) for g in layer_grads]
        grads = [*weight_grads, *bias_grads]
        if average is None or average(grads):
            self._adam.step([*self.weights, *self.biases], grads, self._moments)


def _column_blocks(grad: F32, first: F32, columns: Sequence[tuple[int, int]]) -> list[F32]:
    """``(grad @ first.T)[:, start:stop]`` for each range, as views of one product over the
    span of the ranges (computed before Adam moves ``first``). The product is taken
    transposed, ``first @ grad.T``, so that each range's block is contiguous in memory (one
    ``[stop - start, batch]`` run): a ps reads it with few cache and TLB misses, where a
    column block of the untransposed product has each row on another page."""
    if not columns:
        return []
    low = min(start for start, _ in columns)
    high = max(stop for _, stop in columns)
    product = first[low:high] @ grad.T
    return [product[start - low : stop - low].T for start, stop in columns]


@dataclass
class Backward:
    """A backward pass whose input gradients are computed and whose Adam step is not applied
    yet (:meth:`Mlp.backward_input`)."""

    d_input: list[F32]
    """``d(loss)/d(input)`` of each range of input columns asked for."""
    _model: Mlp
    _activations: list[F32]
    _layer_grads: list[F32]

    def update(self, average: GradientAverage | None = None) -> None:
        """Apply the Adam step (its gradients averaged across ranks by ``average``); call
        once, before the model's next forward pass."""
        self._model._update(self._activations, self._layer_grads, average)


@functools.cache
def start_dense_kernels() -> None:
    """Load (or, on an empty numba cache, compile) the dense step's kernels on a scratch model,
    once per process: the trainer calls this before its clock starts, where the first step
    would otherwise pay it inside training (see :mod:`sniper.store._warm`)."""
    model = Mlp(2, (2,), 0.1)
    _, activations = model.forward(np.ones((2, 2), dtype=np.float32))
    model.backward(activations, np.ones(2, dtype=np.float32), [(0, 2)])


class _MlpStep(TrainStep):
    def __init__(self, loss: float, predictions: F32, backward: Backward, names: list[str]):
        self.loss = loss
        self.predictions = predictions
        self.input_grads = dict(zip(names, backward.d_input, strict=True))
        self._backward = backward

    def update(self) -> None:
        self._backward.update()

    def update_averaged(self, average: GradientAverage) -> None:
        self._backward.update(average)


class MlpModel(DenseModel):
    """The default model, registered as ``"mlp"``: :class:`Mlp` over the whole input matrix,
    one output per label: a logit with log loss for a binary label, the value itself with
    squared error for a regression one (:mod:`sniper.models._loss`; averaged over the examples
    and the labels, as the torch models' loss is). Needs nothing but numpy (and the store's
    numba)."""

    def __init__(
        self,
        inputs: ModelInputs,
        hidden: Sequence[int] = (64,),
        lr: float = 0.002,
        seed: int = 0,
    ) -> None:
        if inputs.sequences:
            name = next(iter(inputs.sequences))
            raise ValueError(
                f"the mlp model takes pooled embeddings only; variable {name!r} has pooling "
                "'none' (a sequence): pool it (sum, mean or sqrtn) or use a torch model that "
                "takes sequences"
            )
        self.inputs = inputs
        self.network = Mlp(inputs.width, tuple(hidden), lr, seed, outputs=len(inputs.labels))
        self._names = list(inputs.columns)
        self._ranges = list(inputs.columns.values())
        self._regression = inputs.regression_mask

    def train_step(
        self, inputs: F32, labels: F32, *, sequences: Mapping[str, Jagged] | None = None
    ) -> TrainStep:
        outputs, activations = self.network.forward(inputs)
        loss, predicted, d_outputs = fit(outputs, labels, self._regression)
        backward = self.network.backward_input(activations, d_outputs, self._ranges)
        return _MlpStep(loss, predicted, backward, self._names)

    def predict(self, inputs: F32, *, sequences: Mapping[str, Jagged] | None = None) -> F32:
        outputs, _ = self.network.forward(inputs)
        return predictions(outputs, self._regression)

    def state(self) -> dict[str, NDArray[np.generic]]:
        return self.network.state()

    def load_state(self, arrays: Mapping[str, NDArray[np.generic]]) -> None:
        self.network.load_state(arrays)

    def learning_rate(self) -> float:
        return self.network.lr

    def warm_up(self) -> None:
        start_dense_kernels()


MODEL = MlpModel
"""The ``"mlp"`` built-in: ``hidden`` (layer widths), ``lr`` (Adam's) and ``seed``."""
