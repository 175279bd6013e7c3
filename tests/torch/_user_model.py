"""A user's own dense model, as the README's "Your model" writes one: a plain ``nn.Module``
and the factory a config names (``factory = "tests.torch._user_model:build"``), and the same
network registered by an entry point (:class:`UserModel`)."""

from __future__ import annotations

import torch
from torch import nn

from sniper.models import ModelInputs
from sniper.torch.models import ZooModel


class TwoTower(nn.Module):
    """An MLP over the embeddings beside a linear layer over the dense features."""

    def __init__(self, inputs: ModelInputs, hidden: int = 32) -> None:
        super().__init__()
        self.embedded = nn.Sequential(nn.Linear(inputs.embedding_width, hidden), nn.ReLU())
        self.out = nn.Linear(hidden + inputs.dense_features, len(inputs.labels))

    def forward(self, embeddings: dict[str, torch.Tensor], dense: torch.Tensor) -> torch.Tensor:
        h = self.embedded(torch.cat(list(embeddings.values()), dim=1))
        return self.out(torch.cat([h, dense], dim=1))  # type: ignore[no-any-return]


def build(inputs: ModelInputs, hidden: int = 32) -> nn.Module:
    """The factory: sniper wraps the module with ``[model]``'s optimizer, lr and device."""
    return TwoTower(inputs, hidden)


def wrong_labels(inputs: ModelInputs) -> nn.Module:
    """A module that returns two logits for data of one label."""
    return TwoTower(ModelInputs(inputs.dims, inputs.dense_features, labels=("a", "b")))


class UserModel(ZooModel):
    """The same network, for an entry point (which must name a DenseModel class)."""

    network = TwoTower


class FailsLater(TwoTower):
    """TwoTower whose forward pass has a bug that shows on its fifth call."""

    calls = 0

    def forward(self, embeddings: dict[str, torch.Tensor], dense: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 5:
            raise RuntimeError("my forward has a bug")
        return super().forward(embeddings, dense)


def fails_later(inputs: ModelInputs) -> nn.Module:
    return FailsLater(inputs, 8)
