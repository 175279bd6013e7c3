"""The ``Scheduler`` contract as checks that any backend, built in or a plugin, can be run through.

Each ``check_*`` is a coroutine function: await it from an async test on asyncio or on trio
(anyio's pytest plugin runs a test on both), or run it with ``anyio.run(check, open_backend)``.
It takes a factory rather than a scheduler because the contract is about a backend's whole life
(opening, shutdown, submitting after close), so most checks open several fresh schedulers::

    @pytest.mark.anyio
    async def test_my_backend_keeps_the_contract() -> None:
        await check_scheduler(lambda **options: open_scheduler("mine", workers=2, **options))

The factory opens the backend under test with at least 2 workers, passing on the keyword
``options`` it is called with (only :func:`check_backpressure` passes one: ``max_pending``).
Every scheduler a check opens is closed before it returns, passed or failed. A broken promise
raises :class:`ContractViolation` naming the backend and the promise; exceptions a backend
raises unexpectedly propagate as they are.

What is checked is what the :class:`~sniper.scheduler.Scheduler` docstring promises: exception
types, outcomes and counters, not the wording of sniper's own messages. A backend that runs
every task inside ``submit`` (as ``inline`` does) never queues anything, so the checks that need
a queued task (cancelling one, draining, backpressure) are skipped for it; which kind a backend
is, is found out by submitting a task and looking at which thread ran it.

hypothesis (a development dependency) is imported by the two checks that use it, when they
run, so importing this module needs only sniper's own dependencies.
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Final, Protocol, TypeVar

import anyio
import anyio.to_thread

from sniper.scheduler import (
    Scheduler,
    SchedulerBusy,
    SchedulerClosed,
    TaskCancelled,
    TaskHandle,
    TaskKey,
)

from ._common import ContractViolation, require, run_property

__all__ = [
    "WAIT",
    "Blockers",
    "OpenBackend",
    "check_backpressure",
    "check_cancellation",
    "check_errors",
    "check_exactly_once",
    "check_merge",
    "check_per_key_order",
    "check_scheduler",
    "check_shutdown",
    "check_statistics",
]

T = TypeVar("T")

WAIT: Final = 10.0
"""Seconds any one wait in a check may take before the check fails instead of hanging."""

PROPERTY_EXAMPLES: Final = 25
"""Generated workloads per hypothesis-driven check, by default: each opens a fresh scheduler."""


class OpenBackend(Protocol):
    """Opens a fresh scheduler of the backend under test, with at least 2 workers.

    Called with no arguments, or with ``max_pending=`` by :func:`check_backpressure`; for a
    backend opened by name, ``lambda **options: open_scheduler(name, workers=2, **options)``.
    """

    def __call__(self, **options: Any) -> Scheduler: ...


class _Caught:
    """The exception a :func:`_raises` block raised, readable once the block has exited."""

    def __init__(self) -> None:
        self._value: Exception | None = None

    @property
    def value(self) -> Exception:
        if self._value is None:
            raise RuntimeError("the exception is known only after the block has exited")
        return self._value


@contextlib.contextmanager
def _raises(expected: type[Exception], what: str) -> Iterator[_Caught]:
    """Require the block to raise ``expected``; a different ``Exception`` is a violation.

    Only ``Exception`` subclasses are examined, so an event loop's cancellation (a
    ``BaseException`` under trio) always passes through untouched.
    """
    caught = _Caught()
    try:
        yield caught
    except expected as exc:
        caught._value = exc
    except Exception as exc:
        raise ContractViolation(
            f"{what} raised {type(exc).__name__}: {exc}, expected {expected.__name__}"
        ) from exc
    else:
        raise ContractViolation(f"{what} did not raise {expected.__name__}")


@contextlib.contextmanager
def _opened(open_backend: OpenBackend, **options: Any) -> Iterator[Scheduler]:
    """A fresh scheduler, closed (cancelling leftovers) however the block ends.

    When the block fails, an error from closing is dropped so that the check's own failure is
    what gets reported.
    """
    scheduler = open_backend(**options)
    try:
        yield scheduler
    except BaseException:
        with contextlib.suppress(Exception):
            scheduler.close(cancel_pending=True, timeout=WAIT)
        raise
    scheduler.close(cancel_pending=True, timeout=WAIT)


def _queues_tasks(open_backend: OpenBackend) -> bool:
    """Whether the backend queues tasks, rather than running each inside ``submit``."""
    with _opened(open_backend) as scheduler:
        handle = scheduler.submit("probe", threading.get_ident)
        runs_inside_submit = handle.done() and handle.result(timeout=0) == threading.get_ident()
    return not runs_inside_submit


async def _eventually(condition: Callable[[], bool]) -> None:
    """Poll briefly for a condition nobody can be notified of; fail after :data:`WAIT`."""
    with anyio.fail_after(WAIT):
        while not condition():
            await anyio.sleep(0.001)


async def _within(awaitable: Awaitable[T]) -> T:
    with anyio.fail_after(WAIT):
        return await awaitable


def _double(value: int) -> int:
    return 2 * value


def _explode(value: int) -> int:
    raise ValueError(f"boom {value}")


class Blockers:
    """Occupies every worker of a scheduler with a task that waits, so later tasks queue.

    One blocker per worker that ``statistics()`` reports, each under its own key. The blockers
    return after :meth:`release`, or after :meth:`release_when_done`'s handle completes
    (deliberately a task waiting on another task: safe here because that handle is cancelled by
    close, never run). Only for backends that queue tasks: on ``inline`` the first blocker
    would block its submitter.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self._gate = threading.Event()
        self._started = threading.Semaphore(0)
        self._then: Callable[[], object] = lambda: None
        count = scheduler.statistics().workers
        self.handles: list[TaskHandle[None]] = [
            scheduler.submit(f"blocker-{index}", self._block) for index in range(count)
        ]
        for index in range(count):
            require(
                self._started.acquire(timeout=WAIT),
                f"{scheduler.name}: only {index} of {count} blockers started within {WAIT} s; "
                "a backend must run tasks of distinct keys on every one of its workers",
            )

    def _block(self) -> None:
        self._started.release()
        require(self._gate.wait(WAIT), "the blockers were never released")
        self._then()

    def release(self) -> None:
        """Let every blocker return."""
        self._gate.set()

    def release_when_done(self, handle: TaskHandle[Any]) -> None:
        """Let the blockers return once ``handle`` completes (e.g. is cancelled by close)."""
        self._then = lambda: _wait_quietly(handle)
        self._gate.set()


