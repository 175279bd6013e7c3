"""``HubRole``: reads samples, numbers the batches, feeds their signs to the ps, hands them out.

An actor on anyio. :meth:`HubRole.run` walks the reader's batches (``epochs`` times, this hub's
shard of them) on a worker thread, gives each one an id, and sends every variable's signs to
the ps that owns the variable (FeedSample through :class:`~sniper.roles.PsCluster`, at most
``max_in_flight`` batches being fed at once, each in the run's task group). A batch whose signs
every ps holds goes into a bounded :class:`~sniper.roles._handout.HandOut` queue;
:meth:`HubRole.read_sample` takes from it and leases the batch to its reader until
:meth:`HubRole.acknowledge` (AckSample): a batch whose reader gave up is handed out again after
``read_lease_seconds``. When the trainer stops reading, the queue fills and the producer waits:
that is the backpressure. When the input is exhausted and every lease is settled,
``read_sample`` answers None (end of data) to every reader.

Batch ids are ``sniper.roles._batch_id``'s: several hubs never hand out the same id, and a
batch has the same index (so the same held-out status) in every epoch.

A hub whose data cannot be read (a malformed line) or fed stops producing: :attr:`healthy`
turns False (health NOT_SERVING), and once the batches fed before the failure are read,
``read_sample`` raises :class:`~sniper.roles.Unavailable` with the reason, which the trainer
prints as its one line. A hub cancelled for shutdown says so the same way, never "end of data".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import anyio.lowlevel
import anyio.to_thread
import numpy as np
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from numpy.typing import NDArray

from sniper._config import Validated, check_at_least, check_positive
from sniper._metrics import Histogram
from sniper.data import DataSource
from sniper.placement import Placement
from sniper.roles._batch_id import MAX_HUBS, BatchId
from sniper.roles._cluster import PsCluster
from sniper.roles._errors import DataError, Unavailable, describe_error
from sniper.roles._handout import HandOut
from sniper.rpc import DataServed, Sample

__all__ = ["BatchLike", "HubConfig", "HubRole", "HubSettings", "ReaderLike", "data_served"]

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

    @property
    def batch_size(self) -> int: ...
    def batches(self, *, epoch: int = 0, shard: int = 0, num_shards: int = 1) -> Iterator[Any]: ...


def data_served(source: DataSource, variables: Sequence[str], dense_features: int) -> DataServed:
    """The data ``source``'s keys name, of this shape: what a hub says it serves, and what a
    trainer configured with the same keys expects."""
    return DataServed(
        source.data, tuple(variables), dense_features, source.batch_size, source.data_digest()
    )


@dataclass(frozen=True)
class HubSettings(Validated):
    """How a job's hubs walk their input and feed the ps (keys of ``sniper train`` too)."""

    num_hubs: int = 1
    """Hubs that split the data between them."""
    epochs: int = 1
    max_in_flight: int = 8
    """Batches being fed to the ps at once."""
    queue_size: int = 8
    """Fed batches waiting for ReadSample; a full queue pauses reading (backpressure)."""
    feed_retry_seconds: float = 120.0
    """How long a FeedSample answered NOT_FOUND is retried: the trainer may still be creating
    the variables when the hub starts."""
    read_lease_seconds: float = 30.0
    """A batch handed out by ReadSample and not acknowledged (AckSample) within this long is
    handed out again: its reader gave up or died."""
    drop_last: bool = False
    """Drop every batch shorter than ``batch_size``: the last of each hub's share of an
    epoch, and of each file where the data is several files of sniper's Parquet or Criteo's
    TSV (a user's table joins its files' rows into full batches). A model with BatchNorm
    cannot train on a batch of one example, and a data's rows need not be a multiple of the
    batch."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.num_hubs <= MAX_HUBS:
            raise ValueError(f"num_hubs must be in [1, {MAX_HUBS}], got {self.num_hubs}")
        check_at_least(self, 1, "epochs", "max_in_flight", "queue_size")
        check_positive(self, "feed_retry_seconds", "read_lease_seconds")


@dataclass(frozen=True)
class HubConfig(HubSettings):
    """One hub: the job's hub settings and which of the hubs this one is."""

    hub_index: int = 0
    start_epoch: int = 0
    """Resume here: batches of earlier epochs, and of this epoch before ``start_index``, are
    read past (they were trained before the checkpoint)."""
    start_index: int = 0
    read_on_loop: bool = False
    """Read each batch on the event loop's thread instead of a worker thread. A hub of its own
    process reads on a thread, so its loop goes on sending FeedSample and answering ReadSample
    while a batch decodes. The one-process job reads on the loop, which serves every role of
    the process: the read then waits its turn between the roles' coroutines instead of running
    beside them, and one thread fewer takes turns at the GIL (seed_ctr at scale 0.02: a third
    fewer context switches and 10% more examples/s; a Criteo TSV file: 24% more; scale 1.0:
    the same). A reader that waits on a network would stall every role meanwhile: the job's
    sources are local files, and a hub embedded elsewhere keeps the default. (A Parquet
    reader decodes ahead on a thread of its own either way; what runs here is its slicing.)"""
    placement_owners: dict[str, int] = field(default_factory=dict)
    """The ps of each variable placed away from its hashed ps when this hub starts: the job's
    placement, which ``sniper train`` hands the hubs it starts. A hub started without it feeds
    by hashing until the trainer's SetPlacement reaches it, and a feed of a variable placed
    elsewhere is answered NOT_FOUND and sent again meanwhile."""
    placement_version: int = 0
    """That placement's version (0: every variable on its hashed ps)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_at_least(self, 0, "start_epoch", "start_index", "placement_version")
        if self.placement_owners and not self.placement_version:
            raise ValueError(
                "placement_owners needs a placement_version of at least 1 "
                "(version 0 is every variable on its hashed ps)"
            )
        if not 0 <= self.hub_index < self.num_hubs:
            raise ValueError(
                f"hub_index must be in [0, num_hubs={self.num_hubs}), got {self.hub_index}"
            )

    def start_placement(self, num_ps: int) -> Placement:
        """The placement this hub feeds by from its start, on ``num_ps`` ps (``ValueError``
        names a variable placed on a ps the cluster lacks)."""
        return Placement(num_ps, self.placement_owners, self.placement_version)


@dataclass(frozen=True)
class _Turn:
    """A feed's place in the hand-out order, and the in-flight slot it holds."""

    position: int
    """The batch's place in this hub's reading order."""
    previous: anyio.Event | None
    """Set once the batch read before this one was handed out (or failed)."""
    done: anyio.Event
    slots: anyio.Semaphore


