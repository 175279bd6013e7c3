"""``HubReader``: the trainer's reads of its hubs, in one order that every run repeats.

Why an order. The trainer's ``prefetch`` workers read concurrently, and with several hubs, or
several reads in flight to one hub, the batches used to reach the training loop in whatever
order the network gave them. A job resumed from a checkpoint then trained the same batches in
another order than the run it replaces. Here each read is a *ticket*: ticket ``k`` reads hub
``k % H`` and waits until that hub's previous ticket has its answer, so hub ``h``'s ``j``-th
ticket gets its ``j``-th batch; the training loop trains tickets in number order. A ticket of
a hub whose data ended is empty. A resumed reader starts at the ticket after the last one
trained (:attr:`HubReader.issued` is saved with the checkpoint).

Leases. Every batch read is acknowledged (AckSample) once the next read of its hub may go; a
batch the hub hands out again because an acknowledgement was lost (its lease expired) comes
with an id this reader already has, and is acknowledged again and skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import anyio

from sniper._metrics import Histogram
from sniper.roles._batch_id import BatchId
from sniper.roles._errors import RPC_ERRORS, DataMismatchError, describe_error
from sniper.rpc import DataServed, HubApi, Sample

__all__ = ["HubReader", "Ticket"]

log = logging.getLogger("sniper.trainer")


@dataclass(frozen=True)
class Ticket:
    """One read, in its place of the job's reading order."""

    number: int
    hub: int
    previous: anyio.Event | None
    """Set once the hub's ticket before this one has its answer."""
    done: anyio.Event


class HubReader:
    """Reads ``hubs`` ticket by ticket (see the module doc)."""

    def __init__(self, hubs: Sequence[tuple[str, HubApi]], latency: Histogram) -> None:
        self.hubs = list(hubs)
        self.latency = latency
        """Time of each ReadSample call, waiting for the ticket's turn left out."""
        self.issued = 0
        """Tickets handed out so far (and the number of the next one)."""
        self._ended: set[int] = set()
        self._last: dict[int, tuple[int, int]] = {}  # hub -> (epoch, index) of its last batch
        self._tails: dict[int, anyio.Event] = {}  # hub -> done event of its latest ticket
        self.expected: DataServed | None = None
        """The data this trainer was configured for: the first read of each hub asks it what
        it serves, and a hub serving other data stops training (:class:`DataMismatchError`)."""
        self._described: set[int] = set()  # hubs whose data was compared

    def start_at(self, ticket: int) -> None:
        """Resume: the next ticket is ``ticket`` (call before the first :meth:`next_ticket`)."""
        self.issued = ticket

    def next_ticket(self) -> Ticket | None:
        """The next read in order; None once every hub's data has ended."""
        if len(self._ended) == len(self.hubs):
            return None
        number = self.issued
        self.issued += 1
        hub = number % len(self.hubs)
        done = anyio.Event()
        previous = self._tails.get(hub)
        self._tails[hub] = done
        return Ticket(number, hub, previous, done)

    async def read(self, ticket: Ticket) -> Sample | None:
        """The ticket's batch; None for an empty ticket (its hub's data ended). A hub that
        fails raises what its call raised."""
        try:
            if ticket.previous is not None:
                await ticket.previous.wait()
            sample = await self._read_new(ticket.hub)
        finally:
            ticket.done.set()
        if sample is not None:
            await self._acknowledge(ticket.hub, sample.batch_id)
        return sample

    async def _read_new(self, hub: int) -> Sample | None:
        """The hub's next batch this reader does not have yet, or None at its end."""
        while hub not in self._ended:
            start = time.perf_counter()
            describe = self.expected is not None and hub not in self._described
            api = self.hubs[hub][1]
            # Asked only when it is: a HubApi written before ``describe`` still reads.
            sample = await (api.read_sample(describe=True) if describe else api.read_sample())
            self.latency.record(time.perf_counter() - start)
            if describe and sample is not None:
                self._described.add(hub)
                self._compare(hub, sample.served)
            if sample is None:
                self._ended.add(hub)
                return None
            place = BatchId.unpack(sample.batch_id)
            last = self._last.get(hub)
            if last is None or (place.epoch, place.index) > last:
                self._last[hub] = (place.epoch, place.index)
                return sample
            log.warning(
                "hub %s handed out batch %d again (its lease expired before the "
                "acknowledgement arrived); this trainer has it already, so it is skipped",
                self.hubs[hub][0],
                sample.batch_id,
            )
            await self._acknowledge(hub, sample.batch_id)
        return None

    def _compare(self, hub: int, served: DataServed | None) -> None:
        """Stop, naming both sides, if hub ``hub`` serves other data than :attr:`expected`
        (a hub that does not say what it serves is taken at its word)."""
        expected = self.expected
        if served is None or expected is None or served.agrees_with(expected):
            return
        same_shape = replace(served, digest=expected.digest).agrees_with(expected)
        unseen = "they differ in a key this line does not show; " if same_shape else ""
        raise DataMismatchError(
            f"hub {self.hubs[hub][0]} serves {served.describe()}, but this trainer was "
            f"configured for {expected.describe()}; {unseen}give the hubs and the trainer the "
            "same data keys (data, workload, scale, num_batches, batch_size, seed, and "
            "[features] with its columns' settings)"
        )

    async def _acknowledge(self, hub: int, batch_id: int) -> None:
        """Settle the batch's lease. A lost acknowledgement costs a re-read (skipped above),
        and a hub that is gone fails the next read anyway: neither stops training here."""
        try:
            await self.hubs[hub][1].acknowledge([batch_id])
        except RPC_ERRORS as exc:
            log.debug(
                "AckSample of batch %d to hub %s failed: %s",
                batch_id,
                self.hubs[hub][0],
                describe_error(exc),
            )
