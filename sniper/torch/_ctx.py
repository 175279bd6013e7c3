"""The loop-owning form: :class:`TrainCtx`, for users who write their own training loop.

PERSIA's ``TrainCtx`` shape (``persia/ctx.py``): the user's loop asks the context for a batch,
runs its own ``nn.Module`` and loss on it, and hands the loss back; the context owns what is
sniper's, the embeddings::

    async with TrainCtx(cluster, hubs, variables) as ctx:
        async for batch in ctx:
            logits = module(batch.embeddings, batch.dense)
            loss = functional.binary_cross_entropy_with_logits(logits, batch.labels)
            optimizer.zero_grad()
            await ctx.backward(loss)   # loss.backward(), then each embedding's .grad to the ps
            optimizer.step()           # the user's optimizer: the dense parameters

:meth:`TrainCtx.next_batch` reads the hubs' next batch (ReadSample, then AckSample), looks its
embeddings up on the ps and hands back each variable's pooled embedding as a leaf tensor that
requires grad, with the dense features and labels. :meth:`TrainCtx.backward` runs
``loss.backward()`` and pushes every leaf's ``.grad`` (PushGrad), which also frees the batch
on the ps; so each batch handed out must be backwarded before the next is asked for.

A sequence variable (pooling ``none`` on the ps) comes in the same dict as the
:class:`~sniper.torch.TorchModel`'s modules get it, a jagged pair ``(values, offsets)``:
``values`` ``[n, dim]`` is the leaf that requires grad, every value's embedding of the batch,
and ``offsets`` ``[batch + 1]`` int64 says whose they are; :meth:`TrainCtx.backward` pushes
its ``[n, dim]`` gradient, one row per value. So a zoo network or any module written for the
trainer runs unchanged in the user's loop.

What the user gives up against :class:`sniper.torch.TorchModel` under the trainer: prefetch
(one batch at a time: each lookup sees every earlier push, the trainer's ``prefetch = 1``,
``max_staleness = 0``), checkpoints, held-out AUC, auto_shard and supervision. With those
settings the trainer trains the same batches to the same losses.

The context speaks to the ps through anything with ``embedding_lookup`` and ``push_grad``
(:class:`Embeddings`): a ``sniper.roles.PsCluster`` (several ps, each variable on its own),
or one ``sniper.rpc.PsClient``; and to the hubs through ``sniper.rpc.HubApi`` (a
``HubClient``, or a ``sniper.testing.local_cluster``'s ``hub_clients``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

import numpy as np
import torch
from numpy.typing import NDArray

from sniper.rpc import HubApi, Pooled, Sample
from sniper.torch._model import Feature, resolve_device

__all__ = ["Embeddings", "TrainBatch", "TrainCtx"]


class Embeddings(Protocol):
    """The ps as :class:`TrainCtx` uses them (``sniper.roles.PsCluster`` or a ``PsClient``)."""

    async def embedding_lookup(
        self, batch_id: int, names: Sequence[str], *, release: bool = False
    ) -> Mapping[str, Pooled]:
        """Each variable's pooled embeddings of a fed batch."""
        ...

    async def push_grad(self, batch_id: int, grads: Mapping[str, NDArray[np.float32]]) -> int:
        """Apply a batch's gradients and free it on the ps."""
        ...


@dataclass(frozen=True)
class TrainBatch:
    """One batch as :meth:`TrainCtx.next_batch` hands it to the user's loop."""

    batch_id: int
    embeddings: dict[str, Feature]
    """Each variable's pooled embedding, ``[batch, dim]`` float32, by name in the order the
    context was given: leaf tensors that require grad (the ``forward(embeddings, dense)`` of
    the README's model contract takes this dict as it is). A sequence variable's is the pair
    ``(values [n, dim] leaf that requires grad, offsets int64 [batch + 1])``."""
    dense: torch.Tensor
    """``[batch, dense_features]`` float32."""
    labels: torch.Tensor
    """``[batch, labels]`` float32, 0 or 1 (``[batch, 1]`` for one label): the shape of the
    model's logits."""


