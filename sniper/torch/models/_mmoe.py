"""``mmoe``: Multi-gate Mixture-of-Experts (Ma et al. 2018), the multi-task model: shared
expert MLPs, and for each label a softmax gate over the experts and a tower giving its logit.

One task per label of the data (``ModelInputs.labels``), so it trains on one label as well as
on several; the trainer and the data carry one label today, so a job trains it with one.
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

__all__ = ["MMoE", "MmoeNet"]


class MmoeNet(nn.Module):
    """``experts``: how many experts; ``expert_hidden``: each expert's widths;
    ``tower_hidden``: each task tower's hidden widths."""

    def __init__(
        self,
        inputs: ModelInputs,
        experts: int = 4,
        expert_hidden: Sequence[int] = (64,),
        tower_hidden: Sequence[int] = (16,),
    ) -> None:
        super().__init__()
        if experts < 1 or not expert_hidden:
            raise ValueError(f"mmoe needs at least one expert of one layer, got {experts}")
        width = input_width(inputs)
        self.experts = nn.ModuleList(
            layers([width, *expert_hidden], last_relu=True) for _ in range(experts)
        )
        self.gates = nn.ModuleList(Linear(width, experts) for _ in inputs.labels)
        self.towers = nn.ModuleList(
            layers([expert_hidden[-1], *tower_hidden, 1], last_relu=False) for _ in inputs.labels
        )

    def forward(self, embeddings: dict[str, Feature], dense: torch.Tensor) -> torch.Tensor:
        x = torch.cat([*fields(embeddings), dense], dim=1)
        experts = torch.stack([expert(x) for expert in self.experts], dim=1)  # [batch, k, h]
        logits = []
        for gate, tower in zip(self.gates, self.towers, strict=True):
            weights = torch.softmax(gate(x), dim=1).unsqueeze(-1)  # [batch, k, 1]
            logits.append(tower((weights * experts).sum(1)))
        return torch.cat(logits, dim=1)


class MMoE(ZooModel):
    """``mmoe``: params ``experts`` (default 4), ``expert_hidden`` (default ``[64]``) and
    ``tower_hidden`` (default ``[16]``)."""

    network = MmoeNet
