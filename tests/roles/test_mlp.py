"""The trainer's dense model: the input gradient it returns is the true one, range by range."""

from __future__ import annotations

import numpy as np
import pytest

from sniper.models import Mlp
from sniper.models._kernels import adam_update


@pytest.mark.parametrize("hidden", [(), (8,), (8, 4)])
def test_input_gradient_by_column_range_is_the_whole_gradient_sliced(
    hidden: tuple[int, ...],
) -> None:
    rng = np.random.default_rng(0)
    model = Mlp(11, hidden, lr=0.1, seed=1)
    before = [w.copy() for w in model.weights]
    x = rng.normal(size=(32, 11)).astype(np.float32)
    d_logits = rng.normal(size=32).astype(np.float32)
    _, activations = model.forward(x)
    columns = [(0, 4), (4, 8), (8, 9)]  # columns 9 and 10 (dense features) left out
    parts = model.backward(activations, d_logits, columns)
    # The reference: the chain rule through the weights as they were before the Adam step.
    grad = d_logits[:, None]
    for i in range(len(before) - 1, -1, -1):
        grad = grad @ before[i].T
        if i > 0:
            grad = grad * (activations[i] > 0)
    assert len(parts) == len(columns)
    for (start, stop), part in zip(columns, parts, strict=True):
        # A block of one transposed product: contiguous in memory, read in place by a push.
        assert part.dtype == np.float32 and part.flags.f_contiguous
        np.testing.assert_allclose(part, grad[:, start:stop], rtol=1e-5, atol=1e-6)
    assert any(not np.array_equal(w, b) for w, b in zip(model.weights, before, strict=True))


def test_input_gradient_matches_finite_differences() -> None:
    """d(sum of logits * d_logits)/d(input) by central differences, in float64 arithmetic."""
    rng = np.random.default_rng(2)
    model = Mlp(5, (6,), lr=0.0, seed=3)
    x = rng.normal(size=(3, 5)).astype(np.float32)
    d_logits = rng.normal(size=3).astype(np.float32)
    _, activations = model.forward(x)
    (analytic,) = model.backward(activations, d_logits, [(0, 5)])

    def objective(inputs: np.ndarray) -> float:
        h = np.maximum(inputs @ model.weights[0].astype(np.float64) + model.biases[0], 0)
        logits = (h @ model.weights[1].astype(np.float64) + model.biases[1])[:, 0]
        return float(logits @ d_logits)

    numeric = np.zeros_like(analytic, dtype=np.float64)
    for index in np.ndindex(x.shape):
        step = np.zeros(x.shape)
        step[index] = 1e-4
        base = x.astype(np.float64)
        numeric[index] = (objective(base + step) - objective(base - step)) / 2e-4
    np.testing.assert_allclose(analytic, numeric, rtol=1e-3, atol=1e-4)


def test_adam_kernel_takes_the_steps_of_adams_formula() -> None:
    """Three steps of the kernel against Adam written out in numpy (float64), bias
    corrections included."""
    rng = np.random.default_rng(3)
    param = rng.normal(size=50).astype(np.float32)
    m, v = np.zeros_like(param), np.zeros_like(param)
    want = param.astype(np.float64)
    want_m, want_v = np.zeros(50), np.zeros(50)
    lr, beta1, beta2, eps = 0.01, 0.9, 0.999, 1e-8
    for t in range(1, 4):
        grad = rng.normal(size=50).astype(np.float32)
        c1, c2 = 1 - beta1**t, 1 - beta2**t
        adam_update(param, grad, m, v, lr / c1, beta1, beta2, c2, eps)
        want_m = beta1 * want_m + (1 - beta1) * grad
        want_v = beta2 * want_v + (1 - beta2) * grad.astype(np.float64) ** 2
        want -= lr / c1 * want_m / (np.sqrt(want_v / c2) + eps)
    np.testing.assert_allclose(param, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m, want_m, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(v, want_v, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("hidden", [(), (8,), (8, 4)])
def test_a_step_moves_every_weight_against_its_gradient(hidden: tuple[int, ...]) -> None:
    """Adam's first step is ``lr * g / (|g| + eps)``: each weight and bias moves by ``lr``
    against the sign of its gradient, here found by plain backpropagation written out."""
    rng = np.random.default_rng(len(hidden))
    model = Mlp(6, hidden, lr=0.01, seed=1)
    x = rng.normal(size=(5, 6)).astype(np.float32)
    d_logits = rng.normal(size=5).astype(np.float32)
    before = [p.copy() for p in [*model.weights, *model.biases]]
    _, activations = model.forward(x)
    weight_grads: list[np.ndarray] = []
    bias_grads: list[np.ndarray] = []
    grad = d_logits[:, None].astype(np.float64)
    for i in range(len(model.weights) - 1, -1, -1):
        weight_grads.insert(0, activations[i].T.astype(np.float64) @ grad)
        bias_grads.insert(0, grad.sum(axis=0))
        grad = (grad @ model.weights[i].T.astype(np.float64)) * (activations[i] > 0)
    model.backward(activations, d_logits, [(0, 6)])
    after = [*model.weights, *model.biases]
    for old, new, g in zip(before, after, [*weight_grads, *bias_grads], strict=True):
        moved = g != 0
        np.testing.assert_allclose((old - new)[moved], 0.01 * np.sign(g[moved]), rtol=1e-3)
