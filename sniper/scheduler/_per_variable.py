"""The ``per_variable`` backend: one mailbox per key, drained by one worker at a time (actors).

Tasks of one key run one at a time, in submission order, so the data a key owns (one shard of
one table) needs no lock of its own. Keys spread over N worker threads through a ready queue of
keys whose mailbox has work. A key is in the ready queue at most once and, once a worker takes
it, stays off the queue until that worker puts it back; that is the whole mechanism behind
"at most one worker per key".

A worker takes up to ``max_batch`` tasks from a mailbox at a time, then puts the key at the
back of the ready queue if more work arrived, so one busy key cannot starve the others. Within
a batch, consecutive tasks whose ``merge`` is the same object run as one merged call (see
``Scheduler.submit``); everything else runs one by one.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator, Sequence

from ._base import AnyHandle, BaseScheduler, check_positive
from ._key import TaskKey

__all__ = ["PerVariableScheduler", "merge_groups", "scheduler_class"]


class PerVariableScheduler(BaseScheduler):
    """Per-key FIFO mailboxes on N threads; see the module docstring."""

    name = "per_variable"

    def __init__(
        self, workers: int, *, max_pending: int | None = None, max_batch: int = 16
    ) -> None:
        super().__init__(workers, max_pending=max_pending)
        self._max_batch = check_positive("max_batch", max_batch)
        # A key has a mailbox exactly while it is scheduled: in ``_ready`` or held by a worker.
        self._mailboxes: dict[TaskKey, deque[AnyHandle]] = {}
        self._ready: deque[TaskKey] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._stopping = False
        self._start_workers(self._work, workers)

    def _push(self, handle: AnyHandle) -> None:
        # ``small`` is a hint for other backends: a shard's tasks share one mailbox with or
        # without it, so they still run one at a time in submission order.
        key = handle.key._replace(small=False) if handle.key.small else handle.key
        with self._cond:
            mailbox = self._mailboxes.get(key)
            if mailbox is None:
                mailbox = self._mailboxes[key] = deque()
                self._ready.append(key)
                self._cond.notify()
            mailbox.append(handle)

    def _take_queued(self) -> list[AnyHandle]:
        # Mailboxes stay registered: their keys are still scheduled, and the worker that takes
        # one finds it empty and unregisters it.
        with self._cond:
            taken = [handle for mailbox in self._mailboxes.values() for handle in mailbox]
            for mailbox in self._mailboxes.values():
                mailbox.clear()
        return taken

    def _stop_workers(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def _work(self, index: int) -> None:
        while (taken := self._take_batch()) is not None:
            key, batch = taken
            for group in merge_groups(batch):
                self._run_group(group, index)
            self._reschedule(key)

    def _take_batch(self) -> tuple[TaskKey, list[AnyHandle]] | None:
        """Block until some key is ready and take a batch of its tasks; None when stopping."""
        with self._cond:
            while not self._ready:
                if self._stopping:
                    return None
                self._cond.wait()
            key = self._ready.popleft()
            mailbox = self._mailboxes[key]
            count = min(self._max_batch, len(mailbox))
            return key, [mailbox.popleft() for _ in range(count)]

    def _reschedule(self, key: TaskKey) -> None:
        """Put the key back at the end of the ready queue if it has more work, else retire it."""
        with self._cond:
            if self._mailboxes[key]:
                # No notify: this worker is about to take from the ready queue itself.
                self._ready.append(key)
            else:
                del self._mailboxes[key]


def merge_groups(batch: Sequence[AnyHandle]) -> Iterator[Sequence[AnyHandle]]:
    """Split a batch into runs of consecutive tasks that share a non-None ``merge``.

    A task without ``merge`` is a group of its own, so order within the key is kept.
    """
    start = 0
    while start < len(batch):
        merge = batch[start]._merge
        end = start + 1
        if merge is not None:
            while end < len(batch) and batch[end]._merge is merge:
                end += 1
        yield batch[start:end]
        start = end


scheduler_class = PerVariableScheduler
