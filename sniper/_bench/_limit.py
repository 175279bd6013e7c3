"""The kernel-bound limit of a training job: what its store kernels and its dense model take for
the job's batches with nothing around them.

``sniper bench e2e`` prints it beside each run's time per batch; their ratio is the job's
efficiency, and says how much of the time per batch goes to the work itself and how much to
what surrounds it (requests, codecs, scheduling, the hub, waits). Measured after the job, in
the bench's process, from the job's own config and data:

- the store: every variable's table as the job builds it (the planned ``[variables]``: width,
  rows, shards, optimizer, initializer, pooling; the ps's lock and pooling mode), fresh, fed
  the run's batches in order. Each batch is split by shard and mapped and pinned (FeedSample's
  work, where ``map_rows = "feed"``), pooled (EmbeddingLookup) and, unless held out, updated
  with the model's gradients (PushGrad). Each step is one grouped kernel call
  (``sniper.store``'s :func:`~sniper.store.pin_shards`, :func:`~sniper.store.pool_shards`,
  :func:`~sniper.store.push_shards`, as a ps makes them) per thread, on as many threads as the
  job's ps run between them, the shards spread over the threads by their signs; a batch under
  ``ShardedRunner.INLINE_SIGNS`` signs runs in one call on the caller's thread, as ``sniper
  bench store`` runs it;
- the dense model: the job's own (``[model]``, built as the job builds it) on the pooled
  matrix and dense features, ``train_step`` and ``update`` for a trained batch, ``predict``
  for a held-out one (every ``eval_every``-th, as the trainer holds them out).

The limit is the sum of those times over the run, per trained batch (the unit of the job's
clock, which counts the held-out batches' time too). It overlaps nothing: the job may overlap
the dense step with the store's kernels, so an efficiency above 1 is possible where a core
would otherwise idle. Before the clock, two batches run on tables and a model of their own,
thrown away: the kernels' first calls load them from numba's cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TypeVar, cast

import numpy as np
from numpy.typing import NDArray

from sniper._bench._store import ShardedRunner
from sniper.cluster import TableSpec, TrainConfig, TrainPlan, load_train_config, plan_training
from sniper.data import Batch, SyntheticCtr, Workload
from sniper.models import DenseModel
from sniper.store import (
    Admission,
    BagPooling,
    EmbeddingTable,
    Initializer,
    ShardedBatch,
    pin_shards,
    pool_shards,
    push_shards,
)

__all__ = ["KernelLimit", "measure_limit"]

_T = TypeVar("_T")
_R = TypeVar("_R")
_Part = tuple[EmbeddingTable, ShardedBatch, int]
WARM_UP_BATCHES = 2
"""Batches run unmeasured first, on tables and a model of their own."""


@dataclass(frozen=True)
class KernelLimit:
    """The work of a run's batches with nothing around it, in seconds over the whole run."""

    feed_seconds: float
    """Splitting every batch by shard, and mapping and pinning its rows (FeedSample's work)."""
    lookup_seconds: float
    """Pooling every batch's rows (EmbeddingLookup's work)."""
    push_seconds: float
    """The sparse optimizer's update of every trained batch (PushGrad's work)."""
    dense_seconds: float
    """The dense model: ``train_step`` + ``update`` of the trained batches, ``predict`` of the
    held-out ones."""
    trained: int
    """Batches trained; the others were held out."""
    threads: int
    """Threads the store's kernels ran on: those of the job's ps together."""

    @property
    def store_seconds(self) -> float:
        return self.feed_seconds + self.lookup_seconds + self.push_seconds

    @property
    def seconds_per_batch(self) -> float:
        """The limit: the store's and the dense model's seconds per trained batch."""
        return (self.store_seconds + self.dense_seconds) / self.trained

    def efficiency(self, actual_seconds_per_batch: float) -> float:
        """The limit over a run's actual seconds per trained batch (1.0: nothing around)."""
        return self.seconds_per_batch / actual_seconds_per_batch

    def describe(self) -> str:
        """One line: the limit and its parts, in ms per trained batch."""

        def ms(seconds: float) -> str:
            return f"{seconds / self.trained * 1e3:.2f}"

        return (
            f"{ms(self.store_seconds + self.dense_seconds)} ms per trained batch = store "
            f"{ms(self.store_seconds)} (feed {ms(self.feed_seconds)}, lookup "
            f"{ms(self.lookup_seconds)}, push {ms(self.push_seconds)}) on {self.threads} "
            f"threads + dense model {ms(self.dense_seconds)}"
        )


def measure_limit(config_path: Path, workload: Workload, data: SyntheticCtr) -> KernelLimit:
    """The kernel-bound limit of the job ``config_path`` describes (``sniper train``'s config,
    as ``sniper bench e2e`` writes it), on ``data``'s batches (the ones it trains on)."""
    config = load_train_config(config_path, {}).with_num_ps(None)
    plan = plan_training(config, workload)
    threads = config.worker_threads(config.num_ps) * config.num_ps
    with ThreadPoolExecutor(threads, thread_name_prefix="sniper-limit") as pool:
        _Pass(config, plan, pool, threads).run(islice(data.batches(), WARM_UP_BATCHES))
        return _Pass(config, plan, pool, threads).run(data.batches())


