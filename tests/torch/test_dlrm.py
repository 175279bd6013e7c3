"""DLRM's dot interaction (``dot_interaction``) against autograd's own arithmetic, and the
gradient of the input matrix a zoo model that takes it whole hands back: the same values as
fed by the dict, ``[width, batch]`` in memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sniper.models import ModelInputs, open_model
from sniper.torch.models._interaction import _by_autograd, _spread, dot_interaction


def _pairs(fields: int) -> torch.Tensor:
    rows, cols = torch.tril_indices(fields, fields, offset=-1)
    return rows * fields + cols  # type: ignore[no-any-return]


def _fields(batch: int, widths: list[int], dtype: torch.dtype) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(len(widths) * batch)
    return [
        torch.randn(batch, width, generator=generator, dtype=dtype).requires_grad_(True)
        for width in widths
    ]


@pytest.mark.parametrize("keep_first", [True, False])
@pytest.mark.parametrize(
    ("batch", "dim", "widths"),
    [(5, 3, [3, 12, 3]), (2, 4, [8]), (33, 8, [8, 80]), (130, 16, [16, 128, 16, 16])],
)
def test_the_interaction_and_its_gradients_are_autograds(
    batch: int, dim: int, widths: list[int], keep_first: bool
) -> None:
    """The CPU's function against autograd's ``cat``, ``bmm`` and ``index_select`` (what runs
    on a GPU), for several chunks of examples and fields given in several blocks."""
    fields = _fields(batch, widths, torch.float32)
    pairs = _pairs(sum(widths) // dim)
    expected = _by_autograd(fields, dim, pairs, keep_first)
    got = dot_interaction(fields, dim, pairs, keep_first)
    grad = torch.randn(batch, expected.shape[1] + 3)[:, 3:]  # a block of a wider gradient
    torch.testing.assert_close(got, expected)
    for mine, theirs in zip(
        torch.autograd.grad(got, fields, grad),
        torch.autograd.grad(expected, fields, grad),
        strict=True,
    ):
        torch.testing.assert_close(mine, theirs)


def test_the_interaction_passes_gradcheck() -> None:
    fields = _fields(4, [3, 6, 3], torch.float64)
    assert torch.autograd.gradcheck(
        lambda *given: dot_interaction(given, 3, _pairs(4), keep_first=True), tuple(fields)
    )


def test_a_dtype_numpy_lacks_takes_autograds_own() -> None:
    fields = _fields(3, [8, 24], torch.bfloat16)
    got = dot_interaction(fields, 8, _pairs(4), keep_first=True)
    (grad,) = torch.autograd.grad(got.sum(), fields[:1])
    expected = dot_interaction([f.detach().float() for f in fields], 8, _pairs(4), True)
    torch.testing.assert_close(got.float(), expected, rtol=0.02, atol=0.05)
    assert got.dtype == grad.dtype == torch.bfloat16


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


def test_fields_of_two_dtypes_take_autograds_own() -> None:
    """numpy would cast the wider field down into one stack; torch's ``cat`` promotes."""
    fields = [*_fields(3, [4], torch.float32), *_fields(3, [8], torch.float64)]
    got = dot_interaction(fields, 4, _pairs(3), keep_first=False)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, _by_autograd(fields, 4, _pairs(3), keep_first=False))


@pytest.mark.parametrize("batch", [1, 64, 65, 200, 1024])
@pytest.mark.parametrize("threads", [2, 3, 8])
def test_threads_share_the_chunks_and_give_the_same_bits(batch: int, threads: int) -> None:
    """Each thread takes whole chunks of examples (a batch of fewer chunks than threads leaves
    some idle), and each chunk's arithmetic is the one thread's: equal, not close."""
    fields = _fields(batch, [16, 64, 16], torch.float32)
    pairs = _pairs(6)
    grad = torch.randn(batch, 16 + 15)
    alone = dot_interaction(fields, 16, pairs, keep_first=True)
    shared = dot_interaction(fields, 16, pairs, keep_first=True, threads=threads)
    assert torch.equal(alone, shared)
    for mine, theirs in zip(
        torch.autograd.grad(shared, fields, grad),
        torch.autograd.grad(alone, fields, grad),
        strict=True,
    ):
        assert torch.equal(mine, theirs)


def test_a_helper_s_failure_reaches_the_caller_after_every_helper_is_done() -> None:
    """A chunk that fails on a helper thread fails the interaction, once no thread writes."""
    done: list[int] = []

    def work(first: int, last: int) -> None:
        if first:
            raise RuntimeError(f"chunk at {first} failed")
        done.append(last)

    with pytest.raises(RuntimeError, match="chunk at 128 failed"):
        _spread(256, 2, work)
    assert done == [128]


def test_the_interaction_threads_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="threads must be at least 1, got 0"):
        dot_interaction(_fields(2, [8], torch.float32), 4, _pairs(2), True, threads=0)
    for given in (0, "two", 1.5, True):
        with pytest.raises(
            ValueError,
            match=f"dlrm's interaction_threads must be an integer of at least 1, got {given!r}",
        ):
            open_model(
                "dlrm", INPUTS, {"interaction_threads": given}, optimizer="sgd", lr=0.1, seed=0
            )
