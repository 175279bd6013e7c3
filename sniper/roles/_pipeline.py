"""The trainer's prefetch pipeline: read, look up, bound staleness, hand over in order.

``prefetch`` worker tasks (one anyio task group) each loop over: take the next read of
:class:`~sniper.roles._reading.HubReader` (a ticket), ReadSample from its hub, then
EmbeddingLookup of every variable on every ps at once, then hand the batch to the training loop
through a memory object stream. So up to ``prefetch`` batches are in flight while the model
trains on the current one: the seeds' feed_queue. A batch's lookup waits for the pushes of
every batch more than ``max_staleness`` before it (0 by default: each lookup sees every
earlier gradient, as in a synchronous trainer), so the reads run ahead and the lookups follow
the pushes; a larger bound is the usual asynchronous-PS staleness, traded for overlap.

One call for a push and the next lookup. With ``max_staleness = 0`` a worker whose lookup
waits for the previous ticket's push offers it to that push (:meth:`Pipeline.offer_after`):
each ps pushed to answers its variables' lookup in the same call, once their gradients are
applied (PushGrad's ``then_lookup``), so a lookup sees exactly what it would see on its own.
That saves the lookup a round trip on the critical path, and a call per ps: in the seed_ctr
0.02 processes job each ps waited 4.5-9.3 ms (medians) between answering a push and
receiving the next lookup. A variable whose ps was not pushed to or did not answer, and a
ticket whose previous one pushes nothing (held out, empty) or had started its push before
the offer, is looked up on its own. The offered lookups' time is in the trainer's PushGrad
figures, not EmbeddingLookup's.

Order. :meth:`Pipeline.next` hands the tickets over in number order, whichever arrives first:
the same batches in the same order on every run, and after a resume.

The gate. A pause (a checkpoint, an auto_shard move) closes the gate: workers stop before
their next read, and the batches already read drain through the training loop until
:meth:`Pipeline.drained` says every one was trained. Then the ps hold exactly the pushes of the
steps trained, and each hub's position is a clean cut.

The step limit. A checkpoint is due after a step (every ``checkpoint_every``), but a gate closed
then still lets the ``prefetch`` batches already read train first: checkpoints "every 100
steps" landed at 104, 204, 304. So the workers also stop reading, by themselves, once the
batches read would train up to the step :meth:`Pipeline.stop_reading_at` names: the training
loop then reaches that step with nothing read ahead, and the pause it requests there drains at
once. A read whose batch turns out held out (or empty) trains no step, so another read may go.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import numpy as np
from anyio import CancelScope
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from numpy.typing import NDArray

from sniper._metrics import Histogram
from sniper.models import Jagged
from sniper.roles._batch_id import BatchId
from sniper.roles._cluster import PsCluster
from sniper.roles._errors import RPC_ERRORS, TrainingError, describe_error
from sniper.roles._reading import HubReader, Ticket
from sniper.rpc import HubApi, LookupTarget, NextLookup, Pooled

__all__ = ["InputPool", "Offer", "Pipeline", "Ready", "jagged"]

_WAKE = -1
"""Not a ticket number: a worker that stopped tells the training loop to look again."""

_Item = tuple[int, "Ready | None"]


@dataclass(eq=False)
class Offer:
    """A batch's lookup, offered to the push of the batch before it
    (:meth:`Pipeline.offer_after`)."""

    lookup: NextLookup
    answers: dict[str, Pooled] = field(default_factory=dict)
    """What the push answered, set before the push's ticket settles: every variable of
    ``lookup`` on a ps that answered; the worker looks up the rest itself."""


@dataclass
class Ready:
    """A batch read and looked up, ready to train on (or to score, when held out)."""

    batch_id: int
    labels: NDArray[np.float32]
    inputs: NDArray[np.float32]
    """The model's input: each variable's pooled embeddings (the lookup wrote them in place)
    and the dense features."""
    held_out: bool
    sequences: dict[str, Jagged] = field(default_factory=dict)
    """Each sequence variable's (pooling ``none``) values and offsets, beside the matrix."""


