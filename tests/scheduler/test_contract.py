"""The ``Scheduler`` contract on every built-in backend, under asyncio and trio and from threads.

The checks themselves live in :mod:`sniper._contracts` so that a plugin backend can be put
through the same ones (``tests/scheduler/test_plugins.py`` does). This module runs them on
sniper's backends, shows on deliberately broken backends that they catch what they claim to,
and checks the wording of sniper's own errors, which the contract leaves to each backend.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, TypeVarTuple

import anyio
import pytest

from sniper._contracts import (
    ContractViolation,
    OpenBackend,
    check_backpressure,
    check_cancellation,
    check_errors,
    check_exactly_once,
    check_merge,
    check_per_key_order,
    check_shutdown,
    check_statistics,
)
from sniper.scheduler import (
    KeyLike,
    Scheduler,
    SchedulerBusy,
    SchedulerClosed,
    SchedulerStatistics,
    TaskHandle,
    open_scheduler,
)

from ._helpers import WAIT, Blockers
from .conftest import WORKERS

pytestmark = pytest.mark.timeout(60)

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


@pytest.fixture
def open_backend(scheduler_name: str) -> OpenBackend:
    return functools.partial(open_scheduler, scheduler_name, workers=WORKERS[scheduler_name])


# -- the contract, on every backend ------------------------------------------------------------


@pytest.mark.anyio
async def test_every_task_runs_exactly_once(open_backend: OpenBackend) -> None:
    await check_exactly_once(open_backend)


@pytest.mark.anyio
async def test_errors_reach_the_waiter_and_workers_survive(open_backend: OpenBackend) -> None:
    await check_errors(open_backend)


@pytest.mark.anyio
async def test_cancellation(open_backend: OpenBackend) -> None:
    await check_cancellation(open_backend)


@pytest.mark.anyio
async def test_shutdown(open_backend: OpenBackend) -> None:
    await check_shutdown(open_backend)


@pytest.mark.anyio
async def test_submit_nowait_refuses_beyond_max_pending(open_backend: OpenBackend) -> None:
    await check_backpressure(open_backend)


@pytest.mark.anyio
async def test_merge_never_changes_results(open_backend: OpenBackend) -> None:
    await check_merge(open_backend)


@pytest.mark.anyio
async def test_statistics_add_up_after_close(open_backend: OpenBackend) -> None:
    await check_statistics(open_backend)


@pytest.mark.anyio
async def test_per_variable_runs_each_key_in_submission_order() -> None:
    await check_per_key_order(functools.partial(open_scheduler, "per_variable", workers=3))


# -- the checks catch broken backends ----------------------------------------------------------


class Wrapper(Scheduler):
    """A thread pool behind the public ``Scheduler`` API; each subclass breaks one promise."""

    name = "wrapper"

    def __init__(self, **options: Any) -> None:
        self.inner = open_scheduler("thread_pool", workers=2, **options)

    def submit(
        self,
        key: KeyLike,
        fn: Callable[[*Ts], T],
        /,
        *args: *Ts,
        merge: Callable[[Sequence[tuple[*Ts]]], Sequence[T]] | None = None,
    ) -> TaskHandle[T]:
        return self.inner.submit(key, fn, *args, merge=merge)

    def submit_nowait(
        self,
        key: KeyLike,
        fn: Callable[[*Ts], T],
        /,
        *args: *Ts,
        merge: Callable[[Sequence[tuple[*Ts]]], Sequence[T]] | None = None,
    ) -> TaskHandle[T]:
        return self.inner.submit_nowait(key, fn, *args, merge=merge)

    async def run(
        self,
        key: KeyLike,
        fn: Callable[[*Ts], T],
        /,
        *args: *Ts,
        merge: Callable[[Sequence[tuple[*Ts]]], Sequence[T]] | None = None,
    ) -> T:
        return await self.submit(key, fn, *args, merge=merge).wait()

    def statistics(self) -> SchedulerStatistics:
        return dataclasses.replace(self.inner.statistics(), backend=self.name)

    @property
    def closed(self) -> bool:
        return self.inner.closed

    def close(self, *, cancel_pending: bool = False, timeout: float | None = None) -> None:
        self.inner.close(cancel_pending=cancel_pending, timeout=timeout)

    async def aclose(self, *, cancel_pending: bool = False) -> None:
        await self.inner.aclose(cancel_pending=cancel_pending)


class RunsTasksTwice(Wrapper):
    def submit(
        self,
        key: KeyLike,
        fn: Callable[[*Ts], T],
        /,
        *args: *Ts,
        merge: Callable[[Sequence[tuple[*Ts]]], Sequence[T]] | None = None,
    ) -> TaskHandle[T]:
        self.inner.submit(key, fn, *args)
        return self.inner.submit(key, fn, *args, merge=merge)


class StartsTheFirstTaskLate(Wrapper):
    """Runs a key's tasks on any worker, and delays the very first one well past the next."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._count = itertools.count()

    def submit(
        self,
        key: KeyLike,
        fn: Callable[[*Ts], T],
        /,
        *args: *Ts,
        merge: Callable[[Sequence[tuple[*Ts]]], Sequence[T]] | None = None,
    ) -> TaskHandle[T]:
        delay = 0.3 if next(self._count) == 0 else 0.0

        def late(*args: *Ts) -> T:
            time.sleep(delay)
            return fn(*args)

        return self.inner.submit(key, late, *args)


