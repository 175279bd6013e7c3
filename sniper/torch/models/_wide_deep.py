"""``wide_deep``: Wide & Deep (Cheng et al. 2016): a linear model and an MLP over the same
``[embeddings ‖ dense]``, their logits summed. (The paper's wide part also takes crossed
features; here crosses are whatever the data's variables are, hashed by the feature spec.)"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from sniper.models import ModelInputs
from sniper.torch._linear import Linear
from sniper.torch._model import Feature
from sniper.torch.models._fields import fields, input_width
from sniper.torch.models._zoo import ZooModel, layers

__all__ = ["WideDeep", "WideDeepNet"]


class WideDeepNet(nn.Module):
    """``hidden``: widths of the deep part's hidden layers."""

    def __init__(self, inputs: ModelInputs, hidden: Sequence[int] = (64, 32)) -> None:
        super().__init__()
        labels, width = len(inputs.labels), input_width(inputs)
        self.wide = Linear(width, labels)
        self.deep = layers([width, *hidden, labels], last_relu=False)

    def forward(self, embeddings: dict[str, Feature], dense: torch.Tensor) -> torch.Tensor:
        x = torch.cat([*fields(embeddings), dense], dim=1)
        return self.wide(x) + self.deep(x)  # type: ignore[no-any-return]


class WideDeep(ZooModel):
    """``wide_deep``: params ``hidden`` (the deep part's widths, default ``[64, 32]``)."""

    network = WideDeepNet
