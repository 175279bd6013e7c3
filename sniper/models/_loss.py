"""The numpy dense models' loss: log loss for binary labels, squared error for regression.

One function owns it, so that the MLP and any numpy model agree on what a label's output means:
a binary label's output is a logit (its prediction the sigmoid, its loss the log loss), a
regression label's output is the prediction itself (its loss the squared error). The batch's
loss is the mean over its examples and labels, as torch's ``reduction="mean"`` over a
``[batch, labels]`` loss is, and the gradient is that mean's.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sniper.data import log_loss

__all__ = ["fit", "predictions", "sigmoid"]

F32 = NDArray[np.float32]


def sigmoid(x: F32) -> F32:
    """Numerically stable logistic function."""
    out = np.empty_like(x)
    positive = x >= 0
    out[positive] = 1.0 / (1.0 + np.exp(-x[positive]))
    exp_x = np.exp(x[~positive])
    out[~positive] = exp_x / (1.0 + exp_x)
    return out


def predictions(outputs: F32, regression: NDArray[np.bool_]) -> F32:
    """Each output column's prediction: its sigmoid for a binary label, itself for a
    regression one (``regression``: per column; ``outputs`` is ``[batch]`` for one label)."""
    if not regression.any():
        return sigmoid(outputs)
    if outputs.ndim == 1:
        return outputs.copy()
    out = sigmoid(outputs)
    out[:, regression] = outputs[:, regression]
    return out


def fit(outputs: F32, labels: F32, regression: NDArray[np.bool_]) -> tuple[float, F32, F32]:
    """The batch's loss, the predictions, and ``d(loss)/d(outputs)``."""
    predicted = predictions(outputs, regression)
    losses = [
        _squared_error(truth, guess) if regression[k] else log_loss(truth, guess)
        for k, (truth, guess) in enumerate(zip(_split(labels), _split(predicted), strict=True))
    ]
    d_outputs = (predicted - labels).astype(np.float32)
    if regression.any():
        d_outputs *= np.where(regression, 2.0, 1.0).astype(np.float32)
    d_outputs /= labels.size
    return float(np.mean(losses)), predicted, d_outputs


def _split(array: F32) -> list[F32]:
    """Each label's column of a ``[batch]`` (one label) or ``[batch, labels]`` array."""
    return [array] if array.ndim == 1 else [array[:, k] for k in range(array.shape[1])]


def _squared_error(truth: F32, guess: F32) -> float:
    return float(np.mean((guess.astype(np.float64) - truth) ** 2))
