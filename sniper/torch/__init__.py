"""PyTorch dense models for sniper (the optional extra: ``pip install 'sniper[torch]'``).

- :class:`TorchModel`: any ``torch.nn.Module`` whose ``forward(embeddings, dense)`` returns
  ``[batch, len(labels)]`` logits, as the trainer's :class:`~sniper.models.DenseModel`: the
  pooled embeddings arrive as leaf tensors (zero-copy views of the trainer's input matrix),
  their gradients go back to the ps, and a ``torch.optim`` optimizer updates the module.
- :class:`TrainCtx`: the loop-owning form, for a training loop of the user's own (PERSIA's
  shape): ``next_batch()`` hands back the embeddings as leaf tensors that require grad,
  ``backward(loss)`` pushes their ``.grad`` to the ps.
- :func:`open_optimizer`: a ``torch.optim`` optimizer by name, as ``[model] optimizer``
  names it.
- :class:`Linear`: ``torch.nn.Linear`` with its CPU float32 products on numpy's BLAS, which
  the zoo's layers use (on the AMD EPYC sniper is measured on, torch's MKL took twice as
  long for an MLP's input gradient); a drop-in for a module of the user's own.
- :mod:`sniper.torch.models`: the model zoo (an MLP equal to the numpy one, DLRM, DeepFM,
  DCN-v2, Wide & Deep, MMoE), registered by name in the ``sniper.models`` entry points.

A factory named in a training config (``[model] factory = "mypkg.models:build"``) may return
a plain module: :func:`sniper.models.open_model` wraps it here with ``[model]``'s optimizer,
lr and device. Nothing in ``sniper`` imports this package unless such a model is opened, so
the numpy default needs no torch.
"""

try:
    import torch as _torch
except ImportError as exc:  # pragma: no cover (the extra is installed wherever tests run)
    raise ImportError(
        f"sniper.torch needs PyTorch ({exc}); install it with: pip install 'sniper[torch]'"
    ) from exc

from sniper.torch._ctx import Embeddings as Embeddings
from sniper.torch._ctx import TrainBatch as TrainBatch
from sniper.torch._ctx import TrainCtx as TrainCtx
from sniper.torch._linear import Linear as Linear
from sniper.torch._model import Feature as Feature
from sniper.torch._model import TorchModel as TorchModel
from sniper.torch._model import open_optimizer as open_optimizer
from sniper.torch._model import resolve_device as resolve_device

del _torch

__all__ = [
    "Embeddings",
    "Feature",
    "Linear",
    "TorchModel",
    "TrainBatch",
    "TrainCtx",
    "open_optimizer",
    "resolve_device",
]
