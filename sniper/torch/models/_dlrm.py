"""``dlrm``: DLRM (Naumov et al. 2019): a bottom MLP over the dense features, the pairwise dot
products of every two of its output and the embeddings, and a top MLP over those.

The dot interaction needs one width for all of them: every variable's embedding and the bottom
MLP's output have the same dim (refused otherwise, naming the odd variables).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn
from torch.autograd.function import FunctionCtx, once_differentiable

from sniper.models import ModelInputs
from sniper.store import kernel
from sniper.torch._model import Feature
from sniper.torch.models._fields import field_dims, input_parts
from sniper.torch.models._zoo import ZooModel, equal_width, layers

__all__ = ["DLRM", "DlrmNet"]


class DlrmNet(nn.Module):
    """``bottom``: hidden widths of the bottom MLP (its output is the embedding dim);
    ``top``: hidden widths of the top MLP (its output is one logit per label).

    It takes the input matrix whole (``takes_matrix``): the pooled embeddings, side by side
    in the matrix, are the ``[batch, fields, dim]`` block of the interaction as a view, where
    a dict of them was one leaf each and a stack (a copy) of them all."""

    takes_matrix = True

    pairs: torch.Tensor
    """The pairs of fields below the diagonal, each dot product once, as indices into the
    flattened ``[fields, fields]`` products (:class:`_PairDots`, off the CPU)."""

    def __init__(
        self, inputs: ModelInputs, bottom: Sequence[int] = (64,), top: Sequence[int] = (64,)
    ) -> None:
        super().__init__()
        dim = equal_width(inputs, "dlrm", "its dot interaction multiplies every two")
        self.dim = dim
        self.embedding_width = inputs.embedding_width
        features = inputs.dense_features
        self.bottom = layers([features, *bottom, dim], last_relu=True) if features else None
        count = len(field_dims(inputs)) + (1 if features else 0)
        rows, cols = torch.tril_indices(count, count, offset=-1)
        self.register_buffer("pairs", rows * count + cols, persistent=False)
        width = (dim if features else 0) + len(rows)
        self.top = layers([width, *top, len(inputs.labels)], last_relu=False)

    def forward(
        self,
        inputs: torch.Tensor | Mapping[str, Feature],
        other: torch.Tensor | Mapping[str, Feature] | None = None,
    ) -> torch.Tensor:
        """``(matrix[, sequences])`` or ``(embeddings, dense)`` (:func:`input_parts`)."""
        pooled, sequences, dense = input_parts(self.embedding_width, inputs, other)
        interacting = [pooled.view(len(pooled), -1, self.dim)]  # [batch, variables, dim]
        interacting += [field.unsqueeze(1) for field in sequences]
        parts = []
        if self.bottom is not None:
            bottom = self.bottom(dense)
            interacting.insert(0, bottom.unsqueeze(1))
            parts.append(bottom)
        stacked = torch.cat(interacting, dim=1)  # [batch, fields, dim]
        parts.append(pair_dots(stacked, self.pairs))
        return self.top(torch.cat(parts, dim=1))  # type: ignore[no-any-return]


def pair_dots(stacked: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """``[batch, fields, dim]`` -> ``[batch, pairs]``: the dot products of every two fields.
    ``pairs``: every pair below the diagonal in ``torch.tril_indices`` order, as indices into
    the flattened ``[fields, fields]`` products (the CPU's kernels walk that order
    themselves; torch's indexing elsewhere takes the indices)."""
    fields = stacked.shape[1]
    assert len(pairs) == fields * (fields - 1) // 2, "every pair below the diagonal"
    return _PairDots.apply(stacked, pairs)  # type: ignore[no-untyped-call,no-any-return]


class _PairDots(torch.autograd.Function):
    """``[batch, fields, dim]`` -> ``[batch, pairs]``: the dot products of every two fields,
    each pair below the diagonal once, in ``torch.tril_indices`` order (row by row).

    Why its own function. Autograd's version, ``bmm`` then ``index_select``, ran its backward
    as two ``bmm`` (one per operand, though both are the same tensor) and an ``index_add``
    into zeros; the gather and the scatter across columns were the slow part (about 3 and
    5 ms of a seed_ctr batch on one CPU thread, each ``bmm`` 5-6). Here the gradient is one
    ``bmm``: ``d(S S^T) = (G + G^T) S``, with ``G + G^T`` written whole by one kernel, and
    the forward's gather is a kernel too. The products run on numpy's BLAS, as the zoo's
    layers do (``sniper.torch._linear`` says why): torch's ``bmm`` took 6.4 ms for the
    gradient's product of a seed_ctr batch, numpy's 2.9. The interaction of a seed_ctr 0.02
    batch, forward and backward, went from 27 to 12 ms. Off the CPU, or in a dtype numpy
    lacks, the same arithmetic runs on torch's own ``bmm`` and indexing."""

    @staticmethod
    def forward(ctx: FunctionCtx, stacked: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(stacked, pairs)
        if not _on_kernels(stacked):
            products = torch.bmm(stacked, stacked.transpose(1, 2))
            return products.flatten(1).index_select(1, pairs)
        array = stacked.numpy()
        out = stacked.new_empty(len(stacked), len(pairs))
        fields = array.shape[1]
        square = np.empty((_CHUNK, fields, fields), dtype=array.dtype)
        for start, stop in _chunks(len(array)):
            chunk = array[start:stop]
            np.matmul(chunk, chunk.transpose(0, 2, 1), out=square[: stop - start])
            _below_diagonal(square[: stop - start], out.numpy()[start:stop])
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        stacked, pairs = ctx.saved_tensors
        batch, fields, _ = stacked.shape
        if not _on_kernels(grad):
            return torch.bmm(_symmetric_indexed(grad, pairs, fields), stacked), None
        array, given = stacked.numpy(), grad.numpy()
        out = np.empty_like(array)
        symmetric = np.empty((_CHUNK, fields, fields), dtype=array.dtype)
        for start, stop in _chunks(batch):
            _symmetric(given[start:stop], symmetric[: stop - start])
            np.matmul(symmetric[: stop - start], array[start:stop], out=out[start:stop])
        return torch.from_numpy(out), None


_CHUNK = 64
"""Examples a time on the CPU: a chunk's ``[fields, fields]`` products (1.5 MB at 77 fields)
stay in the core's cache between the product and the kernel that reads them. Whole batches
wrote and read 24 MB of them: forward 7.5 against 6.7 ms, backward 4.9 against 3.9, a
seed_ctr 0.02 batch on one thread."""


def _chunks(batch: int) -> Iterator[tuple[int, int]]:
    for start in range(0, batch, _CHUNK):
        yield start, min(start + _CHUNK, batch)


def _on_kernels(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cpu" and tensor.dtype in (torch.float32, torch.float64)


def _symmetric_indexed(grad: torch.Tensor, pairs: torch.Tensor, fields: int) -> torch.Tensor:
    """:func:`_symmetric` by torch's indexing, on any device."""
    both = grad.new_zeros(len(grad), fields * fields)
    mirrored = (pairs % fields) * fields + pairs // fields
    both.index_copy_(1, pairs, grad).index_copy_(1, mirrored, grad)
    return both.view(len(grad), fields, fields)


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


class DLRM(ZooModel):
    """``dlrm``: params ``bottom`` and ``top`` (hidden widths, default ``[64]`` each)."""

    network = DlrmNet
