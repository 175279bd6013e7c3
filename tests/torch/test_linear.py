"""``sniper.torch.Linear``: ``nn.Linear``'s values, gradients and state, whatever the input's
shape, whichever way its gradient is asked for; the products on numpy's BLAS."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from sniper.torch import Linear, open_optimizer
from sniper.torch._linear import deferred_weight_grads


def _twins(bias: bool = True) -> tuple[Linear, nn.Linear]:
    torch.manual_seed(0)
    ours = Linear(7, 3, bias=bias)
    theirs = nn.Linear(7, 3, bias=bias)
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


def _close(a: torch.Tensor | None, b: torch.Tensor | None) -> None:
    assert a is not None and b is not None
    assert a.shape == b.shape
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(5, 7), (2, 5, 7), (7,)])
@pytest.mark.parametrize("bias", [True, False])
def test_values_and_gradients_are_nn_linears(shape: tuple[int, ...], bias: bool) -> None:
    ours, theirs = _twins(bias)
    x = torch.randn(*shape)
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    out_a, out_b = ours(a), theirs(b)
    _close(out_a, out_b)
    weights = torch.randn(out_b.shape)
    (out_a * weights).sum().backward()
    (out_b * weights).sum().backward()
    _close(a.grad, b.grad)
    _close(ours.weight.grad, theirs.weight.grad)
    if bias:
        _close(ours.bias.grad, theirs.bias.grad)


def test_a_leaf_input_gets_its_gradient_transposed_in_memory_and_a_layer_behind_does_not() -> None:
    """The input leaf's gradient is ``[in, batch]`` in memory (each column block one
    contiguous run: what a ps's push reads fastest); an intermediate's is row-major, for
    the elementwise backward between layers. Both equal nn.Linear's."""
    first, twin_first = _twins()
    second, twin_second = Linear(3, 2), nn.Linear(3, 2)
    twin_second.load_state_dict(second.state_dict())
    x = torch.randn(6, 7)
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    (grad_a,) = torch.autograd.grad(second(torch.relu(first(a))).sum(), [a])
    (grad_b,) = torch.autograd.grad(twin_second(torch.relu(twin_first(b))).sum(), [b])
    _close(grad_a, grad_b)
    assert grad_a.stride() == (1, 6)  # the transposed product, viewed
    hidden = torch.randn(6, 7, requires_grad=True) * 1.0  # not a leaf
    (inner,) = torch.autograd.grad(first(hidden).sum(), [hidden])
    assert inner.is_contiguous()


def test_what_is_not_dense_float32_on_the_cpu_runs_nn_linears_forward() -> None:
    ours, theirs = _twins()
    ours.double(), theirs.double()
    x = torch.randn(4, 7, dtype=torch.float64, requires_grad=True)
    out = ours(x)
    assert out.dtype == torch.float64
    assert "NumpyLinear" not in type(out.grad_fn).__name__
    _close(out, theirs(x))
    ours.float()
    dense = torch.randn(4, 7)
    _close(ours(dense.to_sparse()), ours(dense))  # a sparse input: nn.Linear's own path


def test_inference_and_no_grad_give_the_same_values() -> None:
    ours, theirs = _twins()
    x = torch.randn(4, 7)
    with torch.no_grad():
        _close(ours(x), theirs(x))
    with torch.inference_mode():
        _close(ours(x), theirs(x))


def test_state_dicts_move_between_linear_and_nn_linear() -> None:
    ours, theirs = _twins()
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    again = nn.Linear(7, 3)
    again.load_state_dict(ours.state_dict())
    _close(again.weight, ours.weight)


def test_optimizers_run_one_kernel_a_step_where_torch_has_one() -> None:
    params = list(Linear(4, 2).parameters())
    assert open_optimizer("adam", iter(params), 0.01).defaults["fused"] is True
    assert open_optimizer("sgd", iter(params), 0.01).defaults["fused"] is True
    assert open_optimizer("rmsprop", iter(params), 0.01).defaults["foreach"] is True
    sparse = open_optimizer("sparseadam", iter(params), 0.01).defaults
    assert "fused" not in sparse and "foreach" not in sparse


