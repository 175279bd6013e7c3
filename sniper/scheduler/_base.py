"""What every backend shares: admission, handles, running tasks, statistics and shutdown.

A backend only decides where a task waits and which worker takes it. It implements three hooks
and starts its threads with :meth:`BaseScheduler._start_workers`:

* ``_push(handle)``: queue an admitted task. Called with the scheduler's lock held, which is
  what orders every accepted submit before close's "stop accepting" step: a task can never be
  queued after the workers decided to exit.
* ``_take_queued()``: remove and return every queued task (``aclose(cancel_pending=True)``).
* ``_stop_workers()``: let workers exit once the queues are empty, waking any that sleep.

A backend may also run some tasks in their submitter (``_runs_in_submitter``): those are
admitted and counted as every task, never pushed, and run by ``submit`` itself once the lock
is released. Closing waits for them as for the workers: once ``close`` returns, no task of the
scheduler is running on any thread.

Workers hand what they dequeue to :meth:`BaseScheduler._run_group`, which starts, runs (or
merges), times, counts and completes tasks, so the backends cannot disagree on those rules.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Callable, Sequence
from time import perf_counter
from typing import Any, TypeVar, TypeVarTuple

import anyio

from ._abc import Scheduler
from ._exceptions import SchedulerBusy, SchedulerClosed
from ._key import KeyLike, as_task_key
from ._signal import OneShot
from ._stats import Counters, SchedulerStatistics
from ._task import MergeFn, TaskHandle

__all__ = ["BaseScheduler", "check_positive"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
AnyHandle = TaskHandle[Any]


def check_positive(field: str, value: object) -> int:
    """Validate a count option at the edge, naming the field in the error."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f'"{field}" should be a positive integer, got {value!r}')
    return value


