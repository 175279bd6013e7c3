"""What every model of the zoo shares: a :class:`ZooModel` is a :class:`~sniper.torch.TorchModel`
whose module is built from the ``[model] params``, and the layers they are made of.

A zoo model is registered by name in the ``sniper.models`` entry points (sniper's own
``pyproject.toml``), and the registry wants a :class:`~sniper.models.DenseModel` class there, so
each zoo entry is a small subclass naming its network (``network``): ``DLRM`` is
``ZooModel`` over ``DlrmNet``. The network classes are plain modules, usable on their own.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import nn

from sniper.models import ModelInputs
from sniper.torch._linear import Linear
from sniper.torch._model import TorchModel, open_optimizer, resolve_device
from sniper.torch.models._fields import field_dims

__all__ = ["ZooModel", "equal_width", "layers"]


def layers(sizes: Sequence[int], *, last_relu: bool) -> nn.Sequential:
    """``Linear`` layers through ``sizes`` with a ReLU between each two (and after the last
    with ``last_relu``)."""
    if any(size < 1 for size in sizes):
        raise ValueError(f"layer sizes must be positive, got {list(sizes)}")
    modules: list[nn.Module] = []
    pairs = list(itertools.pairwise(sizes))
    for index, (a, b) in enumerate(pairs):
        modules.append(Linear(a, b))
        if last_relu or index < len(pairs) - 1:
            modules.append(nn.ReLU())
    return nn.Sequential(*modules)


def equal_width(inputs: ModelInputs, model: str, why: str) -> int:
    """The one embedding width every variable (sequences included) has, or ``ValueError``
    naming the odd ones."""
    dims = field_dims(inputs)
    widths = sorted(set(dims.values()))
    if len(widths) != 1:
        common = max(widths, key=list(dims.values()).count)
        odd = {name: dim for name, dim in dims.items() if dim != common}
        raise ValueError(
            f"{model} needs every variable of one embedding width ({why}); most are {common} "
            f"but {', '.join(f'{n}: {d}' for n, d in list(odd.items())[:5])}: set one dim in "
            "[variables]"
        )
    return widths[0]


class ZooModel(TorchModel):
    """A zoo network trained as a :class:`~sniper.torch.TorchModel`.

    ``params`` go to the network; ``optimizer`` (default Adam), ``lr`` (default
    :attr:`default_lr`), ``device`` (default the CPU), ``seed`` (seeds the initial weights)
    and ``threads`` are the ``[model]`` table's and the trainer's settings.
    """

    network: ClassVar[type[nn.Module]]
    """The module this model trains, built as ``network(inputs, **params)``."""
    default_lr: ClassVar[float] = 0.001
    """The learning rate when the config gives none."""

    def __init__(
        self,
        inputs: ModelInputs,
        *,
        optimizer: str | None = None,
        lr: float | None = None,
        device: str | None = None,
        seed: int = 0,
        threads: int = 0,
        **params: Any,
    ) -> None:
        torch.manual_seed(seed)
        place = resolve_device(device)
        module = self.build_network(inputs, seed, params).to(place)
        chosen = open_optimizer(optimizer, module.parameters(), lr or self.default_lr)
        super().__init__(module, chosen, inputs, place, threads)

    @classmethod
    def build_network(cls, inputs: ModelInputs, seed: int, params: dict[str, Any]) -> nn.Module:
        """The module for ``inputs``; torch's generator is seeded with ``seed`` already."""
        del seed
        return cls.network(inputs, **params)