class InputPool:
    """Model-input matrices of batches already trained or scored, handed to later batches.

    A batch's input is a ``[batch, width]`` float32 matrix (5 MB for seed_ctr) that its lookup
    writes. A fresh one per batch costs the event loop the kernel's faulting in and zeroing of
    its pages on first write, on the lookup's critical path; a matrix that comes back is
    warm. Only the loop's thread takes and gives, so there is no lock; at most ``limit`` are
    kept, which is more than the batches in flight (``prefetch`` plus the one training).
    """

    def __init__(self, limit: int) -> None:
        self._free: list[NDArray[np.float32]] = []
        self._limit = limit

    def take(self, rows: int, width: int) -> NDArray[np.float32]:
        """A ``[rows, width]`` matrix of unspecified contents."""
        while self._free:
            matrix = self._free.pop()
            if matrix.shape == (rows, width):
                return matrix
        return np.empty((rows, width), dtype=np.float32)

    def give(self, matrix: NDArray[np.float32]) -> None:
        """``matrix`` is no longer read or written by anyone."""
        if len(self._free) < self._limit:
            self._free.append(matrix)


def jagged(answers: Mapping[str, Pooled], names: Sequence[str]) -> dict[str, Jagged]:
    """The sequence variables' ``(values, offsets)`` of a lookup's answers."""
    blocks = {}
    for name in names:
        answer = answers[name]
        if answer.offsets is None:
            raise TrainingError(
                f"variable {name!r} was answered pooled, but the model takes it as a sequence "
                "(pooling 'none'): the ps holds it with another pooling"
            )
        blocks[name] = (answer.pooled, answer.offsets)
    return blocks


async def timed(histogram: Histogram, awaitable: Awaitable[Any]) -> Any:
    """``await awaitable``, its seconds recorded in ``histogram``."""
    start = time.perf_counter()
    result = await awaitable
    histogram.record(time.perf_counter() - start)
    return result


