"""``PsEngine``: what a ps does between receiving bytes and sending them back.

The engine owns a ps process's embedding tables and the batches fed to it, and turns every
request into scheduler tasks: one per (variable, shard), so a huge variable's lookup spreads
over all workers while a small one stays a single task. The gRPC service (``sniper serve
--role ps``) decodes messages and calls the engine; benchmarks and the demo call it directly,
so what they measure is exactly what the server runs.

Batch lifecycle, as in the seed system: ``feed`` (FeedSample) splits a variable's signs by
shard once and keeps them under the batch id; ``lookup`` (EmbeddingLookup) pools them;
``push_grad`` (PushGrad) applies gradients and frees the batch. A batch that is never pushed
is dropped after ``batch_ttl`` seconds, so an abandoned trainer cannot leak memory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sniper.scheduler import Scheduler, TaskHandle, TaskKey
from sniper.store import EmbeddingTable, ShardedBatch

__all__ = ["LookupResult", "PsEngine", "UnknownBatchError", "UnknownVariableError"]


class UnknownVariableError(KeyError):
    """A request named a variable this ps does not hold (create it first, or ask its owner)."""

    def __str__(self) -> str:
        return str(self.args[0])


class UnknownBatchError(KeyError):
    """A request named a batch id this ps was never fed, or has already freed."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class LookupResult:
    """One variable's pooled embeddings and the server time its shard tasks took."""

    pooled: NDArray[np.float32]
    """``[batch, dim]`` sum of each example's rows."""
    kernel_seconds: float
    """Time from the first shard task's submit to the last one's completion."""


class PsEngine:
    """Embedding tables of one ps, with per-batch state, run on a :class:`Scheduler`."""

    def __init__(self, scheduler: Scheduler, *, batch_ttl: float = 300.0) -> None:
        if batch_ttl <= 0:
            raise ValueError(f"batch_ttl must be positive seconds, got {batch_ttl}")
        self.scheduler = scheduler
        self.batch_ttl = batch_ttl
        self._tables: dict[str, EmbeddingTable] = {}
        self._batches: dict[tuple[int, str], tuple[ShardedBatch, float]] = {}
        self._lock = threading.Lock()

    # -- variables -------------------------------------------------------------------------------

    def create_variable(self, name: str, table: EmbeddingTable) -> None:
        """Hold ``table`` as variable ``name``; creating an existing name is an error."""
        if not name:
            raise ValueError("variable name must not be empty")
        with self._lock:
            if name in self._tables:
                raise ValueError(f"variable {name!r} already exists on this ps")
            self._tables[name] = table

    def table(self, name: str) -> EmbeddingTable:
        """The table of variable ``name``."""
        try:
            return self._tables[name]
        except KeyError:
            raise UnknownVariableError(f"unknown variable {name!r}") from None

    @property
    def variables(self) -> tuple[str, ...]:
        """Names of the variables held, in creation order."""
        return tuple(self._tables)

    # -- batches ---------------------------------------------------------------------------------

    def feed(self, batch_id: int, name: str, signs: ArrayLike, offsets: ArrayLike) -> None:
        """Keep a variable's signs of one batch, split by shard, until it is pushed."""
        batch = self.table(name).split(signs, offsets)
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            self._batches[(batch_id, name)] = (batch, now)

    def pending_batches(self) -> int:
        """(batch, variable) pairs fed and not yet pushed or expired."""
        with self._lock:
            self._expire(time.monotonic())
            return len(self._batches)

    def _expire(self, now: float) -> None:
        stale = [key for key, (_, fed) in self._batches.items() if now - fed > self.batch_ttl]
        for key in stale:
            del self._batches[key]

    def _batch(self, batch_id: int, name: str) -> ShardedBatch:
        self.table(name)
        with self._lock:
            entry = self._batches.get((batch_id, name))
        if entry is None:
            raise UnknownBatchError(
                f"batch {batch_id} of variable {name!r} was not fed "
                "to this ps (or was already pushed or expired)"
            )
        return entry[0]

    # -- lookup and push -------------------------------------------------------------------------

    def _submit_lookups(
        self, batch_id: int, names: Iterable[str]
    ) -> list[tuple[str, float, list[TaskHandle[NDArray[np.float32]]]]]:
        pending = []
        for name in names:
            table, batch = self.table(name), self._batch(batch_id, name)
            started = time.perf_counter()
            handles = [
                self.scheduler.submit(TaskKey(name, shard), table.lookup_shard, batch, shard)
                for shard in range(batch.num_shards)
            ]
            pending.append((name, started, handles))
        return pending

    def lookup(self, batch_id: int, names: Iterable[str]) -> dict[str, LookupResult]:
        """Pooled embeddings of ``names`` for a fed batch, blocking the calling thread."""
        results = {}
        for name, started, handles in self._submit_lookups(batch_id, names):
            parts = [handle.result() for handle in handles]
            results[name] = LookupResult(_sum(parts), time.perf_counter() - started)
        return results

    async def lookup_async(self, batch_id: int, names: Iterable[str]) -> dict[str, LookupResult]:
        """Pooled embeddings of ``names``, awaited without blocking the event loop."""
        results = {}
        for name, started, handles in self._submit_lookups(batch_id, names):
            parts = [await handle.wait() for handle in handles]
            results[name] = LookupResult(_sum(parts), time.perf_counter() - started)
        return results

    def _submit_pushes(
        self, batch_id: int, grads: Mapping[str, ArrayLike]
    ) -> list[TaskHandle[None]]:
        handles = []
        for name, grad in grads.items():
            table, batch = self.table(name), self._batch(batch_id, name)
            checked = _check_grad(grad, batch, table, name)
            handles += [
                self.scheduler.submit(
                    TaskKey(name, shard), table.push_grad_shard, batch, shard, checked
                )
                for shard in range(batch.num_shards)
            ]
        return handles

    def _free(self, batch_id: int, names: Iterable[str]) -> None:
        with self._lock:
            for name in names:
                self._batches.pop((batch_id, name), None)

    def push_grad(self, batch_id: int, grads: Mapping[str, ArrayLike]) -> None:
        """Apply gradients ``{variable: [batch, dim]}`` and free those variables' batch."""
        for handle in self._submit_pushes(batch_id, grads):
            handle.result()
        self._free(batch_id, grads)

    async def push_grad_async(self, batch_id: int, grads: Mapping[str, ArrayLike]) -> None:
        """:meth:`push_grad`, awaited without blocking the event loop."""
        for handle in self._submit_pushes(batch_id, grads):
            await handle.wait()
        self._free(batch_id, grads)


def _sum(parts: list[NDArray[np.float32]]) -> NDArray[np.float32]:
    out = parts[0]
    for part in parts[1:]:
        out += part
    return out


def _check_grad(
    grad: ArrayLike, batch: ShardedBatch, table: EmbeddingTable, name: str
) -> NDArray[np.float32]:
    """Validate a gradient before any shard task runs, so a bad one changes no shard."""
    array = np.asarray(grad)
    expected = (batch.batch_size, table.dim)
    if array.dtype != np.float32 or array.shape != expected:
        raise ValueError(
            f"gradient of {name!r} must be float32 of shape {expected}, "
            f"got {array.dtype} of shape {array.shape}"
        )
    return np.ascontiguousarray(array)