def _wait_quietly(handle: TaskHandle[Any]) -> None:
    with contextlib.suppress(TaskCancelled):
        handle.result(timeout=WAIT)


def _in_threads(count: int, work: Callable[[int], None]) -> None:
    """Run ``work(0)`` ... ``work(count - 1)`` on threads at once; re-raise the first failure."""
    failures: list[BaseException] = []

    def run(index: int) -> None:
        try:
            work(index)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
        require(not thread.is_alive(), f"a submitting thread was still running after {WAIT} s")
    if failures:
        raise failures[0]


# -- exactly once ------------------------------------------------------------------------------


async def check_exactly_once(
    open_backend: OpenBackend, *, examples: int = PROPERTY_EXAMPLES
) -> None:
    """Every accepted task runs exactly once and its handle gets its outcome.

    Tasks are submitted from the event loop and from 4 threads at once, from inside tasks
    (sub-tasks), and in ``examples`` hypothesis-generated mixes of keys, submitting threads and
    failing tasks; afterwards ``statistics()`` must count each task once.
    """
    with _opened(open_backend) as scheduler:
        await _from_loop_and_threads(scheduler)
    with _opened(open_backend) as scheduler:
        await _sub_tasks(scheduler)

    from hypothesis import strategies as st

    plans = st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(0, 3), st.booleans()),
        max_size=40,
    )
    run_property(plans, examples, lambda plan: _run_plan(open_backend, plan))


