"""Task handles: the caller's view of one submitted task, and the scheduler's unit of work.

A handle moves through ``pending -> running -> finished`` or ``pending -> cancelled``; every
transition happens under the handle's lock, which is what makes "a cancelled task never runs"
and "a task runs exactly once" hold when a worker starts a task while another thread cancels
it. The handle doubles as the queue entry, so a submit allocates one object.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from time import perf_counter
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

from ._exceptions import TaskCancelled
from ._key import KeyLike, as_task_key
from ._signal import OneShot, run_callbacks

__all__ = ["MergeFn", "Outcome", "TaskHandle"]

T = TypeVar("T")

MergeFn = Callable[[Sequence[tuple[Any, ...]]], Sequence[Any]]
"""A batch version of a task function: given the argument tuples of several queued calls,
return one result per call, in order. See the package docstring for the merge protocol."""

_PENDING = "pending"
_RUNNING = "running"
_FINISHED = "finished"
_CANCELLED = "cancelled"


def _released(*args: object) -> object:
    raise AssertionError("a task's function was called after the task finished")


Outcome = Literal["completed", "failed", "cancelled"]
"""How a task ended: the :class:`~sniper.scheduler.SchedulerStatistics` counter it goes to."""


def _nothing() -> None:
    return None


class TaskHandle(OneShot, Generic[T]):
    """The result of one submitted task, awaitable from async code or waitable from threads.

    Users get handles from ``Scheduler.submit``; constructing one queues nothing. A backend
    (built in or a plugin subclassing :class:`~sniper.scheduler.Scheduler`) makes one per
    submit and completes it with the public methods below: :meth:`run` on the thread that
    runs the task, or :meth:`start` and then :meth:`set_result` or :meth:`set_exception` when
    it calls the function itself (a merged call). Each completes the handle exactly once.
    """

    __slots__ = (
        "_args",
        "_exception",
        "_fn",
        "_merge",
        "_on_cancel",
        "_result",
        "_state",
        "_traceback",
        "key",
        "submitted_at",
    )

    def __init__(
        self,
        key: KeyLike,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        merge: MergeFn | None = None,
        on_cancel: Callable[[], None] = _nothing,
    ) -> None:
        """``fn(*args)`` under ``key`` (a ``TaskKey`` or a variable name); ``merge``, the batch
        form of ``fn`` a merging backend may call instead; ``on_cancel``, called once if the
        task is cancelled before it starts (a backend's count of cancelled tasks)."""
        super().__init__()
        self.key = as_task_key(key)
        """The key the task was submitted under."""
        self.submitted_at = perf_counter()
        """``time.perf_counter()`` at submit, for the queue-wait histogram."""
        self._fn: Callable[..., Any] = fn
        self._args = args
        self._merge = merge
        self._on_cancel = on_cancel
        self._state = _PENDING
        self._result: T | None = None
        self._exception: BaseException | None = None
        self._traceback: TracebackType | None = None

    def done(self) -> bool:
        """Return True once the task finished (returned or raised) or was cancelled."""
        return self._is_set

    def cancelled(self) -> bool:
        """Return True if the task was cancelled before it started (so it never ran)."""
        return self._state is _CANCELLED

    def cancel(self) -> bool:
        """Cancel the task if it has not started; return True if it is cancelled.

        A task that is running or finished cannot be cancelled (threads cannot be interrupted),
        so this returns False and the task's outcome stands.
        """
        with self._lock:
            if self._state is _CANCELLED:
                return True
            if self._state is not _PENDING:
                return False
            self._state = _CANCELLED
            self._release_call()
            callbacks = self._mark_set_locked()
        self._on_cancel()
        run_callbacks(callbacks)
        return True

    def result(self, timeout: float | None = None) -> T:
        """Block the calling thread until the task is done and return its result.

        Raises the task's own exception (with its original traceback), ``TaskCancelled`` if it
        was cancelled, or ``TimeoutError`` if ``timeout`` seconds pass first. Do not call this
        from an event loop thread (use :meth:`wait`) or from a task of the same scheduler, where
        it can wait forever for a task queued behind the caller.
        """
        if not self._wait_blocking(timeout):
            raise TimeoutError(f"task {self.key} did not finish within {timeout} seconds")
        return self._outcome()

    async def wait(self) -> T:
        """Wait for the task under asyncio or trio and return its result.

        Raises like :meth:`result`. If the awaiting task is cancelled, the handle is cancelled
        too; when the task is already running it finishes anyway and its result is discarded.
        """
        try:
            await self._wait_async()
        except BaseException:
            self.cancel()
            raise
        return self._outcome()

    def run(self) -> Outcome:
        """Run the task on the calling thread, unless it was cancelled, and complete the
        handle with what it returned or raised; how it ended. What a backend's worker calls
        for a task it does not merge. The task's exception is the handle's, not raised here:
        a failing task must not kill its worker."""
        if not self.start():
            return "cancelled"
        try:
            result = self.call()
        except BaseException as exc:
            self.set_exception(exc)
            return "failed"
        self.set_result(result)
        return "completed"

    def call(self) -> T:
        """Call the task's function with its arguments, once :meth:`start` claimed it; what it
        returns or raises. A backend that counts a task before its waiters wake (as
        ``statistics()`` promises) calls this, counts, then completes the handle."""
        result: T = self._fn(*self._args)
        return result

    @property
    def merge(self) -> MergeFn | None:
        """The batch form of the task's function, if it was submitted with one."""
        return self._merge

    @property
    def args(self) -> tuple[Any, ...]:
        """The task's arguments, until it completes (then empty: they may be large)."""
        return self._args

    def start(self) -> bool:
        """Claim the task for running; False if it was cancelled (skip it). A backend calls
        this before it calls the function itself, then :meth:`set_result` or
        :meth:`set_exception`."""
        with self._lock:
            if self._state is not _PENDING:
                return False
            self._state = _RUNNING
            return True

    def set_result(self, result: T) -> None:
        """Complete a started task with its result, waking every waiter."""
        with self._lock:
            self._state = _FINISHED
            self._result = result
            self._release_call()
            callbacks = self._mark_set_locked()
        run_callbacks(callbacks)

    def set_exception(self, exception: BaseException) -> None:
        """Complete a started task with the exception it raised, waking every waiter."""
        with self._lock:
            self._state = _FINISHED
            self._exception = exception
            self._traceback = exception.__traceback__
            self._release_call()
            callbacks = self._mark_set_locked()
        run_callbacks(callbacks)

    def _release_call(self) -> None:
        # Arguments are often large arrays; drop them as soon as they cannot be used. ``_merge``
        # stays: it is how a worker groups a batch, and a cancelled task inside a run of
        # mergeable tasks must not split the run.
        self._fn = _released
        self._args = ()

    def _outcome(self) -> T:
        if self._state is _CANCELLED:
            raise TaskCancelled(f"task {self.key} was cancelled before it started")
        exception = self._exception
        if exception is not None:
            try:
                # Re-raise with the traceback of the failure itself, so repeated result() calls
                # (and handles of one merged call, on other threads) do not grow it.
                raise exception.with_traceback(self._traceback)
            finally:
                # Break the cycle exception -> traceback -> this frame -> exception.
                del exception
        return self._result  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"<TaskHandle {self.key.variable}[{self.key.shard}] {self._state}>"
