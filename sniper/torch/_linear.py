"""A ``torch.nn.Linear`` whose CPU products run on numpy's BLAS: :class:`Linear`.

Why. On the CPU sniper is measured on (AMD EPYC, Zen 4, one thread), the MKL in torch's CPU
wheels runs one of an MLP's three products at half the speed of numpy's OpenBLAS: on a
``[1024, 1229]`` batch with 64 outputs, ``x @ w.T`` 1.8 ms in both and ``g.T @ x`` 2.0
against 1.9, but ``g @ w`` (the input's gradient) 3.4 against 1.6. MKL picks slower code
paths on CPUs it does not recognize (told this one is Intel's, through its undocumented CPU
check, it ran all three in 1.5-1.7 ms), and torch has no switch to another BLAS for float32.
With the products on numpy, ``torch_mlp``'s step alone went from 10.9 to 8.0 ms (the numpy
MLP's: 7.2). So the zoo's layers hand their products to numpy, whose BLAS runs under the
same thread limit (the trainer's ``blas_threads``), and keep everything else torch's: the
parameters, autograd, the optimizer, ``state_dict`` (a checkpoint loads into a plain
``nn.Linear`` and back).

The gradient of an input that is a leaf (the trainer's input matrix) is computed as
``w.T @ g.T``, ``[in, batch]`` in memory, and handed back as its transpose: each variable's
column block of it is then one contiguous run, which a ps's push and its finite check read
fastest (the numpy MLP's layout; a row-major gradient's blocks cost the push about 1 ms a
seed_ctr 0.02 batch more, 4.5 against 5.5 ms in the kernel-bound limit). An intermediate's
gradient stays row-major, as the elementwise backward between layers wants it.

Only dense float32 tensors on the CPU outside ``torch.compile`` take the numpy path; anything
else (a GPU, float64, a sparse input, a compiled graph) runs ``nn.Linear``'s own ``forward``.

The weights' gradients, later (:func:`deferred_weight_grads`). The trainer needs the input
matrix's gradient to push; the weights' gradients only for the model's update, which runs
while the push does. So inside a training step's backward each layer computes its input's
gradient only, and keeps what its weight's product needs; :meth:`WeightGrads.apply` computes
them all before the optimizer's step. The numpy MLP has always split its step so (its
``update`` computes the weights' gradients); in torch this took the ``g.T @ x`` products
(about 2 ms of ``torch_mlp``'s step at seed_ctr 0.02, 5 of DLRM's) off the path that each
batch's push and the next lookup wait on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.autograd.function import FunctionCtx, once_differentiable

__all__ = ["Linear", "WeightGrads", "deferred_weight_grads"]


class WeightGrads:
    """The weight and bias gradients of the layers whose backward ran inside
    :func:`deferred_weight_grads`, not computed yet."""

    def __init__(self, params: Iterable[torch.Tensor]) -> None:
        self._params = {id(param) for param in params}
        self._products: list[tuple[torch.Tensor, torch.Tensor | None, np.ndarray, np.ndarray]] = []

    def keep(
        self, weight: torch.Tensor, bias: torch.Tensor | None, grad: np.ndarray, x: np.ndarray
    ) -> bool:
        """Keep a layer's output gradient ``grad`` and input ``x`` (matrices) for its
        ``weight``'s (and ``bias``'s, unless None) gradient; False, keeping nothing, unless
        each is a parameter of the step's (a leaf, no hook on it): a weight computed from
        others (``parametrize``, ``weight_norm``) or one that a hook watches takes its
        gradient from autograd, at once."""
        if not all(self._takes(param) for param in (weight, bias) if param is not None):
            return False
        self._products.append((weight, bias, grad, x))
        return True

    def _takes(self, param: torch.Tensor) -> bool:
        return (
            id(param) in self._params
            and param.is_leaf
            and not getattr(param, "_backward_hooks", None)
            and not getattr(param, "_post_accumulate_grad_hooks", None)
        )

    def apply(self) -> None:
        """Compute every kept gradient and add it to its parameter's ``.grad`` (a parameter
        used twice gets both); idempotent."""
        products, self._products = self._products, []
        for weight, bias, grad, x in products:
            weight_grad, bias_grad = _param_grads(grad, x, True, bias is not None)
            _accumulate(weight, weight_grad)
            _accumulate(bias, bias_grad)


def _param_grads(
    grad: np.ndarray, x: np.ndarray, weight: bool, bias: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """A layer's weight gradient ``grad.T @ x`` where ``weight``, its bias's (``grad`` summed
    over the examples) where ``bias``, else None: at once in its backward, or later in
    :meth:`WeightGrads.apply`."""
    weight_grad = torch.from_numpy(np.matmul(grad.T, x)) if weight else None
    bias_grad = torch.from_numpy(grad.sum(axis=0)) if bias else None
    return weight_grad, bias_grad


def _accumulate(param: torch.Tensor | None, grad: torch.Tensor | None) -> None:
    """A new ``.grad`` (autograd's may be a view it handed out elsewhere: not added in place);
    nothing where either is None (a layer without a trained bias)."""
    if param is None or grad is None:
        return
    param.grad = grad if param.grad is None else param.grad + grad


_deferring = threading.local()


@contextmanager
def deferred_weight_grads(params: Iterable[torch.Tensor]) -> Iterator[WeightGrads]:
    """While the block runs on this thread, the backward of a :class:`Linear` (on the numpy
    path) whose weight is one of ``params`` (the optimizer's) returns its input's gradient
    only: it keeps what its weight's and bias's gradients need in the :class:`WeightGrads`
    yielded, whose ``apply()`` computes them. Autograd runs a CPU graph's backward on the
    calling thread, so a backward called in the block defers."""
    grads = WeightGrads(params)
    outer = getattr(_deferring, "grads", None)
    _deferring.grads = grads
    try:
        yield grads
    finally:
        _deferring.grads = outer


def _array(tensor: torch.Tensor) -> np.ndarray[Any, np.dtype[np.float32]]:
    """``tensor``'s memory as a numpy array (no copy), as a matrix of its last dimension
    (each torch call here gives up the GIL and takes it back: none that is not needed)."""
    array = tensor.detach().numpy()
    return array if array.ndim == 2 else array.reshape(-1, array.shape[-1])


class _NumpyLinear(torch.autograd.Function):
    """``x @ w.T + b`` and its gradients, each product one numpy ``matmul``."""

    @staticmethod
    def forward(
        ctx: FunctionCtx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.bias = bias  # type: ignore[attr-defined]  # the parameter itself, for its .grad
        ctx.leaf_input = x.is_leaf and x.dim() == 2  # type: ignore[attr-defined]
        out = np.matmul(_array(x), weight.detach().numpy().T)
        if bias is not None:
            out += bias.detach().numpy()
        if x.dim() != 2:
            out = out.reshape(*x.shape[:-1], weight.shape[0])
        return torch.from_numpy(out)

    @staticmethod
    @once_differentiable
    def backward(
        ctx: Any, grad: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        x, weight = ctx.saved_tensors
        g = _array(grad)
        dx = None
        if ctx.needs_input_grad[0] and ctx.leaf_input:  # [in, batch] in memory, returned .T
            dx = torch.from_numpy(np.matmul(weight.detach().numpy().T, g.T)).T
        elif ctx.needs_input_grad[0]:
            dx = torch.from_numpy(np.matmul(g, weight.detach().numpy()).reshape(x.shape))
        trained_bias = ctx.bias if ctx.bias is not None and ctx.needs_input_grad[2] else None
        deferred: WeightGrads | None = getattr(_deferring, "grads", None)
        inputs = _array(x)
        # A saved leaf comes back as the parameter itself; were it not, keep() would find it
        # no parameter of the step's and its gradient would be computed here, at once.
        if (
            ctx.needs_input_grad[1]
            and deferred is not None
            and deferred.keep(weight, trained_bias, g, inputs)
        ):
            return dx, None, None
        dw, db = _param_grads(g, inputs, ctx.needs_input_grad[1], trained_bias is not None)
        return dx, dw, db


class Linear(nn.Linear):
    """``nn.Linear`` with its CPU float32 products on numpy's BLAS (see the module doc); the
    same parameters, initialization and ``state_dict`` as ``nn.Linear``."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if (
            input.device.type == "cpu"
            and input.layout == torch.strided
            and input.dtype == torch.float32
            and self.weight.dtype == torch.float32
            and not torch.compiler.is_compiling()
        ):
            return _NumpyLinear.apply(input, self.weight, self.bias)  # type: ignore[no-untyped-call,no-any-return]
        return super().forward(input)