async def _from_loop_and_threads(scheduler: Scheduler) -> None:
    name = scheduler.name
    calls: Counter[int] = Counter()
    lock = threading.Lock()

    def task(task_id: int) -> int:
        with lock:
            calls[task_id] += 1
        return task_id

    def submit_from_thread(first: int, count: int) -> None:
        ids = range(first, first + count)
        handles = [scheduler.submit(TaskKey(f"var{i % 7}", i % 3), task, i) for i in ids]
        results = [handle.result(timeout=WAIT) for handle in handles]
        require(results == list(ids), f"{name}: tasks submitted from a thread got wrong results")

    async def await_from_loop(task_id: int) -> None:
        result = await scheduler.run(f"var{task_id % 5}", task, task_id)
        require(result == task_id, f"{name}: run() returned {result}, expected {task_id}")

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            for thread in range(4):
                tg.start_soon(
                    anyio.to_thread.run_sync, submit_from_thread, 1000 + 300 * thread, 300
                )
            for task_id in range(300):
                tg.start_soon(await_from_loop, task_id)
    expected = [*range(300), *range(1000, 2200)]
    _require_once(name, calls, expected)
    stats = scheduler.statistics()
    require(
        stats.submitted == stats.completed == len(expected),
        f"{name}: statistics count {stats.submitted} submitted and {stats.completed} completed "
        f"tasks, expected {len(expected)} of each",
    )


def _require_once(name: str, calls: Counter[int], expected: Sequence[int]) -> None:
    never = sorted(set(expected) - set(calls))
    require(not never, f"{name}: {len(never)} tasks never ran, the first: {never[:5]}")
    again = sorted(task for task, count in calls.items() if count != 1)
    require(not again, f"{name}: tasks ran more than once: {again[:5]}")
    extra = sorted(set(calls) - set(expected))
    require(not extra, f"{name}: tasks that were never submitted ran: {extra[:5]}")


async def _sub_tasks(scheduler: Scheduler) -> None:
    def parent(n: int) -> list[TaskHandle[int]]:
        return [scheduler.submit(TaskKey("child", i), _double, i) for i in range(n)]

    with anyio.fail_after(WAIT):
        children = await scheduler.run("parent", parent, 20)
        results = [await child.wait() for child in children]
    require(
        results == [2 * i for i in range(20)],
        f"{scheduler.name}: sub-tasks submitted from inside a task got wrong results: {results}",
    )


def _run_plan(open_backend: OpenBackend, plan: Sequence[tuple[int, int, int, bool]]) -> None:
    """Submit ``plan``'s tasks ``(thread, variable, shard, fails)`` and check every outcome."""
    calls: Counter[int] = Counter()
    lock = threading.Lock()

    def task(task_id: int, fails: bool) -> int:
        with lock:
            calls[task_id] += 1
        return _explode(task_id) if fails else task_id

    with _opened(open_backend) as scheduler:
        name = scheduler.name
        handles: dict[int, TaskHandle[int]] = {}

        def submit_share(thread: int) -> None:
            for task_id, (owner, variable, shard, fails) in enumerate(plan):
                if owner == thread:
                    # Shard 0 as a plain name, the others as a TaskKey: both spellings of a key.
                    key = TaskKey(f"v{variable}", shard) if shard else f"v{variable}"
                    handles[task_id] = scheduler.submit(key, task, task_id, fails)

        _in_threads(3, submit_share)
        for task_id, (*_, fails) in enumerate(plan):
            if fails:
                with _raises(ValueError, f"{name}: waiting on failing task {task_id}") as caught:
                    handles[task_id].result(timeout=WAIT)
                require(str(caught.value) == f"boom {task_id}", f"{name}: wrong exception")
            else:
                result = handles[task_id].result(timeout=WAIT)
                require(result == task_id, f"{name}: task {task_id} returned {result}")
        scheduler.close(timeout=WAIT)
        _require_once(name, calls, range(len(plan)))
        stats = scheduler.statistics()
        failing = sum(fails for *_, fails in plan)
        require(
            (stats.submitted, stats.completed, stats.failed)
            == (len(plan), len(plan) - failing, failing),
            f"{name}: statistics count {stats.submitted} submitted, {stats.completed} completed "
            f"and {stats.failed} failed; expected {len(plan)}, {len(plan) - failing}, {failing}",
        )