class MiscountsFailures(Wrapper):
    def statistics(self) -> SchedulerStatistics:
        return dataclasses.replace(super().statistics(), failed=0)


@pytest.mark.anyio
async def test_a_wrapped_backend_keeps_the_contract() -> None:
    """The wrapper the broken backends start from is itself correct."""
    await check_exactly_once(Wrapper, examples=5)
    await check_statistics(Wrapper)


@pytest.mark.anyio
async def test_check_exactly_once_catches_tasks_run_twice() -> None:
    with pytest.raises(ContractViolation, match=r"^wrapper: tasks ran more than once: "):
        await check_exactly_once(RunsTasksTwice, examples=1)


@pytest.mark.anyio
async def test_check_per_key_order_catches_a_task_overtaken() -> None:
    # Mostly the first task's key runs out of order; should the other worker run two tasks of
    # one key at once meanwhile, that is caught first, and is as much a violation.
    broken = r"were submitted as \[0, .*\] but ran as \[|ran at the same time"
    with pytest.raises(ContractViolation, match=broken):
        await check_per_key_order(StartsTheFirstTaskLate, examples=1)


@pytest.mark.anyio
async def test_check_statistics_catches_miscounted_failures() -> None:
    broken = r"^wrapper: statistics broke: submitted == completed \+ failed \+ cancelled; 12 tasks"
    with pytest.raises(ContractViolation, match=broken):
        await check_statistics(MiscountsFailures)


# -- sniper's own wording and behaviour beyond the contract ------------------------------------


def closed_message(name: str) -> str:
    return re.escape(
        f"the {name} scheduler is closed; submit work before closing it, or open a new scheduler"
    )


def double(value: int) -> int:
    return 2 * value


@pytest.mark.anyio
async def test_submit_after_close_says_so(scheduler_name: str) -> None:
    scheduler = open_scheduler(scheduler_name, workers=2)
    with anyio.fail_after(WAIT):
        await scheduler.aclose()
    with pytest.raises(SchedulerClosed, match=closed_message(scheduler_name)):
        scheduler.submit("k", double, 1)
    with pytest.raises(SchedulerClosed, match=closed_message(scheduler_name)):
        scheduler.submit_nowait("k", double, 1)
    with pytest.raises(SchedulerClosed, match=closed_message(scheduler_name)):
        await scheduler.run("k", double, 1)


def test_key_must_be_a_name_or_a_task_key(scheduler: Scheduler) -> None:
    message = (
        "a task key should be a variable name (str) or a TaskKey(variable, shard), got ('v', 1)"
    )
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        scheduler.submit(("v", 1), double, 1)  # type: ignore[arg-type]


def test_submit_nowait_says_how_many_are_pending(queueing_name: str) -> None:
    with open_scheduler(queueing_name, workers=2, max_pending=2) as scheduler:
        blockers = Blockers(scheduler)
        queued = [scheduler.submit_nowait("q", double, i) for i in range(2)]
        message = (
            f"the {queueing_name} scheduler already has 2 pending tasks (max_pending=2); "
            "retry later or shed load"
        )
        with pytest.raises(SchedulerBusy, match=f"^{re.escape(message)}$"):
            scheduler.submit_nowait("q", double, 2)
        blockers.release()
        assert [h.result(timeout=WAIT) for h in queued] == [0, 2]


def test_close_times_out_while_a_task_runs(queueing: Scheduler) -> None:
    blockers = Blockers(queueing)
    with pytest.raises(TimeoutError, match="call close\\(\\) again to keep waiting"):
        queueing.close(timeout=0.01)
    blockers.release()
    queueing.close(timeout=WAIT)


def test_a_task_cannot_close_its_scheduler(queueing: Scheduler) -> None:
    handle = queueing.submit("k", queueing.close)
    with pytest.raises(RuntimeError, match="a task cannot close its own"):
        handle.result(timeout=WAIT)


def test_inline_runs_in_the_callers_thread() -> None:
    with open_scheduler("inline", workers=3) as scheduler:
        handle = scheduler.submit("k", threading.get_ident)
        assert handle.done()
        assert not handle.cancel()
        assert handle.result(timeout=0) == threading.get_ident()
        assert scheduler.statistics().workers == 1
