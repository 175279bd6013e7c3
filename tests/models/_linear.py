"""A dense model written against sniper.models.DenseModel only, as a user would write one:
logistic regression on the whole input, plain SGD, no numba and no torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sniper.models import DenseModel, Jagged, ModelInputs, TrainStep

F32 = NDArray[np.float32]


class _Step(TrainStep):
    def __init__(self, model: Linear, inputs: F32, probs: F32, d_logits: F32, loss: float):
        self.loss = loss
        self.predictions = probs
        self.input_grads = {
            name: np.outer(d_logits, model.weights[start:stop]).astype(np.float32)
            for name, (start, stop) in model.inputs.columns.items()
        }
        self._model, self._inputs, self._d_logits = model, inputs, d_logits

    def update(self) -> None:
        model = self._model
        model.weights -= model.lr * (self._inputs.T @ self._d_logits)
        model.bias -= model.lr * float(self._d_logits.sum())
        model.updates += 1


class Linear(DenseModel):
    def __init__(self, inputs: ModelInputs, lr: float = 0.1) -> None:
        self.inputs = inputs
        self.lr = lr
        self.weights = np.zeros(inputs.width, dtype=np.float32)
        self.bias = 0.0
        self.updates = 0

    def _probs(self, inputs: F32) -> F32:
        logits = inputs @ self.weights + self.bias
        probs: F32 = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
        return probs

    def train_step(
        self, inputs: F32, labels: F32, *, sequences: Mapping[str, Jagged] | None = None
    ) -> TrainStep:
        probs = self._probs(inputs)
        clipped = np.clip(probs, 1e-7, 1 - 1e-7)
        loss = float(-np.mean(labels * np.log(clipped) + (1 - labels) * np.log(1 - clipped)))
        d_logits = ((probs - labels) / len(labels)).astype(np.float32)
        return _Step(self, inputs.copy(), probs, d_logits, loss)

    def predict(self, inputs: F32, *, sequences: Mapping[str, Jagged] | None = None) -> F32:
        return self._probs(inputs)

    def state(self) -> dict[str, NDArray[np.generic]]:
        return {"weights": self.weights.copy(), "bias": np.array(self.bias)}

    def load_state(self, arrays: Mapping[str, NDArray[np.generic]]) -> None:
        weights = arrays["weights"]
        if weights.shape != self.weights.shape:
            raise ValueError(f"weights do not fit this model: {weights.shape}")
        self.weights[...] = weights
        self.bias = float(arrays["bias"])


def build(inputs: ModelInputs, **params: Any) -> Linear:
    """The factory a config names as ``tests.models._linear:build``."""
    return Linear(inputs, **params)


def not_a_model(inputs: ModelInputs) -> object:
    return object()


def raises(inputs: ModelInputs) -> Linear:
    """A factory with a bug of its own."""
    known: dict[str, Linear] = {}
    return known["missing"]


def refuses(inputs: ModelInputs) -> Linear:
    """A factory refusing its params (ValueError: its documented way)."""
    raise ValueError("refuses: width 3 is too small")