# -- per-key order -----------------------------------------------------------------------------


async def check_per_key_order(
    open_backend: OpenBackend, *, examples: int = PROPERTY_EXAMPLES
) -> None:
    """Tasks of one key run one at a time, in submission order: ``per_variable``'s promise.

    Not every backend makes it (``thread_pool`` runs a key's tasks concurrently), so this is
    not part of :func:`check_scheduler` unless asked for. Submission order across threads is
    the order in which submits take the scheduler's lock; the check numbers tasks under its
    own lock around ``submit`` to pin that order down. Runs 3 threads submitting 200 tasks each
    over 5 keys, then ``examples`` hypothesis-generated plans.
    """
    with _opened(open_backend) as scheduler:
        plan = [(thread, (i + thread) % 5) for thread in range(3) for i in range(200)]
        _run_ordered(scheduler, plan)

    from hypothesis import strategies as st

    plans = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), max_size=60)

    def run(plan: Sequence[tuple[int, int]]) -> None:
        with _opened(open_backend) as scheduler:
            _run_ordered(scheduler, plan)

    run_property(plans, examples, run)


def _run_ordered(scheduler: Scheduler, plan: Sequence[tuple[int, int]]) -> None:
    """Submit ``(thread, shard)`` tasks of one variable and check each key's order."""
    order_lock = threading.Lock()
    submitted: dict[TaskKey, list[int]] = defaultdict(list)
    ran: dict[TaskKey, list[int]] = defaultdict(list)
    running: set[TaskKey] = set()
    overlaps: list[TaskKey] = []
    sequence = iter(range(len(plan)))
    handles: list[TaskHandle[None]] = []

    def task(key: TaskKey, seq: int) -> None:
        if key in running:
            overlaps.append(key)
        running.add(key)
        time.sleep(0)  # let another worker try to run the same key
        ran[key].append(seq)
        running.discard(key)

    def submit_share(thread: int) -> None:
        for owner, shard in plan:
            if owner == thread:
                key = TaskKey("var", shard)
                with order_lock:
                    seq = next(sequence)
                    submitted[key].append(seq)
                    handles.append(scheduler.submit(key, task, key, seq))

    _in_threads(3, submit_share)
    for handle in handles:
        handle.result(timeout=WAIT)
    name = scheduler.name
    require(not overlaps, f"{name}: tasks of {sorted(set(overlaps))} ran at the same time")
    for key, order in submitted.items():
        require(
            ran[key] == order,
            f"{name}: the tasks of {key} were submitted as {order} but ran as {ran[key]}",
        )


# -- errors ------------------------------------------------------------------------------------


async def check_errors(open_backend: OpenBackend) -> None:
    """A task's exception reaches every waiter as the same object, and workers survive it.

    Also: the traceback still holds the task function's frame, and a key that is neither a
    variable name nor a ``TaskKey`` is refused with ``TypeError``.
    """
    with _opened(open_backend) as scheduler:
        name = scheduler.name
        workers = scheduler.statistics().workers
        for value in range(2 * workers):
            with _raises(ValueError, f"{name}: awaiting a failing task") as caught:
                await _within(scheduler.run(f"k{value}", _explode, value))
            require(
                str(caught.value) == f"boom {value}",
                f"{name}: awaiting a failing task raised {caught.value!r}, not its own error",
            )
            frames = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
            require(
                _explode.__name__ in frames,
                f"{name}: a task's exception lost the task function's frame: {frames}",
            )
        handle = scheduler.submit("k", _explode, 99)
        with _raises(ValueError, f"{name}: result() of a failed task") as first:
            handle.result(timeout=WAIT)
        with _raises(ValueError, f"{name}: result() of a failed task, again") as second:
            handle.result(timeout=WAIT)
        require(
            first.value is second.value and str(first.value) == "boom 99",
            f"{name}: every wait on a failed task must re-raise the task's own exception",
        )
        results = [await _within(scheduler.run(f"k{i}", _double, i)) for i in range(20)]
        require(
            results == [2 * i for i in range(20)],
            f"{name}: after failing tasks, later tasks got wrong results: {results}",
        )
        stats = scheduler.statistics()
        require(
            (stats.failed, stats.completed) == (2 * workers + 1, 20),
            f"{name}: statistics count {stats.failed} failed and {stats.completed} completed "
            f"tasks, expected {2 * workers + 1} and 20",
        )
        with _raises(TypeError, f"{name}: submit under the key ('v', 1)"):
            scheduler.submit(("v", 1), _double, 1)  # type: ignore[arg-type]


