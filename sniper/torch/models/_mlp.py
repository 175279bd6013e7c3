"""``torch_mlp``: the numpy MLP (``"mlp"``, :class:`sniper.models.Mlp`) in torch.

The same layers (``[embeddings ‖ dense] -> [Linear -> ReLU] * len(hidden) -> Linear``), the
same initial weights for the same seed (He-normal from numpy's generator, zero biases), the same
loss and the same Adam at the same default learning rate: the two take the same steps to float
rounding, so this is the model to measure the torch path's cost against the numpy one. Unlike
the numpy MLP it also takes sequence variables, as each sequence's mean (the zoo's fields).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from sniper.models import ModelInputs
from sniper.torch._model import Feature
from sniper.torch.models._fields import input_parts, input_width
from sniper.torch.models._zoo import ZooModel, layers

__all__ = ["MlpNet", "TorchMlp"]


class MlpNet(nn.Module):
    """``[embeddings ‖ dense] -> [Linear -> ReLU] * len(hidden) -> Linear -> one logit per
    label``, initialized as :class:`sniper.models.Mlp` is for ``seed``.

    It takes the input matrix whole (``takes_matrix``): the matrix is ``[embeddings ‖ dense]``
    already, so the numpy MLP's first product runs on it as it is, with no concatenation and
    one leaf for autograd (sequence variables' means go between the embeddings and the dense
    features, where the fields' order puts them)."""

    takes_matrix = True

    def __init__(self, inputs: ModelInputs, hidden: Sequence[int] = (64,), seed: int = 0) -> None:
        super().__init__()
        self.embedding_width = inputs.embedding_width
        sizes = [input_width(inputs), *hidden, len(inputs.labels)]
        self.layers = layers(sizes, last_relu=False)
        rng = np.random.default_rng(seed)
        linears = [m for m in self.layers if isinstance(m, nn.Linear)]
        with torch.no_grad():
            for linear, (a, b) in zip(linears, itertools.pairwise(sizes), strict=True):
                weights = rng.normal(0, np.sqrt(2.0 / a), (a, b)).astype(np.float32)
                linear.weight.copy_(torch.from_numpy(weights.T.copy()))
                linear.bias.zero_()

    def forward(
        self,
        inputs: torch.Tensor | Mapping[str, Feature],
        other: torch.Tensor | Mapping[str, Feature] | None = None,
    ) -> torch.Tensor:
        """``(matrix[, sequences])`` as :class:`~sniper.torch.TorchModel` calls it, or the
        zoo's ``(embeddings, dense)`` as a loop of the user's own (``TrainCtx``) does."""
        if isinstance(inputs, torch.Tensor) and not other:
            return self.layers(inputs)  # type: ignore[no-any-return]  # the matrix as it is
        parts = input_parts(self.embedding_width, inputs, other)
        return self.layers(torch.cat([parts.pooled, *parts.sequences, parts.dense], dim=1))  # type: ignore[no-any-return]


class TorchMlp(ZooModel):
    """``torch_mlp``: params ``hidden`` (layer widths, default ``[64]``)."""

    network = MlpNet
    default_lr = 0.002  # the numpy MLP's

    @classmethod
    def build_network(cls, inputs: ModelInputs, seed: int, params: dict[str, Any]) -> nn.Module:
        return MlpNet(inputs, **params, seed=seed)
