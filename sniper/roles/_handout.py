"""``HandOut``: the hub's fed batches between FeedSample and the reader that trains them.

Why leases. A ReadSample answer can be lost after the hub took the batch off its queue: the
caller's deadline expired, its connection dropped, or it was cancelled while the answer was on
the way. A queue that forgets a batch once it is taken loses it for good (a hostile test lost 9
of 60 batches at a 1 ms deadline). So every batch taken is *leased* to its reader until the
reader acknowledges it (AckSample); a lease that is not acknowledged within ``lease_seconds`` is
put back at the front of the queue and handed out again, in reading order.

The data ends for a reader only when the producer has closed the queue *and* no lease is
outstanding: a batch whose reader may still give up is not yet settled. Taking is synchronous
(no await between popping a batch and leasing it), so a reader cancelled while it waits loses
nothing.

An acknowledged batch is settled even if its lease had expired and it was queued again (it is
removed from the queue; a batch never handed out cannot be acknowledged away). One already
handed out again is then held by two readers, which a reader recognises by its id (the trainer
skips a batch it already has).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio

__all__ = ["HandOut"]

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    position: int
    """The batch's place in reading order: re-queued batches go back in this order."""
    batch_id: int
    batch: T
    expires: float = math.inf
    handed_out: bool = False
    """Handed out before: an acknowledgement may settle it while it is queued again."""


class HandOut(Generic[T]):
    """A bounded FIFO of ``(batch_id, batch)`` with leases (see the module doc)."""

    def __init__(self, size: int, lease_seconds: float) -> None:
        self.size = size
        self.lease_seconds = lease_seconds
        self._queue: deque[_Entry[T]] = deque()
        self._leased: dict[int, _Entry[T]] = {}
        self._positions = 0
        self._closed = False
        self._stopped = False
        self._changed: anyio.Event | None = None  # made on first wait: it needs a running loop
        self.redelivered = 0
        """Batches handed out again because their lease expired."""

    @property
    def waiting(self) -> int:
        """Batches queued for a reader."""
        return len(self._queue)

    @property
    def leased(self) -> int:
        """Batches handed out and not yet acknowledged."""
        return len(self._leased)

    async def put(self, batch_id: int, batch: T) -> None:
        """Queue a batch; waits while ``size`` batches are queued (backpressure)."""
        while len(self._queue) >= self.size and not self._stopped:
            await self._wait(math.inf)
        if self._stopped:
            return  # nobody will read it: keep nothing
        self._positions += 1
        self._queue.append(_Entry(self._positions, batch_id, batch))
        self._notify()

    def close(self) -> None:
        """No more batches: readers hear the end once every lease is settled."""
        self._closed = True
        self._notify()

    def stop(self) -> None:
        """Hand out nothing more: every later :meth:`take` answers None at once."""
        self._stopped = True
        self._notify()

    async def take(self) -> tuple[int, T] | None:
        """The next batch, leased to the caller; None once the data ended (or stopped)."""
        while not self._stopped:
            now = time.monotonic()
            self._requeue_expired(now)
            if self._queue:
                entry = self._queue.popleft()
                entry.expires = now + self.lease_seconds
                entry.handed_out = True
                self._leased[entry.batch_id] = entry
                self._notify()
                return entry.batch_id, entry.batch
            if self._closed and not self._leased:
                return None
            next_expiry = min((e.expires for e in self._leased.values()), default=math.inf)
            await self._wait(next_expiry - now)
        return None

    def acknowledge(self, batch_ids: Iterable[int]) -> int:
        """Settle these batches (their readers have them); how many were outstanding."""
        ids = set(batch_ids)
        settled = sum(self._leased.pop(batch_id, None) is not None for batch_id in ids)
        queued = len(self._queue)
        self._queue = deque(e for e in self._queue if not (e.handed_out and e.batch_id in ids))
        settled += queued - len(self._queue)
        if settled:
            self._notify()
        return settled

    def _requeue_expired(self, now: float) -> None:
        expired = [e for e in self._leased.values() if e.expires <= now]
        if not expired:
            return
        for entry in expired:
            del self._leased[entry.batch_id]
            entry.expires = math.inf
        self.redelivered += len(expired)
        self._queue = deque(sorted([*expired, *self._queue], key=lambda e: e.position))

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def _wait(self, timeout: float) -> None:
        """Until the queue or the leases change, or ``timeout`` seconds pass."""
        if self._changed is None:
            self._changed = anyio.Event()
        with anyio.move_on_after(max(timeout, 0.0)):
            await self._changed.wait()