# -- cancellation ------------------------------------------------------------------------------


async def check_cancellation(open_backend: OpenBackend) -> None:
    """A queued task can be cancelled and never runs; cancelling its awaiter cancels it too.

    A running task cannot be cancelled: cancelling its awaiter discards the result, and the
    task runs to the end. (The queued-task parts are skipped for a backend that never queues.)
    """
    queues = _queues_tasks(open_backend)
    if queues:
        with _opened(open_backend) as scheduler:
            await _cancel_a_queued_task(scheduler)
        with _opened(open_backend) as scheduler:
            await _cancel_the_awaiter_of_a_queued_task(scheduler)
    with _opened(open_backend) as scheduler:
        await _cancel_the_awaiter_of_a_running_task(scheduler, queues=queues)


async def _cancel_a_queued_task(scheduler: Scheduler) -> None:
    name = scheduler.name
    ran = threading.Event()
    blockers = Blockers(scheduler)
    victim = scheduler.submit("victim", ran.set)
    require(victim.cancel(), f"{name}: cancel() of a queued task returned False")
    require(victim.cancel(), f"{name}: cancelling a cancelled task again must return True")
    require(victim.done() and victim.cancelled(), f"{name}: a cancelled task is not done")
    blockers.release()
    await _within(scheduler.aclose())
    require(not ran.is_set(), f"{name}: a task cancelled before it started ran anyway")
    with _raises(TaskCancelled, f"{name}: result() of a cancelled task") as caught:
        victim.result(timeout=0)
    require(
        f"task {TaskKey('victim')}" in str(caught.value),
        f"{name}: TaskCancelled should name the task's key, got {caught.value}",
    )
    with _raises(TaskCancelled, f"{name}: awaiting a cancelled task"):
        await victim.wait()
    cancelled = scheduler.statistics().cancelled
    require(cancelled == 1, f"{name}: statistics count {cancelled} cancelled tasks, not 1")


async def _cancel_the_awaiter_of_a_queued_task(scheduler: Scheduler) -> None:
    name = scheduler.name
    ran = threading.Event()
    blockers = Blockers(scheduler)
    handle = scheduler.submit("victim", ran.set)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await handle.wait()
    require(scope.cancelled_caught, f"{name}: a cancelled wait() did not raise cancellation")
    require(handle.cancelled(), f"{name}: cancelling the awaiter of a queued task must cancel it")
    with anyio.move_on_after(0.01) as scope:
        await scheduler.run("victim", ran.set)
    require(scope.cancelled_caught, f"{name}: run() of a queued task ignored its cancel scope")
    blockers.release()
    await _within(scheduler.aclose())
    require(not ran.is_set(), f"{name}: a task whose awaiter was cancelled ran anyway")
    cancelled = scheduler.statistics().cancelled
    require(cancelled == 2, f"{name}: statistics count {cancelled} cancelled tasks, not 2")