class BaseScheduler(Scheduler):
    """The shared machinery behind every backend; see the module docstring for the hooks."""

    def __init__(self, workers: int, *, max_pending: int | None = None) -> None:
        check_positive("workers", workers)
        if max_pending is not None:
            check_positive("max_pending", max_pending)
        self._max_pending = max_pending
        # One lock orders submits against close and guards the counters.
        self._lock = threading.Lock()
        self._closed = False
        self._cancelling = False
        self._counters = Counters(workers)
        self._threads: list[threading.Thread] = []
        self._live_workers = 0
        self._exited = OneShot()
        self._in_submitters: list[int] = []
        """Threads running a task in its submitter now (a thread once per task it runs)."""
        self._submitters_done = OneShot()
        """Set once the scheduler is closed and no task runs in its submitter."""
        # One bound method shared by every handle, rather than a new one per submit.
        self._count_cancelled_hook = self._count_cancelled

    # -- hooks -------------------------------------------------------------------------------

    @abstractmethod
    def _push(self, handle: AnyHandle) -> None:
        """Queue an admitted task; called with ``self._lock`` held."""

    @abstractmethod
    def _take_queued(self) -> list[AnyHandle]:
        """Remove and return every queued task, so that close can cancel them."""

    @abstractmethod
    def _stop_workers(self) -> None:
        """Let the workers exit once the queues are empty, and wake any that sleep."""

    def _runs_in_submitter(self, handle: AnyHandle) -> bool:
        """Whether ``submit`` runs this admitted task itself, on the calling thread, instead
        of pushing it (``inline``: every task; ``adaptive``: those keyed ``small``)."""
        return False

    _submitter_worker: int | None = None
    """The busy-time counter of tasks run in their submitter (None: no worker's)."""

    # -- submitting --------------------------------------------------------------------------

    def submit(
        self,
        key: KeyLike,
        fn: Callable[[*Ts], T],
        /,
        *args: *Ts,
        merge: Callable[[Sequence[tuple[*Ts]]], Sequence[T]] | None = None,
    ) -> TaskHandle[T]:
        return self._admit(key, fn, args, merge, bounded=False)

    def submit_nowait(
        self,
        key: KeyLike,
        fn: Callable[[*Ts], T],
        /,
        *args: *Ts,
        merge: Callable[[Sequence[tuple[*Ts]]], Sequence[T]] | None = None,
    ) -> TaskHandle[T]:
        return self._admit(key, fn, args, merge, bounded=True)

    async def run(
        self,
        key: KeyLike,
        fn: Callable[[*Ts], T],
        /,
        *args: *Ts,
        merge: Callable[[Sequence[tuple[*Ts]]], Sequence[T]] | None = None,
    ) -> T:
        return await self._admit(key, fn, args, merge, bounded=False).wait()

    def _admit(
        self,
        key: KeyLike,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        merge: MergeFn | None,
        *,
        bounded: bool,
    ) -> TaskHandle[T]:
        handle = TaskHandle(as_task_key(key), fn, args, merge, self._count_cancelled_hook)
        here = self._runs_in_submitter(handle)
        with self._lock:
            if self._closed:
                raise SchedulerClosed(
                    f"the {self.name} scheduler is closed; submit work before closing it, "
                    "or open a new scheduler"
                )
            counters = self._counters
            limit = self._max_pending
            if bounded and limit is not None and counters.pending >= limit:
                raise SchedulerBusy(
                    f"the {self.name} scheduler already has {counters.pending} pending tasks "
                    f"(max_pending={limit}); retry later or shed load"
                )
            counters.submitted += 1
            counters.pending += 1
            if here:
                self._in_submitters.append(threading.get_ident())
            else:
                self._push(handle)
        if here:
            try:
                self._run_one(handle, self._submitter_worker)
            finally:
                self._left_submitter()
        return handle

    def _left_submitter(self) -> None:
        """A task run in its submitter has finished: the last one after close lets it
        return."""
        with self._lock:
            self._in_submitters.remove(threading.get_ident())
            done = self._closed and not self._in_submitters
        if done:
            self._submitters_done._set()

    def _count_cancelled(self) -> None:
        with self._lock:
            self._counters.pending -= 1
            self._counters.cancelled += 1

    def _count_stolen(self, count: int) -> None:
        with self._lock:
            self._counters.stolen += count

    # -- running -----------------------------------------------------------------------------

    def _run_one(self, handle: AnyHandle, worker: int | None) -> None:
        """Run one task on worker ``worker`` (an index into the busy-time counters; None for
        a task run by the thread that submitted it, which is no worker's busy time)."""
        self._run_group((handle,), worker)

    def _run_group(self, group: Sequence[AnyHandle], worker: int | None) -> None:
        """Run one task, or several of one key with the same ``merge`` as one merged call.

        Counters are updated before any handle completes, so an awaiter that wakes up and
        reads ``statistics()`` already sees its own task counted.
        """
        started = self._start(group)
        if not started:
            return
        began = perf_counter()
        error: BaseException | None = None
        results: list[Any] = []
        try:
            results = _call(started)
        except BaseException as exc:  # a failing task must never kill its worker
            error = exc
        elapsed = perf_counter() - began
        self._counters.run_time.record(elapsed)
        with self._lock:
            counters = self._counters
            counters.running -= len(started)
            if worker is not None:
                counters.busy[worker] += elapsed
            if error is None:
                counters.completed += len(started)
            else:
                counters.failed += len(started)
            if len(started) > 1:
                counters.merged += len(started)
        if error is None:
            for handle, result in zip(started, results, strict=True):
                handle.set_result(result)
        else:
            for handle in started:
                handle.set_exception(error)

    def _start(self, group: Sequence[AnyHandle]) -> list[AnyHandle]:
        """Claim the tasks that were not cancelled; cancel them all if close asked for it."""
        if self._cancelling:
            for handle in group:
                handle.cancel()
            return []
        now = perf_counter()
        started = [handle for handle in group if handle.start()]
        if started:
            with self._lock:
                self._counters.pending -= len(started)
                self._counters.running += len(started)
            for handle in started:
                self._counters.queue_wait.record(now - handle.submitted_at)
        return started

    def _start_workers(self, target: Callable[[int], None], count: int) -> None:
        """Start ``count`` threads running ``target(index)``.

        Daemon threads, so that a scheduler someone forgot to close cannot hang interpreter
        exit; closing still joins them.
        """
        self._live_workers = count
        self._threads = [
            threading.Thread(
                target=self._worker_main,
                args=(target, index),
                name=f"sniper-{self.name}-{index}",
                daemon=True,
            )
            for index in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def _worker_main(self, target: Callable[[int], None], index: int) -> None:
        try:
            target(index)
        finally:
            with self._lock:
                self._live_workers -= 1
                last = self._live_workers == 0
            if last:
                self._exited._set()

    # -- statistics and shutdown -------------------------------------------------------------

    def statistics(self) -> SchedulerStatistics:
        with self._lock:
            return self._counters.snapshot(self.name, self._closed)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, *, cancel_pending: bool = False, timeout: float | None = None) -> None:
        self._refuse_from_worker()
        self._begin_close(cancel_pending=cancel_pending)
        deadline = None if timeout is None else perf_counter() + timeout
        for done in (self._exited, self._submitters_done):
            left = None if deadline is None else max(0.0, deadline - perf_counter())
            if not done._wait_blocking(left):
                raise TimeoutError(
                    f"the {self.name} scheduler still had tasks running after {timeout} "
                    "seconds; it stays closed, call close() again to keep waiting"
                )
        self._join_threads()

    async def aclose(self, *, cancel_pending: bool = False) -> None:
        self._refuse_from_worker()
        self._begin_close(cancel_pending=cancel_pending)
        try:
            await self._exited._wait_async()
            await self._submitters_done._wait_async()
        except BaseException:
            # Cancelled while draining: give up on the queued work, but running tasks cannot
            # be interrupted, so wait for them rather than leave threads behind.
            self._begin_close(cancel_pending=True)
            with anyio.CancelScope(shield=True):
                await self._exited._wait_async()
                await self._submitters_done._wait_async()
            raise
        finally:
            self._join_threads()

    def _begin_close(self, *, cancel_pending: bool) -> None:
        """Steps 1 and 2 of shutdown; safe to call again, e.g. to turn a drain into a cancel."""
        with self._lock:
            first = not self._closed
            self._closed = True
            if cancel_pending:
                self._cancelling = True
            idle = not self._in_submitters
        if idle:
            self._submitters_done._set()
        if cancel_pending:
            for handle in self._take_queued():
                handle.cancel()
        if first:
            self._stop_workers()

    def _join_threads(self) -> None:
        # Every worker has signalled its exit, so these joins only wait for the threads'
        # last few bytecodes; doing them on an event loop thread is fine.
        if self._exited._is_set:
            for thread in self._threads:
                thread.join()

    def _refuse_from_worker(self) -> None:
        if (
            threading.current_thread() in self._threads
            or threading.get_ident() in self._in_submitters
        ):
            raise RuntimeError(
                f"a task cannot close its own {self.name} scheduler (it would wait for itself); "
                "close it from the code that opened it"
            )

    def __repr__(self) -> str:
        stats = self.statistics()
        state = "closed" if stats.closed else "open"
        return (
            f"<{type(self).__name__} {state} workers={stats.workers} pending={stats.pending} "
            f"running={stats.running}>"
        )


def _call(started: Sequence[AnyHandle]) -> list[Any]:
    """Call one task's function, or the shared ``merge`` once for several tasks."""
    first = started[0]
    if len(started) == 1:
        return [first._fn(*first._args)]
    merge = first._merge
    assert merge is not None, "only tasks with the same merge function are grouped"
    results = list(merge([handle._args for handle in started]))
    if len(results) != len(started):
        raise ValueError(
            f"merge function {merge!r} returned {len(results)} results for {len(started)} "
            "calls; it must return one result per call, in order"
        )
    return results