class Pipeline:
    """Prefetches batches from ``hubs`` with their embeddings from ``cluster``.

    ``columns`` gives each variable's columns in the model's input, ``dense_columns`` the
    dense features'; ``sequences`` names the unpooled variables, looked up in the same
    EmbeddingLookup and handed over beside the matrix. ``histograms`` must hold
    ``ReadSample`` and ``EmbeddingLookup``.
    """

    def __init__(
        self,
        hubs: Sequence[tuple[str, HubApi]],
        cluster: PsCluster,
        columns: Mapping[str, tuple[int, int]],
        dense_columns: tuple[int, int],
        *,
        prefetch: int,
        max_staleness: int,
        eval_every: int,
        histograms: Mapping[str, Histogram],
        sequences: Sequence[str] = (),
    ) -> None:
        self.hubs = list(hubs)
        self.cluster = cluster
        self.variables = list(columns)
        self.sequences = list(sequences)
        self._starts = {name: start for name, (start, _) in columns.items()}
        self._dense_columns = dense_columns
        self._prefetch = prefetch
        self._max_staleness = max_staleness
        self._eval_every = eval_every
        self._lookups = histograms["EmbeddingLookup"]
        self.reader = HubReader(hubs, histograms["ReadSample"])
        self.inputs = InputPool(prefetch + 2)
        self._window = anyio.Semaphore(prefetch)  # tickets read and not yet trained
        self._arrived: dict[int, Ready | None] = {}  # by ticket, until its turn to train
        self.next_ticket = 0
        """The ticket :meth:`next` hands over next; every one before it was handed over."""
        self._settled = -1  # every ticket up to this one is trained and pushed (or scored)
        self._progress = anyio.Event()  # set, and replaced, whenever _settled advances
        self._gate: anyio.Event | None = None  # None: open; an unset Event: closed
        self._step_limit: int | None = None  # no read may train past this step (None: any)
        self._to_train = 0  # steps trained, or read and to be trained
        self._reading = 0  # reads under way whose batch is not known to train or not
        self._room = anyio.Event()  # set, and replaced, when a read may go again
        self._fetching = 0  # workers between the gate and handing their batch over
        self._receive: MemoryObjectReceiveStream[_Item] | None = None
        self._offers: dict[int, Offer] = {}  # by ticket: lookups waiting for the push before

    def start_at(self, ticket: int) -> None:
        """Resume: every ticket before ``ticket`` was trained and pushed (call before
        :meth:`run`)."""
        self.next_ticket = ticket
        self._settled = ticket - 1
        self.reader.start_at(ticket)

    # -- running --------------------------------------------------------------------------

    async def run(self, consume: Callable[[], Awaitable[None]]) -> None:
        """Prefetch while ``consume()`` runs (it takes the batches with :meth:`next`); stop
        when it returns. A failure of a worker or of ``consume`` stops both, and the first is
        raised."""
        send, receive = anyio.create_memory_object_stream[_Item](self._prefetch)
        failures: list[BaseException] = []
        clones = [send.clone() for _ in range(self._prefetch)]
        send.close()
        async with anyio.create_task_group() as group:
            for clone in clones:
                group.start_soon(self._worker, clone, failures, group.cancel_scope)
            try:
                async with receive:
                    self._receive = receive
                    await consume()
            except Exception as exc:
                failures.append(exc)
            finally:
                self._receive = None
            group.cancel_scope.cancel()  # max_steps reached, or a failure: stop prefetching
        for clone in clones:  # a worker cancelled before it started never closed its own
            clone.close()
        if failures:
            raise failures[0]

    async def next(self) -> Ready | None:
        """The next ticket's batch (None: an empty ticket, or a pause whose pipeline has just
        drained), whichever ticket arrived first; ``anyio.EndOfStream`` once every worker is
        done."""
        assert self._receive is not None, "next() is for run()'s consume"
        while self.next_ticket not in self._arrived:
            number, ready = await self._receive.receive()
            if number == _WAKE:
                if self._gate is not None and self.drained():
                    return None  # the pause's drain is complete: the loop pauses now
                continue
            self._arrived[number] = ready
        item = self._arrived.pop(self.next_ticket)
        self.next_ticket += 1
        self._window.release()
        return item

    def settle(self, ticket: int) -> None:
        """Ticket ``ticket`` (the last handed over) is trained and pushed, scored, or empty:
        lookups waiting for its push may go."""
        self._settled = max(self._settled, ticket)
        progress, self._progress = self._progress, anyio.Event()
        progress.set()

    # -- the gate ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """The gate is closed: a pause is draining the pipeline."""
        return self._gate is not None

    def close(self) -> None:
        """Stop prefetching before the next read; the batches read go on draining."""
        if self._gate is None:
            self._gate = anyio.Event()

    def open(self) -> None:
        """Let the workers read again."""
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.set()

    def stop_reading_at(self, step: int | None, trained: int) -> None:
        """``trained`` steps are trained and no batch is read ahead (the pipeline is drained,
        or has not started): read no batch that would train past step ``step`` (None: no
        limit). See the module doc."""
        self._step_limit = step
        self._to_train = trained
        self._make_room()

    def _make_room(self) -> None:
        room, self._room = self._room, anyio.Event()
        room.set()

    async def _wait_to_read(self) -> None:
        """Wait while the gate is closed or one more read could train past the step limit."""
        while True:
            if self._gate is not None:
                await self._gate.wait()
            elif self._step_limit is not None and (
                self._to_train + self._reading >= self._step_limit
            ):
                await self._room.wait()
            else:
                self._reading += 1
                return

    def _known(self, trains: bool) -> None:
        """A read under way ended: its batch trains a step (``trains``), or not."""
        self._reading -= 1
        self._to_train += trains
        if not trains:
            self._make_room()

    def drained(self) -> bool:
        """Every batch read before the gate closed was handed over (and, once the training
        loop asks, trained)."""
        assert self._receive is not None
        return (
            self._fetching == 0
            and self._receive.statistics().current_buffer_used == 0
            and self.next_ticket == self.reader.issued
        )

    # -- the workers ------------------------------------------------------------------------

    async def _worker(
        self, send: MemoryObjectSendStream[_Item], failures: list[BaseException], scope: CancelScope
    ) -> None:
        """Prefetch until the data ends; a failure is recorded and stops the whole pipeline.
        Closing ``send`` tells the training loop this worker is done."""
        async with send:
            try:
                while True:
                    await self._wait_to_read()
                    self._fetching += 1
                    try:
                        await self._window.acquire()
                        ticket = self.reader.next_ticket()
                        if ticket is None:
                            self._known(trains=False)
                            self._window.release()
                            break
                        await send.send((ticket.number, await self._prefetch_one(ticket)))
                    finally:
                        self._fetching -= 1
                # No batch from this worker wakes the training loop, which may be waiting for
                # a pause's pipeline to drain: the other workers wait at the gate, so without
                # this the drain would never be seen.
                await send.send((_WAKE, None))
            except anyio.BrokenResourceError:
                pass  # the training loop stopped reading (max_steps): nothing is wrong
            except Exception as exc:
                failures.append(exc)
                scope.cancel()

    async def _prefetch_one(self, ticket: Ticket) -> Ready | None:
        """The ticket's batch with its embeddings; None for an empty ticket."""
        try:
            sample = await self.reader.read(ticket)
        except RPC_ERRORS as exc:
            address = self.hubs[ticket.hub][0]
            raise TrainingError(
                f"hub {address} failed on ReadSample: {describe_error(exc)}"
            ) from exc
        if sample is None:
            self._known(trains=False)
            return None
        counter = BatchId.unpack(sample.batch_id).index
        every = self._eval_every
        held_out = every > 0 and counter % every == every - 1
        self._known(trains=not held_out)
        inputs = self._input_matrix(ticket, sample.labels, sample.dense)
        lookup = NextLookup(
            sample.batch_id,
            self.variables + self.sequences,
            release=held_out,
            into=LookupTarget(inputs, self._starts),
        )
        answers = await self._offered(ticket.number, lookup)
        rest = [name for name in lookup.names if name not in answers]
        if rest:
            try:
                answers |= await timed(
                    self._lookups,
                    self.cluster.embedding_lookup(
                        lookup.batch_id, rest, release=held_out, into=lookup.into
                    ),
                )
            except RPC_ERRORS as exc:
                raise TrainingError(
                    f"EmbeddingLookup of batch {sample.batch_id} failed: {describe_error(exc)}"
                ) from exc
        return Ready(
            sample.batch_id, sample.labels, inputs, held_out, jagged(answers, self.sequences)
        )

    async def _offered(self, ticket: int, lookup: NextLookup) -> dict[str, Pooled]:
        """Wait until the ticket may be looked up (:meth:`_fresh_enough`); meanwhile, with
        ``max_staleness = 0``, offer its lookup to the previous ticket's push (see the module
        doc). The answers of the push that took it, or none."""
        if self._max_staleness or self._settled >= ticket - 1:
            await self._fresh_enough(ticket)
            return {}
        offer = self._offers[ticket] = Offer(lookup)
        try:
            await self._fresh_enough(ticket)
        finally:
            self._offers.pop(ticket, None)  # not taken: withdrawn
        return offer.answers

    def offer_after(self, ticket: int) -> Offer | None:
        """The lookup of the ticket after ``ticket``, if its worker is waiting for this
        ticket's push: the push that takes it answers it, in
        :attr:`Offer.answers`, before the ticket settles."""
        return self._offers.pop(ticket + 1, None)

    def _input_matrix(
        self, ticket: Ticket, labels: NDArray[np.float32], dense: NDArray[np.float32]
    ) -> NDArray[np.float32]:
        """The batch's model input with its dense features in place; the lookup writes the
        rest. A hub whose dense features do not fit the model is named."""
        start, stop = self._dense_columns
        if dense.shape != (len(labels), stop - start):
            raise TrainingError(
                f"hub {self.hubs[ticket.hub][0]} sent dense features of shape {dense.shape} "
                f"for {len(labels)} examples; the model takes {stop - start} per example"
            )
        inputs = self.inputs.take(len(labels), stop)
        inputs[:, start:] = dense
        return inputs

    async def _fresh_enough(self, ticket: int) -> None:
        """Wait until every ticket more than ``max_staleness`` before ``ticket`` is settled:
        its gradients are on the ps, so this ticket's lookup sees them."""
        while self._settled < ticket - 1 - self._max_staleness:
            await self._progress.wait()
