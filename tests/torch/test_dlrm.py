"""DLRM's dot interaction (``pair_dots``) against autograd's own arithmetic, and the gradient of
the input matrix a zoo model that takes it whole hands back: the same values as fed by the
dict, ``[width, batch]`` in memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sniper.models import ModelInputs, open_model
from sniper.torch.models._dlrm import _symmetric, _symmetric_indexed, pair_dots


def _pairs(fields: int) -> torch.Tensor:
    rows, cols = torch.tril_indices(fields, fields, offset=-1)
    return rows * fields + cols  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("batch", "fields", "dim"), [(5, 6, 3), (2, 2, 4), (33, 11, 8), (130, 9, 16)]
)
def test_the_pair_dots_and_their_gradient_are_autograds(batch: int, fields: int, dim: int) -> None:
    generator = torch.Generator().manual_seed(fields)
    stacked = torch.randn(batch, fields, dim, generator=generator, requires_grad=True)
    pairs = _pairs(fields)
    wide = torch.randn(batch, len(pairs) + 3, generator=generator)
    grad = wide[:, 3:]  # a column block of a wider gradient, as a concatenation hands it back
    expected = torch.bmm(stacked, stacked.transpose(1, 2)).flatten(1).index_select(1, pairs)
    (expected_grad,) = torch.autograd.grad(expected, [stacked], grad)
    got = pair_dots(stacked, pairs)
    (got_grad,) = torch.autograd.grad(got, [stacked], grad)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_grad, expected_grad)


def test_the_pair_dots_pass_gradcheck() -> None:
    stacked = torch.randn(4, 5, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: pair_dots(s, _pairs(5)), (stacked,))


def test_the_symmetric_gradient_is_the_same_by_kernel_and_by_torchs_indexing() -> None:
    """The kernel runs on the CPU, torch's indexing elsewhere (a GPU): the same matrices."""
    grad = torch.randn(7, 15)  # 6 fields
    by_kernel = torch.full((7, 6, 6), float("nan"))
    _symmetric(grad.numpy(), by_kernel.numpy())
    torch.testing.assert_close(by_kernel, _symmetric_indexed(grad, _pairs(6), 6))
    assert torch.equal(by_kernel, by_kernel.transpose(1, 2))
    assert not by_kernel.diagonal(dim1=1, dim2=2).any()


INPUTS = ModelInputs({"a": 4, "b": 4, "c": 4}, dense_features=3)


@pytest.mark.parametrize("name", ["dlrm", "torch_mlp"])
def test_the_matrixs_gradient_is_the_dicts_laid_out_width_by_batch(name: str) -> None:
    """A network that takes the matrix whole gives each variable the gradient it gives when
    fed the dict (the loop-owning form), as views of one gradient ``[width, batch]`` in
    memory: each variable's block one contiguous run, as the ps's push reads it."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, INPUTS.width)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.float32)
    model = open_model(name, INPUTS, {}, optimizer="sgd", lr=0.1, seed=0, threads=1)
    step = model.train_step(x, y)
    module = model.module  # type: ignore[attr-defined]
    embeddings = {
        name: torch.from_numpy(x[:, start:stop]).clone().requires_grad_(True)
        for name, (start, stop) in INPUTS.columns.items()
    }
    logits = module(embeddings, torch.from_numpy(x[:, INPUTS.embedding_width :]))
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits[:, 0], torch.from_numpy(y))
    expected = torch.autograd.grad(loss, list(embeddings.values()))
    for (variable, grad), want in zip(step.input_grads.items(), expected, strict=True):
        np.testing.assert_allclose(grad, want.numpy(), rtol=1e-5, atol=1e-7, err_msg=variable)
        assert grad.strides == (4, 4 * len(x)), variable


def test_a_dtype_numpy_lacks_takes_torchs_indexing() -> None:
    stacked = torch.randn(3, 4, 8).to(torch.bfloat16).requires_grad_(True)
    dots = pair_dots(stacked, _pairs(4))
    (grad,) = torch.autograd.grad(dots.sum(), [stacked])
    expected = pair_dots(stacked.detach().float().requires_grad_(True), _pairs(4))
    torch.testing.assert_close(dots.float(), expected, rtol=0.02, atol=0.05)
    assert grad.dtype == torch.bfloat16 and grad.shape == stacked.shape