class HubRole:
    """The hub (see the module doc): ``await run()`` in a task group, then ``read_sample``."""

    def __init__(
        self,
        reader: ReaderLike,
        cluster: PsCluster,
        config: HubConfig,
        source: DataSource | None = None,
        *,
        log_failure: bool = True,
    ) -> None:
        """``source``: the data keys ``reader`` was opened from, which a ReadSample that asks
        (``describe``) is told (:class:`~sniper.rpc.DataServed`); None tells nothing.

        ``log_failure``: log why the hub stopped at ERROR. A hub of its own process logs it
        there, where its operator looks; a hub whose only reader shares its process passes
        False (DEBUG), since that reader already reports the same reason as its error, and
        the user would read it twice."""
        self.reader = reader
        self.log_failure = log_failure
        self.served = None
        if source is not None:
            variables = tuple(getattr(reader, "variables", ()))
            dense = int(getattr(reader, "dense_features", 0))
            self.served = data_served(source, variables, dense)
        self.cluster = cluster
        self.config = config
        self.feed_latency = Histogram()
        self.batches_fed = 0
        self.error: BaseException | None = None
        self.handout = HandOut[BatchLike](config.queue_size, config.read_lease_seconds)

    @property
    def healthy(self) -> bool:
        """False once reading or feeding has failed: the hub will hand out no more batches."""
        return self.error is None

    async def run(self) -> None:
        """Read and feed to the end of the data (or the first failure); then return.

        The role keeps answering :meth:`read_sample` after ``run`` returns. Cancel it to stop
        the hub: readers then hear that it shut down.
        """
        index = self.config.hub_index
        try:
            self.error = await self._produce()
        except anyio.get_cancelled_exc_class():
            self.error = Unavailable(f"hub {index} is shutting down")
            raise
        finally:
            self.handout.close()  # readers hear the end once every lease is settled
        level = logging.ERROR if self.log_failure else logging.DEBUG
        if isinstance(self.error, DataError):
            log.log(level, "hub %d stopped reading its data: %s", index, self.error)
        elif self.error is not None:
            log.log(level, "hub %d stopped feeding: %s", index, describe_error(self.error))

    def _stream(self) -> Generator[tuple[int, Any], None, None]:
        """(batch id, batch) in order; a batch keeps its index in every epoch."""
        for epoch in range(self.config.start_epoch, self.config.epochs):
            batches = self.reader.batches(
                epoch=epoch, shard=self.config.hub_index, num_shards=self.config.num_hubs
            )
            skip = self.config.start_index if epoch == self.config.start_epoch else 0
            for index, batch in enumerate(batches):
                dropped = self.config.drop_last and len(batch.labels) < self.reader.batch_size
                if index >= skip and not dropped:
                    yield BatchId(self.config.hub_index, epoch, index).pack(), batch

    @staticmethod
    def _next(stream: Iterator[tuple[int, Any]]) -> tuple[int, Any] | None:
        try:
            return next(stream, None)
        except Exception as exc:  # whatever the reader raises, it is about the data
            raise DataError(f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc)) from exc

    async def _read(self, stream: Iterator[tuple[int, Any]]) -> tuple[int, Any] | None:
        """The next batch, read where :attr:`HubConfig.read_on_loop` says."""
        if self.config.read_on_loop:
            await anyio.lowlevel.checkpoint()  # a cancelled hub stops here, as on a thread
            return self._next(stream)
        return await anyio.to_thread.run_sync(self._next, stream)

    async def _produce(self) -> BaseException | None:
        """Feed every batch, ``max_in_flight`` at a time; the first failure, or None.

        Feeds run concurrently but hand their batches out in reading order: each waits for the
        one before it (``turn``), so one hub's batches reach the trainer in the same order on
        every run, whatever the ps's latencies.
        """
        # Closed however this ends (a cancelled hub included), so that a reader's resources,
        # a Parquet reader's decoding thread among them, go now rather than at collection.
        with closing(self._stream()) as stream:
            return await self._feed_all(stream)

    async def _feed_all(self, stream: Iterator[tuple[int, Any]]) -> BaseException | None:
        failures: list[BaseException] = []
        slots = anyio.Semaphore(self.config.max_in_flight)
        turn: anyio.Event | None = None
        position = 0
        failed_at: list[int] = []  # reading positions of the feeds that failed
        async with anyio.create_task_group() as feeds:
            while not failures:
                try:
                    item = await self._read(stream)
                except DataError as exc:
                    failures.append(exc)
                    break
                if item is None:
                    break
                await slots.acquire()
                done = anyio.Event()
                position += 1
                feeds.start_soon(
                    self._feed, *item, _Turn(position, turn, done, slots), failures, failed_at
                )
                turn = done
        return failures[0] if failures else None

    async def _feed(
        self,
        batch_id: int,
        batch: BatchLike,
        turn: _Turn,
        failures: list[BaseException],
        failed_at: list[int],
    ) -> None:
        """Feed one batch, then hand it out in its turn, unless a batch read before it failed:
        the batches read before a failure are all handed out, none after it."""
        try:
            start = time.perf_counter()
            await self._feed_with_retry(batch_id, batch)
            self.feed_latency.record(time.perf_counter() - start)
            self.batches_fed += 1
        except Exception as exc:
            failures.append(exc)
            failed_at.append(turn.position)
        try:
            if turn.previous is not None:
                await turn.previous.wait()
            if not failed_at or turn.position < min(failed_at):
                await self.handout.put(batch_id, batch)
        finally:
            turn.done.set()
            turn.slots.release()

    retry_pause = 0.2
    """Seconds between tries of a FeedSample answered NOT_FOUND, unless the placement changes
    first."""

    async def _feed_with_retry(self, batch_id: int, batch: BatchLike) -> None:
        """FeedSample, retrying NOT_FOUND for ``feed_retry_seconds``: the trainer may still be
        creating the variables when the hub starts, or not have sent the job's placement yet
        (a hub starts by hashing); a new placement is tried as soon as it comes."""
        deadline = time.monotonic() + self.config.feed_retry_seconds
        while True:
            version = self.cluster.placement.version
            try:
                # A weighted bag's weights (``sniper.data.Batch.weights``) go with its signs.
                weights = getattr(batch, "weights", None) or None
                await self.cluster.feed_sample(batch_id, batch.sparse, weights=weights)
                return
            except GRPCError as exc:
                if exc.status != Status.NOT_FOUND or time.monotonic() > deadline:
                    raise
                await self.cluster.placement_after(version, self.retry_pause)

    def close(self) -> None:
        """Stop handing out batches: later reads answer as if the data had ended."""
        self.handout.stop()

    async def read_sample(self, *, describe: bool = False) -> Sample | None:
        """The next fed batch, leased to the caller until :meth:`acknowledge`; None at the end
        of the data; :class:`Unavailable` if reading or feeding failed. With ``describe``,
        it says what data this hub serves (when it was given its ``source``)."""
        taken = await self.handout.take()
        if taken is None:
            self._raise_failure()
            return None
        batch_id, batch = taken
        return Sample(batch_id, batch.labels, batch.dense, self.served if describe else None)

    async def acknowledge(self, batch_ids: Sequence[int]) -> int:
        """The reader has these batches: they are never handed out again. Answers how many
        were outstanding (an unknown or repeated id is not an error: a retried AckSample)."""
        return self.handout.acknowledge(batch_ids)

    async def set_placement(self, placement: Placement) -> int:
        """Feed by ``placement`` once the feeds in flight have answered (auto_shard moved a
        variable); returns the version fed with now."""
        version = await self.cluster.switch(placement)
        log.info("hub %d feeds by placement version %d", self.config.hub_index, version)
        return version

    def _raise_failure(self) -> None:
        index = self.config.hub_index
        if isinstance(self.error, DataError):
            raise Unavailable(f"hub {index} stopped reading its data: {self.error}")
        if isinstance(self.error, Unavailable):
            raise Unavailable(str(self.error))
        if self.error is not None:
            raise Unavailable(f"hub {index} could not feed the ps: {describe_error(self.error)}")