class TrainCtx:
    """A user's own training loop over sniper's hubs and ps (see the module doc).

    ``variables`` are those the model takes, in its input order; ``hubs`` are read in turn,
    one batch each, until every hub's data has ended. ``device``: where the tensors are put
    (``"cpu"``, ``"cuda"``, ``"auto"``).
    """

    def __init__(
        self,
        cluster: Embeddings,
        hubs: Sequence[HubApi],
        variables: Sequence[str],
        *,
        device: str = "cpu",
    ) -> None:
        if not hubs:
            raise ValueError("TrainCtx needs at least one hub to read")
        self.cluster = cluster
        self.hubs = list(hubs)
        self.variables = list(variables)
        self.device = resolve_device(device)
        self.steps = 0
        """Batches backwarded (pushed) so far."""
        self._next_hub = 0
        self._ended: set[int] = set()
        self._pending: TrainBatch | None = None

    async def __aenter__(self) -> TrainCtx:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # A batch handed out and never pushed stays pinned on the ps until its batch_ttl.
        self._pending = None

    def __aiter__(self) -> AsyncIterator[TrainBatch]:
        return self._batches()

    async def _batches(self) -> AsyncIterator[TrainBatch]:
        while (batch := await self.next_batch()) is not None:
            yield batch

    async def next_batch(self) -> TrainBatch | None:
        """The hubs' next batch with its embeddings looked up; None once every hub's data has
        ended. ``RuntimeError`` while the batch handed out before has not been backwarded."""
        if self._pending is not None:
            raise RuntimeError(
                f"batch {self._pending.batch_id} was handed out and not backwarded: call "
                "backward(loss) once for each batch before asking for the next"
            )
        sample = await self._read()
        if sample is None:
            return None
        pooled = await self.cluster.embedding_lookup(sample.batch_id, self.variables)
        embeddings = {name: self._feature(pooled[name]) for name in self.variables}
        labels = self._tensor(sample.labels).reshape(len(sample.labels), -1)
        self._pending = TrainBatch(sample.batch_id, embeddings, self._tensor(sample.dense), labels)
        return self._pending

    async def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()`` for the batch handed out last, then its embeddings' gradients
        to the ps (PushGrad). The dense parameters' gradients are left for the user's
        optimizer. ``ValueError`` for a variable the loss does not depend on (the ps would
        otherwise wait for its gradient)."""
        batch = self._pending
        if batch is None:
            raise RuntimeError("backward(loss) with no batch handed out: call next_batch() first")
        loss.backward()  # type: ignore[no-untyped-call]
        grads = {}
        for name, feature in batch.embeddings.items():
            leaf = feature[0] if isinstance(feature, tuple) else feature
            if leaf.grad is None and leaf.shape[0] == 0:  # a sequence without a value
                leaf.grad = torch.zeros_like(leaf)
            if leaf.grad is None:
                raise ValueError(
                    f"the loss does not depend on the embeddings of {name!r}: give every "
                    "variable the context looks up to the model, or leave it out of variables"
                )
            grads[name] = np.ascontiguousarray(leaf.grad.detach().cpu().numpy(), np.float32)
        await self.cluster.push_grad(batch.batch_id, grads)
        self._pending = None
        self.steps += 1

    async def _read(self) -> Sample | None:
        """The next hub's next batch, acknowledged; None once every hub has ended."""
        while len(self._ended) < len(self.hubs):
            index = self._next_hub
            self._next_hub = (index + 1) % len(self.hubs)
            if index in self._ended:
                continue
            sample = await self.hubs[index].read_sample()
            if sample is None:
                self._ended.add(index)
                continue
            await self.hubs[index].acknowledge([sample.batch_id])
            return sample
        return None

    def _feature(self, answer: Pooled) -> Feature:
        """A variable's lookup as the model takes it: the leaf that requires grad, with its
        offsets for a sequence variable."""
        leaf = self._tensor(answer.pooled).requires_grad_(True)
        if answer.offsets is None:
            return leaf
        offsets = torch.tensor(np.asarray(answer.offsets, dtype=np.int64), device=self.device)
        return leaf, offsets

    def _tensor(self, array: NDArray[np.float32]) -> torch.Tensor:
        """``array`` as a float32 tensor on the device (a copy: the arrays the clients hand
        back may be read-only views of a message)."""
        return torch.tensor(np.asarray(array, dtype=np.float32), device=self.device)
