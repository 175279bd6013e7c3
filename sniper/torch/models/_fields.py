"""The zoo's inputs as fields: one ``[batch, dim]`` tensor per variable, sequences included.

The zoo's networks are field models: an MLP over ``[fields ‖ dense]``, or interactions
between every two fields (DLRM's dots, DeepFM's factorization machine, DCN's crosses). A
sequence variable (pooling ``none``) reaches the network as a jagged ``(values, offsets)``
pair instead of a ``[batch, dim]`` block; the zoo takes it as one more field, the **mean** of
each example's values (zeros for an empty sequence), so each model trains on sequences without
a second code path. The gradient of that mean reaches every value (``1 / length`` of the
field's), and the trainer pushes it per value as the ps expects. A model that wants more of a
sequence than its mean (DIN's attention, BST's transformer) is a module of the user's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import torch
from torch.autograd.function import FunctionCtx, once_differentiable

from sniper.models import ModelInputs
from sniper.torch._model import Feature

__all__ = ["Parts", "field_dims", "fields", "input_parts", "input_width", "sequence_mean"]


def field_dims(inputs: ModelInputs) -> dict[str, int]:
    """Each field's width in the order :func:`fields` gives them: the pooled variables, then
    the sequences (the order the trainer builds the ``embeddings`` dict in)."""
    return {**inputs.dims, **inputs.sequences}


def input_width(inputs: ModelInputs) -> int:
    """The width of ``[fields ‖ dense]``: :attr:`ModelInputs.width` plus the sequences'."""
    return inputs.width + sum(inputs.sequences.values())


def fields(embeddings: Mapping[str, Feature]) -> list[torch.Tensor]:
    """Each variable's ``[batch, dim]`` field: a pooled one as it is, a sequence's mean."""
    return [
        sequence_mean(*feature) if isinstance(feature, tuple) else feature
        for feature in embeddings.values()
    ]


def sequence_mean(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``[batch, dim]``: the mean of each example's ``values[offsets[b]:offsets[b + 1]]``,
    zeros where an example has none."""
    lengths = offsets.diff()
    batch = lengths.shape[0]
    example = torch.repeat_interleave(torch.arange(batch, device=values.device), lengths)
    sums = values.new_zeros(batch, values.shape[1]).index_add(0, example, values)
    return sums / lengths.clamp(min=1).unsqueeze(1).to(values.dtype)


class Parts(NamedTuple):
    """A model's input in three parts, whichever form it came in."""

    pooled: torch.Tensor
    """``[batch, embedding_width]``: the pooled variables' embeddings side by side."""
    sequences: list[torch.Tensor]
    """Each sequence variable's ``[batch, dim]`` field (its mean)."""
    dense: torch.Tensor
    """``[batch, dense_features]``."""


def input_parts(
    embedding_width: int,
    inputs: torch.Tensor | Mapping[str, Feature],
    other: torch.Tensor | Mapping[str, Feature] | None,
) -> Parts:
    """The parts of a zoo network's input, in either form a ``takes_matrix`` network is
    called with: ``(matrix[, sequences])`` by :class:`~sniper.torch.TorchModel` (the pooled
    part a view of the matrix: no copy), or ``(embeddings, dense)`` by a loop of the user's
    own (``TrainCtx``)."""
    if isinstance(inputs, Mapping):
        assert isinstance(other, torch.Tensor), "forward(embeddings, dense)"
        pooled = [f for f in inputs.values() if not isinstance(f, tuple)]
        sequences = fields({k: f for k, f in inputs.items() if isinstance(f, tuple)})
        return Parts(torch.cat(pooled, dim=1), sequences, other)
    sequences = fields(other) if isinstance(other, Mapping) else []
    dense = inputs[:, embedding_width:].detach()
    return Parts(_embedding_columns(inputs, embedding_width), sequences, dense)


def _embedding_columns(matrix: torch.Tensor, width: int) -> torch.Tensor:
    return _EmbeddingColumns.apply(matrix, width)  # type: ignore[no-untyped-call,no-any-return]


class _EmbeddingColumns(torch.autograd.Function):
    """The input matrix's first ``width`` columns (a view), whose gradient comes back as the
    matrix's, ``[matrix width, batch]`` in memory: each variable's block of it one contiguous
    run, as the ps's push and its finite check read it fastest (``sniper.torch._linear``
    says why). The plain slice's backward wrote the gradient row-major into a zeroed matrix;
    on DLRM at seed_ctr 0.02 the finite check alone then took 5 ms of a batch's push.

    The dense features' columns are data, with no gradient to push: :func:`input_parts`
    hands them on detached, so no second gradient of the matrix is added to this one. The
    view it returns is a custom function's: a network must not change it in place."""

    @staticmethod
    def forward(ctx: FunctionCtx, matrix: torch.Tensor, width: int) -> torch.Tensor:
        ctx.shape = matrix.shape  # type: ignore[attr-defined]
        return matrix[:, :width]

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        batch, columns = ctx.shape
        width = grad.shape[1]
        whole = grad.new_empty(columns, batch)
        whole[:width].copy_(grad.t())
        whole[width:].zero_()
        return whole.t(), None
