"""``dlrm``: DLRM (Naumov et al. 2019): a bottom MLP over the dense features, the pairwise dot
products of every two of its output and the embeddings, and a top MLP over those.

The dot interaction needs one width for all of them: every variable's embedding and the bottom
MLP's output have the same dim (refused otherwise, naming the odd variables).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from sniper.models import ModelInputs
from sniper.torch._model import Feature
from sniper.torch.models._fields import field_dims, fields
from sniper.torch.models._zoo import ZooModel, equal_width, layers

__all__ = ["DLRM", "DlrmNet"]


class DlrmNet(nn.Module):
    """``bottom``: hidden widths of the bottom MLP (its output is the embedding dim);
    ``top``: hidden widths of the top MLP (its output is one logit per label)."""

    rows: torch.Tensor
    cols: torch.Tensor
    """The pairs of fields below the diagonal: each dot product once."""

    def __init__(
        self, inputs: ModelInputs, bottom: Sequence[int] = (64,), top: Sequence[int] = (64,)
    ) -> None:
        super().__init__()
        dim = equal_width(inputs, "dlrm", "its dot interaction multiplies every two")
        features = inputs.dense_features
        self.bottom = layers([features, *bottom, dim], last_relu=True) if features else None
        count = len(field_dims(inputs)) + (1 if features else 0)
        rows, cols = torch.tril_indices(count, count, offset=-1)
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("cols", cols, persistent=False)
        width = (dim if features else 0) + len(rows)
        self.top = layers([width, *top, len(inputs.labels)], last_relu=False)

    def forward(self, embeddings: dict[str, Feature], dense: torch.Tensor) -> torch.Tensor:
        interacting = fields(embeddings)
        parts = []
        if self.bottom is not None:
            bottom = self.bottom(dense)
            interacting.insert(0, bottom)
            parts.append(bottom)
        stacked = torch.stack(interacting, dim=1)  # [batch, fields, dim]
        dots = torch.bmm(stacked, stacked.transpose(1, 2))
        parts.append(dots[:, self.rows, self.cols])  # each pair once
        return self.top(torch.cat(parts, dim=1))  # type: ignore[no-any-return]


class DLRM(ZooModel):
    """``dlrm``: params ``bottom`` and ``top`` (hidden widths, default ``[64]`` each)."""

    network = DlrmNet