async def _cancel_the_awaiter_of_a_running_task(scheduler: Scheduler, *, queues: bool) -> None:
    name = scheduler.name
    started, finish = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        require(finish.wait(WAIT), "the running task was never let finish")
        return "done"

    if not queues:
        finish.set()  # the task runs inside submit, which must not block forever
    handle = scheduler.submit("k", slow)
    require(started.wait(WAIT), f"{name}: a submitted task did not start within {WAIT} s")
    with anyio.CancelScope() as scope:
        scope.cancel()
        await handle.wait()
    require(scope.cancelled_caught, f"{name}: a cancelled wait() did not raise cancellation")
    require(not handle.cancel(), f"{name}: cancel() of a running task must return False")
    finish.set()
    result = handle.result(timeout=WAIT)
    require(result == "done", f"{name}: a running task whose awaiter left returned {result!r}")
    require(not handle.cancelled(), f"{name}: a task that ran reports itself cancelled")


# -- shutdown ----------------------------------------------------------------------------------


async def check_shutdown(open_backend: OpenBackend) -> None:
    """Closing stops accepting, then drains (or cancels) queued work, then joins the workers.

    Covers ``with`` and ``async with`` use, submitting after close, idempotent close, draining,
    ``cancel_pending=True``, a cancelled ``aclose``, a ``with`` block left by an exception,
    and ``close(timeout=...)`` while a task still runs.
    """
    await _use_as_context_managers(open_backend)
    if not _queues_tasks(open_backend):
        return
    with _opened(open_backend) as scheduler:
        await _close_drains_queued_work(scheduler)
    with _opened(open_backend) as scheduler:
        await _close_can_cancel_queued_work(scheduler)
    with _opened(open_backend) as scheduler:
        await _a_cancelled_aclose_cancels_and_joins(scheduler)
    _leaving_a_with_block_by_an_exception(open_backend)
    with _opened(open_backend) as scheduler:
        _close_times_out_while_a_task_runs(scheduler)


async def _use_as_context_managers(open_backend: OpenBackend) -> None:
    with open_backend() as scheduler:
        name = scheduler.name
        require(scheduler.submit("k", pow, 2, 10).result(timeout=WAIT) == 1024, f"{name}: pow")
        result = scheduler.submit_nowait(TaskKey("k", 1), _double, 21).result(timeout=WAIT)
        require(result == 42, f"{name}: submit_nowait returned {result}, expected 42")
    require(scheduler.closed, f"{name}: leaving a with block did not close the scheduler")
    with _raises(SchedulerClosed, f"{name}: submit after a with block"):
        scheduler.submit("k", _double, 1)

    with anyio.fail_after(WAIT):
        async with open_backend() as scheduler:
            result = await scheduler.run("k", _double, 4)
            require(result == 8, f"{name}: run() returned {result}, expected 8")
    require(scheduler.closed, f"{name}: leaving an async with block did not close it")
    with _raises(SchedulerClosed, f"{name}: submit after close"):
        scheduler.submit("k", _double, 1)
    with _raises(SchedulerClosed, f"{name}: submit_nowait after close"):
        scheduler.submit_nowait("k", _double, 1)
    with _raises(SchedulerClosed, f"{name}: run after close"):
        await scheduler.run("k", _double, 1)
    await _within(scheduler.aclose())  # closing again is a no-op, async or sync
    scheduler.close(timeout=WAIT)


async def _close_drains_queued_work(scheduler: Scheduler) -> None:
    name = scheduler.name
    blockers = Blockers(scheduler)
    queued = [scheduler.submit(TaskKey("q", i % 4), _double, i) for i in range(50)]
    pending = scheduler.statistics().pending
    require(pending == 50, f"{name}: statistics count {pending} pending tasks, not 50")
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(scheduler.aclose)
            await _eventually(lambda: scheduler.closed)
            with _raises(SchedulerClosed, f"{name}: submit while closing"):
                scheduler.submit("late", _double, 1)
            blockers.release()
    results = [handle.result(timeout=0) for handle in queued]
    require(
        results == [2 * i for i in range(50)],
        f"{name}: close must run every queued task, got {results}",
    )
    stats = scheduler.statistics()
    total = 50 + len(blockers.handles)
    require(
        stats.submitted == stats.completed == total,
        f"{name}: after a drain, statistics count {stats.submitted} submitted and "
        f"{stats.completed} completed tasks, expected {total} of each",
    )
    require(
        (stats.pending, stats.running, stats.closed) == (0, 0, True),
        f"{name}: after a drain, pending={stats.pending} running={stats.running} "
        f"closed={stats.closed}",
    )


