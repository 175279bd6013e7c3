"""The hub: reads samples, numbers the batches, feeds their signs to the ps, serves ReadSample.

A producer task walks the reader's batches (``epochs`` times, this hub's shard of them),
gives each one an id, and sends every variable's signs to the ps that owns the variable
(FeedSample, all ps concurrently, at most ``max_in_flight`` batches being fed at once). A batch
whose signs every ps holds goes into a bounded queue; ReadSample takes from it. When the
trainer stops reading, the queue fills and the producer waits: that is the backpressure. When
the input is exhausted, ReadSample answers ``end_of_data``.

Batch ids are ``sniper.roles._batch_id``'s: several hubs never hand out the same id, and a
batch has the same index (so the same held-out status) in every epoch. Reading and generating
batches is numpy work, done on a worker thread so the event loop keeps serving.

A hub whose data cannot be read (a malformed line) or fed stops producing: health turns
NOT_SERVING (see :attr:`HubService.healthy`), and once the batches fed before the failure are
read, ReadSample answers UNAVAILABLE with the reason, which the trainer prints as its one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from numpy.typing import NDArray

from sniper._metrics import Histogram
from sniper.roles._batch_id import MAX_HUBS, pack_batch_id
from sniper.rpc._client import PsCluster
from sniper.rpc._generated.sniper.v1 import HubBase, ReadSampleRequest, ReadSampleResponse
from sniper.rpc._tensor import encode

__all__ = ["BatchLike", "HubConfig", "HubService", "ReaderLike"]

log = logging.getLogger("sniper.hub")


class BatchLike(Protocol):
    """What the hub needs of a batch (``sniper.data.Batch``)."""

    @property
    def labels(self) -> NDArray[np.float32]: ...
    @property
    def dense(self) -> NDArray[np.float32]: ...
    @property
    def sparse(self) -> Mapping[str, tuple[NDArray[np.uint64], NDArray[np.int64]]]: ...


class ReaderLike(Protocol):
    """What the hub needs of a reader (``sniper.data.Reader``)."""

    def batches(self, *, epoch: int = 0, shard: int = 0, num_shards: int = 1) -> Iterator[Any]: ...


@dataclass(frozen=True)
class HubConfig:
    """How one hub walks its input and feeds the ps."""

    hub_index: int = 0
    num_hubs: int = 1
    epochs: int = 1
    max_in_flight: int = 4
    """Batches being fed to the ps at once."""
    queue_size: int = 8
    """Fed batches waiting for ReadSample; a full queue pauses reading (backpressure)."""
    feed_retry_seconds: float = 120.0
    """How long a FeedSample answered NOT_FOUND is retried: the trainer may still be creating
    the variables when the hub starts."""

    def __post_init__(self) -> None:
        if not 1 <= self.num_hubs <= MAX_HUBS:
            raise ValueError(f"num_hubs must be in [1, {MAX_HUBS}], got {self.num_hubs}")
        if not 0 <= self.hub_index < self.num_hubs:
            raise ValueError(
                f"hub_index must be in [0, num_hubs={self.num_hubs}), got {self.hub_index}"
            )
        for name in ("epochs", "max_in_flight", "queue_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")


_END = object()


class DataError(Exception):
    """The hub's reader failed: the data's fault (a malformed line), not the cluster's."""


class HubService(HubBase):
    """The ``sniper.v1.Hub`` service; ``start()`` launches the producer."""

    def __init__(self, reader: ReaderLike, cluster: PsCluster, config: HubConfig) -> None:
        self.reader = reader
        self.cluster = cluster
        self.config = config
        self.queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=config.queue_size)
        self.feed_latency = Histogram()
        self.batches_fed = 0
        self.error: BaseException | None = None
        self._producer: asyncio.Task[None] | None = None
        self._ended = False

    def start(self) -> None:
        """Start reading and feeding in the running event loop."""
        self._producer = asyncio.create_task(self._produce())

    async def stop(self) -> None:
        if self._producer is not None:
            self._producer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._producer

    @property
    def healthy(self) -> bool:
        """False once reading or feeding has failed: the hub will hand out no more batches."""
        return self.error is None

    def _stream(self) -> Iterator[tuple[int, Any]]:
        """(batch id, batch) in order; a batch keeps its index in every epoch."""
        for epoch in range(self.config.epochs):
            batches = self.reader.batches(
                epoch=epoch, shard=self.config.hub_index, num_shards=self.config.num_hubs
            )
            for index, batch in enumerate(batches):
                yield pack_batch_id(self.config.hub_index, epoch, index), batch

    @staticmethod
    def _next(stream: Iterator[tuple[int, Any]]) -> tuple[int, Any] | None:
        try:
            return next(stream, None)
        except Exception as exc:  # whatever the reader raises, it is about the data
            raise DataError(f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc)) from exc

    async def _produce(self) -> None:
        in_flight: set[asyncio.Task[None]] = set()
        stream = self._stream()
        try:
            while True:
                item = await asyncio.to_thread(self._next, stream)
                if item is None:
                    break
                batch_id, batch = item
                while len(in_flight) >= self.config.max_in_flight:
                    done, in_flight = await asyncio.wait(
                        in_flight, return_when=asyncio.FIRST_COMPLETED
                    )
                    for task in done:
                        task.result()
                in_flight.add(asyncio.create_task(self._feed(batch_id, batch)))
            for task in in_flight:
                await task
        except DataError as exc:
            log.error("hub %d stopped reading its data: %s", self.config.hub_index, exc)
            self.error = exc
        except Exception as exc:
            log.exception("hub %d stopped feeding", self.config.hub_index)
            self.error = exc
        finally:
            for task in in_flight:
                task.cancel()
        # Not in the finally: a cancelled producer (shutdown) must not wait for room in a full
        # queue that nobody reads any more.
        await self.queue.put(_END)

    async def _feed(self, batch_id: int, batch: BatchLike) -> None:
        start = time.perf_counter()
        deadline = time.monotonic() + self.config.feed_retry_seconds
        while True:
            try:
                await self.cluster.feed_sample(batch_id, batch.sparse)
                break
            except GRPCError as exc:
                if exc.status != Status.NOT_FOUND or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        self.feed_latency.record(time.perf_counter() - start)
        self.batches_fed += 1
        await self.queue.put((batch_id, batch))

    async def read_sample(self, request: ReadSampleRequest) -> ReadSampleResponse:
        if self._ended:
            return self._end()
        item = await self.queue.get()
        if item is _END:
            self._ended = True
            self.queue.put_nowait(_END)  # every later reader sees the end too
            return self._end()
        batch_id, batch = item
        return ReadSampleResponse(
            batch_id=batch_id, labels=encode(batch.labels), dense=encode(batch.dense)
        )

    def _end(self) -> ReadSampleResponse:
        if isinstance(self.error, DataError):
            raise GRPCError(
                Status.UNAVAILABLE,
                f"hub {self.config.hub_index} stopped reading its data: {self.error}",
            )
        if self.error is not None:
            raise GRPCError(
                Status.UNAVAILABLE,
                f"hub {self.config.hub_index} could not feed the ps: "
                f"{type(self.error).__name__}: {self.error}",
            )
        return ReadSampleResponse(end_of_data=True)
