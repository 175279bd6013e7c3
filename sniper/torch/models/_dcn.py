"""``dcn_v2``: DCN-v2 (Wang et al. 2021): a cross network, ``x_{l+1} = x_0 * (W_l x_l + b_l) +
x_l``, then an MLP (the "stacked" form), over ``[embeddings ‖ dense]``.

``rank`` > 0 factors each ``W_l`` as ``U_l V_l`` of that rank (the paper's low-rank DCN-Mix
without experts), for inputs too wide for a full ``width x width`` matrix per layer.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from sniper.models import ModelInputs
from sniper.torch._linear import Linear
from sniper.torch._model import Feature
from sniper.torch.models._fields import fields, input_width
from sniper.torch.models._zoo import ZooModel, layers

__all__ = ["DCNv2", "DcnV2Net"]


class DcnV2Net(nn.Module):
    """``cross_layers``: how many cross layers; ``rank``: 0 for full-rank, else their rank;
    ``hidden``: widths of the MLP after them."""

    def __init__(
        self,
        inputs: ModelInputs,
        cross_layers: int = 2,
        hidden: Sequence[int] = (64, 32),
        rank: int = 0,
    ) -> None:
        super().__init__()
        if cross_layers < 0 or rank < 0:
            raise ValueError(
                f"cross_layers and rank must be at least 0, got {cross_layers}, {rank}"
            )
        width = input_width(inputs)
        self.cross = nn.ModuleList(
            Linear(width, width)
            if not rank
            else nn.Sequential(Linear(width, rank, bias=False), Linear(rank, width))
            for _ in range(cross_layers)
        )
        self.deep = layers([width, *hidden], last_relu=True)
        self.out = Linear(hidden[-1] if hidden else width, len(inputs.labels))

    def forward(self, embeddings: dict[str, Feature], dense: torch.Tensor) -> torch.Tensor:
        x0 = torch.cat([*fields(embeddings), dense], dim=1)
        x = x0
        for layer in self.cross:
            x = x0 * layer(x) + x
        return self.out(self.deep(x))  # type: ignore[no-any-return]


class DCNv2(ZooModel):
    """``dcn_v2``: params ``cross_layers`` (default 2), ``rank`` (default 0: full) and
    ``hidden`` (default ``[64, 32]``)."""

    network = DcnV2Net
