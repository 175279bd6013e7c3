"""``deepfm``: DeepFM (Guo et al. 2017): a linear term, a factorization machine's pairwise
interactions and an MLP, over the same inputs, summed.

The FM term takes every variable's pooled embedding as a field's latent vector, and the dense
features projected to the same width as one more field; like DLRM's, it needs one embedding
width for every variable.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from sniper.models import ModelInputs
from sniper.torch._linear import Linear
from sniper.torch._model import Feature
from sniper.torch.models._fields import fields, input_width
from sniper.torch.models._zoo import ZooModel, equal_width, layers

__all__ = ["DeepFM", "DeepFmNet"]


class DeepFmNet(nn.Module):
    """``hidden``: widths of the deep part's hidden layers."""

    def __init__(self, inputs: ModelInputs, hidden: Sequence[int] = (64, 32)) -> None:
        super().__init__()
        dim = equal_width(inputs, "deepfm", "its factorization machine multiplies every two")
        labels, width = len(inputs.labels), input_width(inputs)
        features = inputs.dense_features
        self.dense_field = Linear(features, dim) if features else None
        self.linear = Linear(width, labels)
        self.deep = layers([width, *hidden, labels], last_relu=False)

    def forward(self, embeddings: dict[str, Feature], dense: torch.Tensor) -> torch.Tensor:
        variables = fields(embeddings)
        latent = list(variables)
        if self.dense_field is not None:
            latent.append(self.dense_field(dense))
        stacked = torch.stack(latent, dim=1)  # [batch, fields, dim]
        # Σ_{i<j} <v_i, v_j> = ((Σ v)^2 - Σ v^2) / 2, summed over the dim.
        pairs = 0.5 * (stacked.sum(1).square() - stacked.square().sum(1)).sum(1, keepdim=True)
        x = torch.cat([*variables, dense], dim=1)
        return self.linear(x) + pairs + self.deep(x)  # type: ignore[no-any-return]


class DeepFM(ZooModel):
    """``deepfm``: params ``hidden`` (the deep part's widths, default ``[64, 32]``)."""

    network = DeepFmNet
