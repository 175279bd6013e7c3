"""``dlrm``: DLRM (Naumov et al. 2019): a bottom MLP over the dense features, the pairwise dot
products of every two of its output and the embeddings, and a top MLP over those.

The dot interaction needs one width for all of them: every variable's embedding and the bottom
MLP's output have the same dim (refused otherwise, naming the odd variables).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from sniper.models import ModelInputs
from sniper.torch._model import Feature
from sniper.torch.models._fields import field_dims, input_parts
from sniper.torch.models._interaction import dot_interaction, load_interaction_kernels
from sniper.torch.models._zoo import ZooModel, equal_width, layers

__all__ = ["DLRM", "DlrmNet"]

INTERACTION_THREADS = 2
"""Threads of a DLRM's dot interaction unless its ``interaction_threads`` says otherwise."""


class DlrmNet(nn.Module):
    """``bottom``: hidden widths of the bottom MLP (its output is the embedding dim);
    ``top``: hidden widths of the top MLP (its output is one logit per label);
    ``interaction_threads``: threads that share the dot interaction on the CPU, the model's
    own included (:func:`dot_interaction`; its results are the same bits on any number).

    It takes the input matrix whole (``takes_matrix``): the pooled embeddings, side by side
    in the matrix, reach the interaction as one view, where a dict of them was one leaf each
    and a stack (a copy) of them all."""

    takes_matrix = True

    pairs: torch.Tensor
    """The pairs of fields below the diagonal, each dot product once, as indices into the
    flattened ``[fields, fields]`` products (:func:`dot_interaction`)."""

    def __init__(
        self,
        inputs: ModelInputs,
        bottom: Sequence[int] = (64,),
        top: Sequence[int] = (64,),
        interaction_threads: int = INTERACTION_THREADS,
    ) -> None:
        super().__init__()
        threads = interaction_threads
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(
                f"dlrm's interaction_threads must be an integer of at least 1, got {threads!r}"
            )
        self.interaction_threads = threads
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

    def warm_up(self) -> None:
        """Load the interaction's kernels (:class:`~sniper.torch.TorchModel` calls this before
        training starts)."""
        load_interaction_kernels()

    def forward(
        self,
        inputs: torch.Tensor | Mapping[str, Feature],
        other: torch.Tensor | Mapping[str, Feature] | None = None,
    ) -> torch.Tensor:
        """``(matrix[, sequences])`` or ``(embeddings, dense)`` (:func:`input_parts`)."""
        pooled, sequences, dense = input_parts(self.embedding_width, inputs, other)
        fields = [pooled, *sequences]  # [batch, k * dim] each, in the fields' order
        if self.bottom is not None:
            fields.insert(0, self.bottom(dense))
        interacted = dot_interaction(
            fields, self.dim, self.pairs, self.bottom is not None, self.interaction_threads
        )
        return self.top(interacted)  # type: ignore[no-any-return]


class DLRM(ZooModel):
    """``dlrm``: params ``bottom`` and ``top`` (hidden widths, default ``[64]`` each) and
    ``interaction_threads`` (default :data:`INTERACTION_THREADS`)."""

    network = DlrmNet