class _Pass:
    """One pass over batches on fresh tables and a fresh model, timing each kind of work."""

    def __init__(
        self, config: TrainConfig, plan: TrainPlan, pool: ThreadPoolExecutor, threads: int
    ) -> None:
        sequences = [name for name, spec in plan.tables.items() if spec.pooling == "none"]
        if sequences:
            raise ValueError(
                f"the kernel-bound limit covers pooled variables only; {sequences[0]!r} is "
                "a sequence (pooling 'none')"
            )
        self.tables = {name: _table(spec, config) for name, spec in plan.tables.items()}
        self.model: DenseModel = plan.model()
        self.model.warm_up()
        self.columns = plan.model_inputs.columns
        self.width = plan.model_inputs.width
        self.map_at_feed = config.map_rows == "feed"
        self.eval_every = config.eval_every
        self.pool = pool
        self.threads = threads
        self.seconds = {"feed": 0.0, "lookup": 0.0, "push": 0.0, "dense": 0.0}

    def run(self, batches: Iterable[Batch]) -> KernelLimit:
        trained = 0
        for index, batch in enumerate(batches):
            held_out = self.eval_every > 0 and index % self.eval_every == self.eval_every - 1
            self._step(batch, held_out)
            trained += not held_out
        s = self.seconds
        return KernelLimit(
            s["feed"], s["lookup"], s["push"], s["dense"], max(1, trained), self.threads
        )

    def _timed(self, kind: str, call: Callable[[], _T]) -> _T:
        start = time.perf_counter()
        result = call()
        self.seconds[kind] += time.perf_counter() - start
        return result

    def _step(self, batch: Batch, held_out: bool) -> None:
        split = self._timed("feed", lambda: self._feed(batch))
        inputs = np.empty((len(batch.labels), self.width), dtype=np.float32)
        inputs[:, self.width - batch.dense.shape[1] :] = batch.dense
        self._timed("lookup", lambda: self._lookup(split, inputs))
        if held_out:
            self._timed("dense", lambda: self.model.predict(inputs))
        else:
            step = self._timed("dense", lambda: self.model.train_step(inputs, batch.labels))
            self._timed(
                "push",
                lambda: self._spread(
                    push_shards,
                    [(*part, step.input_grads[name]) for name, part in self._parts(split)],
                ),
            )
            self._timed("dense", step.update)
        for name, sharded in split.items():
            self.tables[name].unpin(sharded)

    def _parts(self, split: dict[str, ShardedBatch]) -> Iterable[tuple[str, _Part]]:
        """Every shard of every variable's batch, with its variable's name."""
        for name, batch in split.items():
            for shard in range(batch.num_shards):
                yield name, (self.tables[name], batch, shard)

    def _feed(self, batch: Batch) -> dict[str, ShardedBatch]:
        split = {
            name: table.split(*batch.sparse[name], batch.weights.get(name))
            for name, table in self.tables.items()
        }
        if self.map_at_feed:
            self._spread(pin_shards, [part for _, part in self._parts(split)])
        return split

    def _lookup(self, split: dict[str, ShardedBatch], inputs: NDArray[np.float32]) -> None:
        """Pool every variable into its columns of ``inputs`` (a variable of several shards
        into an array per shard, summed there, as a ps sums them)."""
        parts = []
        for name, (table, batch, shard) in self._parts(split):
            if batch.num_shards == 1:
                parts.append((table, batch, shard, inputs, self.columns[name][0]))
            else:
                out = np.empty((batch.batch_size, table.dim), dtype=np.float32)
                parts.append((table, batch, shard, out, 0))
        pooled = [block for group in self._spread(pool_shards, parts) for block in group]
        sums: dict[int, NDArray[np.float32]] = {}
        for part, block in zip(parts, pooled, strict=True):
            if part[1].num_shards > 1:
                if id(part[1]) in sums:
                    sums[id(part[1])] += block
                else:
                    sums[id(part[1])] = block
        for name, batch in split.items():
            if batch.num_shards > 1:
                start, stop = self.columns[name]
                inputs[:, start:stop] = sums[id(batch)]

    def _spread(self, call: Callable[[list[_T]], _R], parts: Sequence[_T]) -> list[_R]:
        """``call`` on ``parts`` spread over the threads by their signs, one call a thread;
        one call on this thread below ``ShardedRunner.INLINE_SIGNS`` signs."""
        signs = [_signs(part) for part in parts]
        if self.threads == 1 or sum(signs) < ShardedRunner.INLINE_SIGNS:
            return [call(list(parts))]
        groups: list[list[_T]] = [[] for _ in range(self.threads)]
        loads = [0] * self.threads
        for index in sorted(range(len(parts)), key=signs.__getitem__, reverse=True):
            lightest = loads.index(min(loads))
            groups[lightest].append(parts[index])
            loads[lightest] += signs[index]
        return list(self.pool.map(call, [group for group in groups if group]))


def _signs(part: object) -> int:
    """Signs of a part's shard (any part: ``(table, batch, shard, ...)``)."""
    _, batch, shard = part[:3]  # type: ignore[index]
    return int(batch.shard_sizes[shard])


def _table(spec: TableSpec, config: TrainConfig) -> EmbeddingTable:
    """The table a ps builds for a variable of this spec (see ``sniper.roles``'
    ``table_from_config``), with the ps's lock and pooling modes and the job's seed."""
    return EmbeddingTable(
        spec.dim,
        capacity=spec.capacity,
        optimizer=spec.make_optimizer(),
        initializer=Initializer.from_args(*spec.initializer_args()),
        num_shards=spec.shards or 1,
        eviction=spec.eviction,
        admission=Admission(spec.min_count) if spec.min_count > 1 else None,
        seed=config.seed,
        lock=config.lock,
        pooling=config.pooling,
        bag_pooling=cast(BagPooling, spec.pooling),  # TableSpec checked it
    )