@pytest.mark.parametrize("shape", [(5, 7), (2, 5, 7)])
def test_deferred_weight_gradients_are_nn_linears_once_applied(shape: tuple[int, ...]) -> None:
    """Inside ``deferred_weight_grads`` the input's gradient comes back at once and the
    weights' wait for ``apply()``: then they are autograd's, a layer used twice included, and
    a frozen bias gets none."""
    ours, theirs = _twins()
    ours.bias.requires_grad_(False)
    theirs.bias.requires_grad_(False)
    x = torch.randn(*shape)
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    weights = torch.randn(*shape[:-1], 3)
    with deferred_weight_grads(ours.parameters()) as later:
        (input_grad,) = torch.autograd.grad(((ours(a) + ours(a * 2)) * weights).sum(), [a])
    assert ours.weight.grad is None
    ((theirs(b) + theirs(b * 2)) * weights).sum().backward()
    _close(input_grad, b.grad)
    later.apply()
    _close(ours.weight.grad, theirs.weight.grad)
    assert ours.bias.grad is None
    later.apply()  # applied once: nothing is left to add
    _close(ours.weight.grad, theirs.weight.grad)


def test_a_backward_outside_the_block_computes_every_gradient_at_once() -> None:
    ours, _ = _twins()
    with deferred_weight_grads(ours.parameters()):
        out = ours(torch.randn(4, 7))
    out.sum().backward()
    assert ours.weight.grad is not None and ours.bias.grad is not None


def test_a_weight_that_is_not_the_optimizers_own_parameter_takes_autograds_gradient_at_once() -> (
    None
):
    """A weight outside ``params`` (not the optimizer's), or computed from a parameter (a
    parametrization), or watched by a hook, is not deferred: autograd's gradient, at once."""
    outside, _ = _twins()
    with deferred_weight_grads([]) as later:
        outside(torch.randn(4, 7)).sum().backward()
    assert outside.weight.grad is not None

    class Doubled(nn.Module):
        def forward(self, weight: torch.Tensor) -> torch.Tensor:
            return weight * 2

    parametrized, twin = _twins()
    nn.utils.parametrize.register_parametrization(parametrized, "weight", Doubled())
    original = dict(parametrized.named_parameters())["parametrizations.weight.original"]
    with deferred_weight_grads(parametrized.parameters()) as later:
        parametrized(torch.ones(4, 7)).sum().backward()
    later.apply()
    twin(torch.ones(4, 7)).sum().backward()
    assert twin.weight.grad is not None and original.grad is not None
    _close(original.grad, twin.weight.grad * 2)

    hooked, _ = _twins()
    seen: list[torch.Tensor] = []
    hooked.weight.register_hook(seen.append)  # type: ignore[no-untyped-call]
    with deferred_weight_grads(hooked.parameters()):
        hooked(torch.randn(4, 7)).sum().backward()
    assert len(seen) == 1 and hooked.weight.grad is not None


def test_a_deferred_gradient_is_added_to_a_new_tensor_not_into_autograds() -> None:
    """A weight also reached outside the layer has autograd's gradient first; the layer's is
    added to a new tensor, so a gradient autograd handed out stays as it was."""
    ours, theirs = _twins()
    x = torch.randn(4, 7)
    with deferred_weight_grads(ours.parameters()) as later:
        (ours(x).sum() + ours.weight.sum()).backward()
    direct = ours.weight.grad
    assert direct is not None and torch.equal(direct, torch.ones(3, 7))
    later.apply()
    (theirs(x).sum() + theirs.weight.sum()).backward()
    _close(ours.weight.grad, theirs.weight.grad)
    assert torch.equal(direct, torch.ones(3, 7))
