"""The ``thread_pool`` backend: one shared FIFO queue served by N threads.

The simplest parallel design, and the reference for the others: no ordering between tasks of
a key (two workers may run them at once), and every submit and every dequeue contend for the
queue's one lock.
"""

from __future__ import annotations

import threading
from collections import deque

from ._base import AnyHandle, BaseScheduler

__all__ = ["ThreadPoolScheduler", "scheduler_class"]


class ThreadPoolScheduler(BaseScheduler):
    """N worker threads taking tasks from one queue in submission order."""

    name = "thread_pool"

    def __init__(self, workers: int, *, max_pending: int | None = None) -> None:
        super().__init__(workers, max_pending=max_pending)
        self._queue: deque[AnyHandle] = deque()
        self._ready = threading.Condition(threading.Lock())
        self._stopping = False
        self._start_workers(self._work, workers)

    def _push(self, handle: AnyHandle) -> None:
        with self._ready:
            self._queue.append(handle)
            self._ready.notify()

    def _take_queued(self) -> list[AnyHandle]:
        with self._ready:
            taken = list(self._queue)
            self._queue.clear()
        return taken

    def _stop_workers(self) -> None:
        with self._ready:
            self._stopping = True
            self._ready.notify_all()

    def _work(self, index: int) -> None:
        while (handle := self._next()) is not None:
            self._run_one(handle, index)

    def _next(self) -> AnyHandle | None:
        """Block until a task is queued; None once stopping and the queue is empty."""
        with self._ready:
            while not self._queue:
                if self._stopping:
                    return None
                self._ready.wait()
            return self._queue.popleft()


scheduler_class = ThreadPoolScheduler
