"""The ``Scheduler`` interface that every backend implements, and the contract it keeps."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import ClassVar, Self, TypeVar, TypeVarTuple

from ._key import KeyLike
from ._stats import SchedulerStatistics
from ._task import TaskHandle

__all__ = ["Scheduler"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class Scheduler(ABC):
    """Runs a parameter server's per-variable work on threads; backends differ in how.

    Open one with ``open_scheduler(name, workers=N)``. Task functions are expected to spend
    their time in code that releases the GIL (numba ``nogil`` kernels, numpy), which is what
    lets worker threads run in parallel.

    **Exactly once.** A submitted task runs at most once, and exactly once unless it is
    cancelled before it starts. Its handle completes exactly once: with the return value, with
    the exception, or as cancelled.

    **Ordering.** Only ``per_variable`` guarantees that tasks with the same key run one at a
    time in submission order (for submits from different threads: the order in which they took
    the scheduler's lock). ``inline`` runs a task inside ``submit``, so it keeps each caller's
    own order; ``thread_pool`` starts tasks in FIFO order but runs them concurrently;
    ``work_stealing`` promises no order (owners pop LIFO, thieves steal FIFO). Work that must be
    ordered shares a key on ``per_variable``, or the caller chains it.

    **Thread-safety.** ``submit``, ``submit_nowait``, ``statistics`` and every ``TaskHandle``
    method may be called from any thread: the event loop's (they never block, except
    ``TaskHandle.result``, and a submit that runs the task itself: ``inline``'s, and
    ``adaptive``'s of a task keyed ``small``), a plain thread, or a worker running a task that
    spawns sub-tasks. ``run`` and ``TaskHandle.wait`` are awaited from asyncio or trio. A task
    must not block on another task of the same scheduler (``result()``), which can deadlock
    once every worker is waiting, nor close its own scheduler.

    **Cancellation.** ``TaskHandle.cancel()`` on a task that has not started removes it: it
    never runs and waiting on it raises ``TaskCancelled``. A running task cannot be interrupted
    (Python threads cannot be), so ``cancel()`` returns False. When the task awaiting a handle
    is cancelled (an anyio cancel scope, or asyncio/trio cancellation), the handle is cancelled
    too; if it is already running it runs to the end, its result is discarded, and the awaiter
    sees its own cancellation.

    **Errors.** An exception raised by a task is stored in its handle and re-raised to whoever
    waits on it: the same object, with its original traceback, so the task function's frames
    are in it. A failing task never kills a worker; the worker moves on to the next task. The
    scheduler's own errors are ``SchedulerError`` subclasses: ``SchedulerClosed``,
    ``SchedulerBusy`` and ``TaskCancelled``.

    **Shutdown** (``close``, ``aclose``, or leaving a ``with``/``async with`` block):

    1. Stop accepting: from then on ``submit`` raises ``SchedulerClosed``, from every thread,
       workers included.
    2. Drain queued work (the default: every accepted task runs), or, with
       ``cancel_pending=True``, cancel it: every handle that has not started completes as
       cancelled and raises ``TaskCancelled``. Nothing is silently lost either way.
    3. Join the workers, which exit once the queues are empty; running tasks finish first,
       those running in their submitters on other threads too.

    Closing is idempotent: a second call waits for the first and may turn a drain into a
    cancel. A cancelled ``aclose`` cancels pending work and still waits, shielded, for running
    tasks, so no worker outlives it. A ``with`` block drains on a normal exit and cancels
    pending work when the block raises, since nobody is left to read those results.
    """

    name: ClassVar[str]
    """The backend's name in ``SCHEDULER_NAMES``."""

    @abstractmethod
    def submit(
        self,
        key: KeyLike,
        fn: Callable[[*Ts], T],
        /,
        *args: *Ts,
        merge: Callable[[Sequence[tuple[*Ts]]], Sequence[T]] | None = None,
    ) -> TaskHandle[T]:
        """Queue ``fn(*args)`` under ``key`` and return its handle without blocking (a backend
        that runs the task in its submitter returns it done).

        ``key`` is a ``TaskKey(variable, shard)`` or a variable name (shard 0). ``submit``
        ignores ``max_pending`` (it is for callers that bound their own in-flight work); use
        :meth:`submit_nowait` where overload should be refused. Raises ``SchedulerClosed``
        once closing started.

        **Merging (opt-in).** ``merge`` is a batch version of ``fn``: given the argument tuples
        of several calls, it returns one result per call, in order, equal to what ``fn`` would
        have returned for each (for example: concatenate the signs of several lookups, run one
        kernel, split the rows). A backend that drains a key's queue in batches
        (``per_variable``) may replace consecutive queued tasks of that key whose ``merge`` is
        the same object with one ``merge`` call; each handle still gets its own result. If
        ``merge`` raises, every task of that call fails with the exception; returning the
        wrong number of results fails them with ``ValueError``. Other backends call ``fn`` once
        per task, so a task behaves the same whether or not it was merged.
        """

    @abstractmethod
    def submit_nowait(
        self,
        key: KeyLike,
        fn: Callable[[*Ts], T],
        /,
        *args: *Ts,
        merge: Callable[[Sequence[tuple[*Ts]]], Sequence[T]] | None = None,
    ) -> TaskHandle[T]:
        """Like :meth:`submit`, but raise ``SchedulerBusy`` when ``max_pending`` tasks wait.

        Without a ``max_pending`` option this never raises ``SchedulerBusy``.
        """

    @abstractmethod
    async def run(
        self,
        key: KeyLike,
        fn: Callable[[*Ts], T],
        /,
        *args: *Ts,
        merge: Callable[[Sequence[tuple[*Ts]]], Sequence[T]] | None = None,
    ) -> T:
        """Submit ``fn(*args)`` and wait for its result under asyncio or trio.

        The event loop is never blocked (except by ``inline``, which runs ``fn`` right here:
        it is the baseline that dispatch overhead is measured against, and by ``adaptive`` for
        a task keyed ``small``) and no thread is spent on the wait. Cancelling the caller
        cancels the task as ``TaskHandle.wait`` describes.
        """

    @abstractmethod
    def statistics(self) -> SchedulerStatistics:
        """Return counters, per-worker busy time and latency histograms, read at one moment."""

    @property
    @abstractmethod
    def closed(self) -> bool:
        """True once closing has started (``submit`` raises ``SchedulerClosed``)."""

    @abstractmethod
    def close(self, *, cancel_pending: bool = False, timeout: float | None = None) -> None:
        """Shut down as the class docstring describes, blocking the calling thread.

        Raises ``TimeoutError`` if tasks still run after ``timeout`` seconds (the
        scheduler keeps closing; call ``close`` again to keep waiting). Use :meth:`aclose` from
        async code, and never call either from one of this scheduler's tasks.
        """

    @abstractmethod
    async def aclose(self, *, cancel_pending: bool = False) -> None:
        """Shut down as the class docstring describes, without blocking the event loop."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(cancel_pending=exc is not None)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose(cancel_pending=exc is not None)
