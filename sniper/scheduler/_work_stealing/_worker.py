"""The work-stealing run loop: where a worker looks for its next task, and how it stops.

Work-search order (rayon's, plus tokio's fairness tick), tried until one step yields a task:

0. Every 61st tick, the inject queue first. A worker that keeps spawning sub-tasks would
   otherwise never look past its own deque and starve outside submissions; 61 is tokio's
   choice, a prime so the check does not fall into step with periodic workloads.
1. The worker's own deque, newest first.
2. Steal the older half of a random sibling's deque, trying each sibling once starting at a
   random one (with one sibling, no draw). The first stolen task runs; the rest go to the
   thief's own deque. A worker registers as searching for this step (see ``_idle``), unless
   every sibling's deque is empty: then it goes straight to step 3 and registers only if that
   finds nothing too. A ps submits every task from outside, so this is the common case, and
   skipping the registration saves two turns of the idle lock per task.
3. The inject queue, where tasks submitted from outside the workers wait.
4. Park until woken (see ``_idle`` for the wake-up protocol).

Shutdown steps (the scheduler drives 1-3, each worker 4):

1. The scheduler stops accepting: ``submit`` raises ``SchedulerClosed`` everywhere, workers
   included, so from here on the queues only shrink.
2. For ``cancel_pending``, it drains every queue and cancels what it took; workers cancel
   whatever they dequeue afterwards instead of running it.
3. It sets ``stopping`` and wakes every parked worker.
4. A worker that, with ``stopping`` set, finds no work anywhere after registering as parked
   exits. Tasks a sibling holds in hand are run by that sibling, which exits the same way.
   The scheduler then joins the threads.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

from .._task import TaskHandle
from ._idle import Idle
from ._park import Parker
from ._queue import InjectQueue, LocalQueue

__all__ = ["Shared", "Worker"]

AnyHandle = TaskHandle[Any]

FAIRNESS_TICKS = 61
"""Every this many tasks, a worker checks the inject queue before its own deque."""


class Shared:
    """What the workers of one scheduler share: queues, the idle registry, the random source."""

    def __init__(
        self,
        count: int,
        rng: random.Random,
        run_task: Callable[[AnyHandle, int], None],
        count_stolen: Callable[[int], None],
    ) -> None:
        self.inject: InjectQueue[AnyHandle] = InjectQueue()
        self.workers = [Worker(index, self) for index in range(count)]
        # Thread id -> the worker running on it. Looking the submitting thread up here costs
        # a tenth of a ``threading.local`` attribute that is missing (as it is on the event
        # loop's thread, which makes most submits).
        self.worker_on: dict[int, Worker] = {}
        self.idle = Idle([worker.parker for worker in self.workers])
        self.rng = rng
        self.run_task = run_task
        self.count_stolen = count_stolen
        self.stopping = False

    def push(self, handle: AnyHandle) -> None:
        """Queue a task: on the calling worker's own deque, or on the inject queue."""
        worker = self.worker_on.get(threading.get_ident())
        if worker is not None:
            worker.local.push(handle)
        else:
            self.inject.push(handle, background=handle.key.background)
        self.idle.notify_one()

    def has_visible_work(self) -> bool:
        """True if any queue holds a task (tasks a worker holds in hand are not visible)."""
        return bool(self.inject) or any(worker.local for worker in self.workers)

    def drain(self) -> list[AnyHandle]:
        """Take every queued task from every queue."""
        taken = self.inject.drain()
        for worker in self.workers:
            taken.extend(worker.local.drain())
        return taken

    def stop(self) -> None:
        """Shutdown step 3: let workers exit once they find no work, and wake them all."""
        self.stopping = True
        self.idle.notify_all()


class Worker:
    """One worker thread's state and run loop."""

    __slots__ = ("index", "local", "parker", "searching", "shared", "tick")

    def __init__(self, index: int, shared: Shared) -> None:
        self.index = index
        self.shared = shared
        self.local: LocalQueue[AnyHandle] = LocalQueue()
        self.parker = Parker()
        self.searching = False
        self.tick = 0

    def run(self) -> None:
        """Run tasks until shutdown; called on the worker's own thread."""
        ident = threading.get_ident()
        self.shared.worker_on[ident] = self
        try:
            while True:
                task = self._find_task()
                if task is not None:
                    self._stop_searching()
                    self.tick += 1
                    self.shared.run_task(task, self.index)
                elif self._park_or_exit():
                    return
        finally:
            del self.shared.worker_on[ident]

    def _find_task(self) -> AnyHandle | None:
        """Steps 0-3 of the search order in the module docstring."""
        shared = self.shared
        if self.tick % FAIRNESS_TICKS == FAIRNESS_TICKS - 1:
            task = shared.inject.pop()
            if task is not None:
                return task
        task = self.local.pop()
        if task is not None:
            return task
        if not self.searching:
            if not any(worker.local for worker in shared.workers):
                # Step 2 would find nothing. A worker that takes outside work without having
                # registered suppressed no wake-up, so it has no search to hand on after.
                task = shared.inject.pop()
                if task is not None:
                    return task
            self.searching = True
            shared.idle.start_searching()
        task = self._steal()
        if task is not None:
            return task
        return shared.inject.pop()

    def _steal(self) -> AnyHandle | None:
        workers = self.shared.workers
        # With one sibling there is nothing to choose: no draw from the random source.
        start = self.shared.rng.randrange(len(workers)) if len(workers) > 2 else 0
        for offset in range(len(workers)):
            victim = workers[(start + offset) % len(workers)]
            if victim is self or not victim.local:
                continue
            stolen = victim.local.steal_half()
            if stolen:
                self.shared.count_stolen(len(stolen))
                for task in stolen[1:]:
                    self.local.push(task)
                return stolen[0]
        return None

    def _stop_searching(self) -> None:
        """Leave the searching state; the last searcher hands the search on if work remains."""
        if not self.searching:
            return
        self.searching = False
        shared = self.shared
        if shared.idle.stop_searching() and shared.has_visible_work():
            shared.idle.notify_one()

    def _park_or_exit(self) -> bool:
        """Step 4: park until woken; return True when the worker should exit instead."""
        shared = self.shared
        shared.idle.park(self.index, searching=self.searching)
        self.searching = False
        # The final look, after registering as parked (see ``_idle`` for why it is needed).
        if shared.stopping or shared.has_visible_work():
            if shared.idle.unpark_self(self.index):
                self.parker.clear()
                self.searching = True
            return shared.stopping and not shared.has_visible_work()
        self.parker.park()
        # Whoever woke us counted us as searching.
        self.searching = True
        return False