async def _close_can_cancel_queued_work(scheduler: Scheduler) -> None:
    name = scheduler.name
    blockers = Blockers(scheduler)
    queued = [scheduler.submit(TaskKey("q", i % 4), _double, i) for i in range(50)]
    blockers.release_when_done(queued[-1])
    await _within(scheduler.aclose(cancel_pending=True))
    for index, handle in enumerate(queued):
        require(handle.cancelled(), f"{name}: aclose(cancel_pending=True) ran queued task {index}")
        with _raises(TaskCancelled, f"{name}: result() of a task cancelled by close"):
            handle.result(timeout=0)
    require(
        all(handle.result(timeout=0) is None for handle in blockers.handles),
        f"{name}: the tasks running at close did not complete",
    )
    stats = scheduler.statistics()
    require(
        stats.submitted == stats.completed + stats.cancelled and stats.cancelled == 50,
        f"{name}: statistics count {stats.submitted} submitted, {stats.completed} completed "
        f"and {stats.cancelled} cancelled tasks; expected 50 cancelled and the rest completed",
    )


async def _a_cancelled_aclose_cancels_and_joins(scheduler: Scheduler) -> None:
    name = scheduler.name
    blockers = Blockers(scheduler)
    queued = [scheduler.submit(TaskKey("q", i % 4), _double, i) for i in range(20)]
    blockers.release_when_done(queued[-1])
    with anyio.move_on_after(0.05) as scope:
        await scheduler.aclose()
    require(scope.cancelled_caught, f"{name}: aclose() finished a drain that cannot finish")
    require(
        all(handle.cancelled() for handle in queued),
        f"{name}: a cancelled aclose() must cancel the queued tasks",
    )
    require(
        all(handle.done() for handle in blockers.handles),
        f"{name}: a cancelled aclose() returned before the running tasks finished",
    )
    running = scheduler.statistics().running
    require(running == 0, f"{name}: {running} tasks still run after a cancelled aclose()")


def _leaving_a_with_block_by_an_exception(open_backend: OpenBackend) -> None:
    scheduler = open_backend()
    name = scheduler.name
    queued: list[TaskHandle[int]] = []
    with _raises(KeyError, f"{name}: a with block whose body raises"), scheduler:
        blockers = Blockers(scheduler)
        queued.extend(scheduler.submit("q", _double, i) for i in range(10))
        blockers.release_when_done(queued[-1])
        raise KeyError("the body failed")
    require(
        all(handle.cancelled() for handle in queued),
        f"{name}: leaving a with block by an exception must cancel the queued tasks",
    )


def _close_times_out_while_a_task_runs(scheduler: Scheduler) -> None:
    name = scheduler.name
    blockers = Blockers(scheduler)
    with _raises(TimeoutError, f"{name}: close(timeout=0.01) while tasks run"):
        scheduler.close(timeout=0.01)
    blockers.release()
    scheduler.close(timeout=WAIT)
    require(
        all(handle.done() for handle in blockers.handles),
        f"{name}: close() returned before the running tasks finished",
    )


# -- backpressure, merging, statistics ---------------------------------------------------------


async def check_backpressure(open_backend: OpenBackend) -> None:
    """With ``max_pending=2``, ``submit_nowait`` refuses a third pending task; ``submit`` never.

    Opens the backend with ``open_backend(max_pending=2)``. Skipped for a backend that never
    queues (nothing is ever pending there).
    """
    if not _queues_tasks(open_backend):
        return
    with _opened(open_backend, max_pending=2) as scheduler:
        name = scheduler.name
        blockers = Blockers(scheduler)
        queued = [scheduler.submit_nowait("q", _double, i) for i in range(2)]
        with _raises(SchedulerBusy, f"{name}: submit_nowait with max_pending=2 tasks pending"):
            scheduler.submit_nowait("q", _double, 2)
        queued.append(scheduler.submit("q", _double, 2))  # submit does not apply the bound
        blockers.release()
        results = [handle.result(timeout=WAIT) for handle in queued]
        require(results == [0, 2, 4], f"{name}: bounded submits returned {results}")


