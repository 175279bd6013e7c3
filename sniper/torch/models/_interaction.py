"""DLRM's dot interaction: the dot products of every two fields, each pair once, beside the
first field (``[bottom ‖ dots]``, the top MLP's input): :func:`dot_interaction`.

Why not autograd's ``cat``, ``bmm`` and ``index_select``. On the CPU sniper is measured on
(one thread, a seed_ctr batch: 1,024 examples, 77 fields of 16), that version took 28 ms
forward and backward, and most of it was not arithmetic:

- its backward ran two ``bmm`` (one per operand, though both are the same tensor) and an
  ``index_add`` into zeros; the gather and the scatter across columns took about 3 and 5 ms,
  each ``bmm`` 5-6 (torch's MKL; numpy's OpenBLAS ran the gradient's product in 2.9);
- two ``cat`` copied the fields into one stack and ``[bottom ‖ dots]`` into the top's input.

Here the gradient is one product, ``d(S S^T) = (G + G^T) S``, with ``G + G^T`` written whole by
a kernel; the forward's gather is a kernel that writes the dots into the top's input beside
the first field; the products run on numpy's BLAS (as the zoo's layers do:
``sniper.torch._linear`` says why), 64 examples a time, so that a chunk's ``[fields, fields]``
products stay in cache between the product and the kernel that reads them. The same batch
takes 12 ms on one thread; ``threads`` share its chunks (:func:`_spread` says why). Off the
CPU (a GPU), in a dtype other than float32 and float64 (or fields of two dtypes), or under
``torch.compile``, the interaction is autograd's own.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch.autograd.function import FunctionCtx, once_differentiable

from sniper.store import kernel

__all__ = ["dot_interaction", "load_interaction_kernels"]


def dot_interaction(
    fields: Sequence[torch.Tensor],
    dim: int,
    pairs: torch.Tensor,
    keep_first: bool,
    threads: int = 1,
) -> torch.Tensor:
    """``[first field ‖ dots]`` (``keep_first``) or ``[dots]``: ``[batch, (dim) + pairs]``.

    ``fields``: ``[batch, k * dim]`` tensors, ``k`` fields each, in the fields' order.
    ``pairs``: every pair of fields below the diagonal, in ``torch.tril_indices`` order, as
    indices into the flattened ``[fields, fields]`` products (autograd's path takes them; the
    CPU's kernels walk the same order themselves). ``threads``: how many threads share the
    CPU's chunks of examples, the calling one included (:func:`_spread`)."""
    count = sum(field.shape[1] for field in fields) // dim
    assert len(pairs) == count * (count - 1) // 2, "every pair below the diagonal, in order"
    if threads < 1:
        raise ValueError(f"the interaction's threads must be at least 1, got {threads}")
    if len({field.dtype for field in fields}) == 1 and all(_on_kernels(f) for f in fields):
        return _DotInteraction.apply(dim, keep_first, threads, *fields)  # type: ignore[no-untyped-call,no-any-return]
    return _by_autograd(fields, dim, pairs, keep_first)


def load_interaction_kernels() -> None:
    """Compile (or load from numba's cache) the kernels for float32, on two examples."""
    fields = [torch.zeros(2, 4, requires_grad=True)]
    torch.autograd.grad(dot_interaction(fields, 2, torch.tensor([2]), True).sum(), fields)


def _by_autograd(
    fields: Sequence[torch.Tensor], dim: int, pairs: torch.Tensor, keep_first: bool
) -> torch.Tensor:
    stacked = torch.cat(list(fields), dim=1)
    stacked = stacked.view(len(stacked), -1, dim)
    products = torch.bmm(stacked, stacked.transpose(1, 2))
    dots = products.flatten(1).index_select(1, pairs)
    return torch.cat([fields[0][:, :dim], dots], dim=1) if keep_first else dots


def _on_kernels(tensor: torch.Tensor) -> bool:
    return (
        tensor.device.type == "cpu"
        and tensor.dtype in (torch.float32, torch.float64)
        and not torch.compiler.is_compiling()
    )


class _DotInteraction(torch.autograd.Function):
    """:func:`dot_interaction` on the CPU (the module docstring says how)."""

    @staticmethod
    def forward(
        ctx: FunctionCtx, dim: int, keep_first: bool, threads: int, *fields: torch.Tensor
    ) -> torch.Tensor:
        arrays = [field.detach().numpy() for field in fields]
        batch = len(arrays[0])
        count = sum(array.shape[1] for array in arrays) // dim
        head = dim if keep_first else 0
        stacked = np.empty((batch, count * dim), dtype=arrays[0].dtype)
        out = np.empty((batch, head + count * (count - 1) // 2), dtype=stacked.dtype)

        def dots(first: int, last: int) -> None:
            square = np.empty((_CHUNK, count, count), dtype=stacked.dtype)
            for start, stop in _chunks(first, last):
                np.concatenate([a[start:stop] for a in arrays], axis=1, out=stacked[start:stop])
                chunk = stacked[start:stop].reshape(stop - start, count, dim)
                np.matmul(chunk, chunk.transpose(0, 2, 1), out=square[: stop - start])
                _below_diagonal(square[: stop - start], out[start:stop, head:])

        _spread(batch, threads, dots)
        out[:, :head] = stacked[:, :head]
        ctx.stacked = stacked  # type: ignore[attr-defined]
        ctx.dim, ctx.head, ctx.threads = dim, head, threads  # type: ignore[attr-defined]
        ctx.widths = [array.shape[1] for array in arrays]  # type: ignore[attr-defined]
        return torch.from_numpy(out)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        stacked: NDArray[Any] = ctx.stacked
        given = grad.numpy()
        batch, width = stacked.shape
        count, dim, head = width // ctx.dim, ctx.dim, ctx.head
        out = np.empty_like(stacked)

        def products(first: int, last: int) -> None:
            symmetric = np.empty((_CHUNK, count, count), dtype=stacked.dtype)
            for start, stop in _chunks(first, last):
                rows = stop - start
                _symmetric(given[start:stop, head:], symmetric[:rows])
                chunk = stacked[start:stop].reshape(rows, count, dim)
                np.matmul(symmetric[:rows], chunk, out=out[start:stop].reshape(rows, count, dim))

        _spread(batch, ctx.threads, products)
        out[:, :head] += given[:, :head]
        whole = torch.from_numpy(out)
        bounds = itertools.pairwise(np.cumsum([0, *ctx.widths]))
        return (None, None, None, *(whole[:, start:stop] for start, stop in bounds))


_CHUNK = 64
"""Examples a time: a chunk's ``[fields, fields]`` products (1.5 MB at 77 fields) stay in the
core's cache between the product and the kernel that reads them, where a whole seed_ctr
batch's are 24 MB (measured on one thread: forward 6.7 ms in chunks, 7.5 whole; backward 3.9
and 4.9)."""


def _chunks(first: int, last: int) -> Iterator[tuple[int, int]]:
    for start in range(first, last, _CHUNK):
        yield start, min(start + _CHUNK, last)


def _spread(batch: int, threads: int, work: Callable[[int, int], None]) -> None:
    """``work(first, last)`` over ``[0, batch)`` split into ``threads`` runs of whole chunks,
    the first on this thread, the others on helper threads at the same time.

    Why. Chunks are independent, and their products, kernels and copies release the GIL. In
    a one-process job the dense step is the trainer's critical path (its lookup waits for the
    previous push, the push for this step) while the ps' workers mostly wait for it, so a
    second core can take half the interaction, the largest part of a DLRM step. A helper
    waits on a queue, not spinning as BLAS's idle threads do.
    """
    per = -(-batch // (threads * _CHUNK)) * _CHUNK  # whole chunks a thread
    runs = [(start, min(start + per, batch)) for start in range(0, batch, per)] if batch else []
    if len(runs) <= 1:
        work(0, batch)
        return
    helpers = [_helpers(len(runs) - 1).submit(work, *run) for run in runs[1:]]
    try:
        work(*runs[0])
    finally:
        wait(helpers)  # none still writes into the arrays once this returns or raises
    for helper in helpers:
        helper.result()  # a helper's failure, once this thread's run succeeded


@functools.cache
def _helpers(count: int) -> ThreadPoolExecutor:
    """``count`` helper threads, made on first use and kept for the process."""
    return ThreadPoolExecutor(count, thread_name_prefix="sniper-interaction")


@kernel
def _below_diagonal(products: NDArray[np.float32], out: NDArray[np.float32]) -> None:
    """``out[b, p]``: ``products[b, i, j]`` of the ``p``-th pair ``i > j``, row by row."""
    batch, fields, _ = products.shape
    for b in range(batch):
        p = 0
        for i in range(1, fields):
            for j in range(i):
                out[b, p] = products[b, i, j]
                p += 1


@kernel
def _symmetric(grad: NDArray[np.float32], out: NDArray[np.float32]) -> None:
    """``out[b]``: ``[fields, fields]`` with ``grad[b, p]`` at the ``p``-th pair ``(i, j)``
    below the diagonal and at ``(j, i)``, zeros on the diagonal: every element written (in
    the pairs' order; gathering each row whole instead took twice as long)."""
    batch, fields, _ = out.shape
    for b in range(batch):
        p = 0
        for i in range(fields):
            out[b, i, i] = 0.0
            for j in range(i):
                value = grad[b, p]
                out[b, i, j] = value
                out[b, j, i] = value
                p += 1