async def check_merge(open_backend: OpenBackend) -> None:
    """Tasks submitted with ``merge=`` get the results ``fn`` alone would have given them.

    Submitted both as they come and queued up behind a task that holds their key, which is
    when a backend that merges (``per_variable``) replaces them with merged calls.
    """

    def add_all(calls: Sequence[tuple[int, int]]) -> list[int]:
        return [a + b for a, b in calls]

    queues = _queues_tasks(open_backend)
    with _opened(open_backend) as scheduler:
        name = scheduler.name
        for held in (False, True) if queues else (False,):
            gate = threading.Event()
            holder = scheduler.submit("k", gate.wait, WAIT) if held else None
            handles = [scheduler.submit("k", int.__add__, i, 1, merge=add_all) for i in range(40)]
            gate.set()
            results = [handle.result(timeout=WAIT) for handle in handles]
            require(
                results == [i + 1 for i in range(40)],
                f"{name}: merged tasks{' queued behind a held key' if held else ''} "
                f"returned {results}",
            )
            if holder is not None:
                require(holder.result(timeout=WAIT), f"{name}: the holding task was not let go")


async def check_statistics(open_backend: OpenBackend) -> None:
    """After close, ``statistics()`` accounts for every task exactly once.

    ``submitted == completed + failed + cancelled``, nothing pending or running, one queue-wait
    and one run-time sample per task that ran, one busy time per worker, utilizations in
    [0, 1], and ``backend`` is the scheduler's ``name``.
    """
    queues = _queues_tasks(open_backend)
    with _opened(open_backend) as scheduler:
        name = scheduler.name
        handles = [
            scheduler.submit(f"k{i % 3}", _explode if i % 5 == 0 else _double, i) for i in range(60)
        ]
        if queues:
            blockers = Blockers(scheduler)
            handles.append(scheduler.submit("never", _double, 0))
            require(handles[-1].cancel(), f"{name}: cancel() of a queued task returned False")
            blockers.release()
        scheduler.close(timeout=WAIT)
        stats = scheduler.statistics()
    ran = stats.completed + stats.failed
    promises = [
        (stats.submitted == ran + stats.cancelled, "submitted == completed + failed + cancelled"),
        (stats.failed == 12, "12 tasks failed"),
        (stats.cancelled == (1 if queues else 0), f"{1 if queues else 0} tasks cancelled"),
        ((stats.pending, stats.running) == (0, 0), "nothing pending or running after close"),
        (stats.queue_wait.count == ran, "one queue_wait sample per task that ran"),
        (stats.run_time.count == ran, "one run_time sample per task that ran"),
        (len(stats.busy_seconds) == stats.workers, "one busy_seconds entry per worker"),
        (all(0.0 <= u <= 1.0 for u in stats.utilization()), "utilization within [0, 1]"),
        (stats.backend == name, f"backend == {name!r}"),
    ]
    broken = [promise for kept, promise in promises if not kept]
    require(not broken, f"{name}: statistics broke: {'; '.join(broken)}; got {stats}")


async def check_scheduler(
    open_backend: OpenBackend, *, ordered: bool = False, examples: int = PROPERTY_EXAMPLES
) -> None:
    """Every check above, in turn; ``ordered=True`` adds :func:`check_per_key_order`."""
    await check_exactly_once(open_backend, examples=examples)
    await check_errors(open_backend)
    await check_cancellation(open_backend)
    await check_shutdown(open_backend)
    await check_backpressure(open_backend)
    await check_merge(open_backend)
    await check_statistics(open_backend)
    if ordered:
        await check_per_key_order(open_backend, examples=examples)
