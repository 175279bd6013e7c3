"""The ``Scheduler`` contract, checked on every backend, under asyncio and trio and from threads."""

from __future__ import annotations

import re
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Sequence

import anyio
import pytest

from sniper.scheduler import (
    Scheduler,
    SchedulerBusy,
    SchedulerClosed,
    TaskCancelled,
    TaskHandle,
    TaskKey,
    open_scheduler,
)

from ._helpers import WAIT, Blockers

pytestmark = pytest.mark.timeout(60)


def closed_message(name: str) -> str:
    return re.escape(
        f"the {name} scheduler is closed; submit work before closing it, or open a new scheduler"
    )


def explode(value: int) -> int:
    raise ValueError(f"boom {value}")


def double(value: int) -> int:
    return 2 * value


async def wait_until(condition: Callable[[], bool]) -> None:
    """Poll briefly for a condition the test cannot be notified of; fail after WAIT seconds."""
    with anyio.fail_after(WAIT):
        while not condition():
            await anyio.sleep(0.001)


# -- exactly once ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_every_task_runs_exactly_once(scheduler: Scheduler) -> None:
    calls: Counter[int] = Counter()
    lock = threading.Lock()

    def task(task_id: int) -> int:
        with lock:
            calls[task_id] += 1
        return task_id

    def submit_from_thread(first: int, count: int) -> None:
        handles = [
            scheduler.submit(TaskKey(f"var{i % 7}", i % 3), task, i)
            for i in range(first, first + count)
        ]
        assert [h.result(timeout=WAIT) for h in handles] == list(range(first, first + count))

    async def await_from_loop(task_id: int) -> None:
        assert await scheduler.run(f"var{task_id % 5}", task, task_id) == task_id

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            for thread in range(4):
                tg.start_soon(
                    anyio.to_thread.run_sync, submit_from_thread, 1000 + 300 * thread, 300
                )
            for task_id in range(300):
                tg.start_soon(await_from_loop, task_id)
    expected = [*range(300), *range(1000, 2200)]
    assert sorted(calls) == expected
    assert set(calls.values()) == {1}
    stats = scheduler.statistics()
    assert stats.submitted == stats.completed == len(expected)


def test_sync_use_as_a_context_manager(scheduler_name: str) -> None:
    with open_scheduler(scheduler_name, workers=2) as scheduler:
        assert scheduler.submit("k", pow, 2, 10).result(timeout=WAIT) == 1024
        assert scheduler.submit_nowait(TaskKey("k", 1), double, 21).result(timeout=WAIT) == 42
    assert scheduler.closed
    with pytest.raises(SchedulerClosed, match=closed_message(scheduler_name)):
        scheduler.submit("k", double, 1)


@pytest.mark.anyio
async def test_async_context_manager_and_submit_after_close(scheduler_name: str) -> None:
    with anyio.fail_after(WAIT):
        async with open_scheduler(scheduler_name, workers=2) as scheduler:
            assert await scheduler.run("k", double, 4) == 8
    assert scheduler.closed
    with pytest.raises(SchedulerClosed, match=closed_message(scheduler_name)):
        scheduler.submit("k", double, 1)
    with pytest.raises(SchedulerClosed, match=closed_message(scheduler_name)):
        scheduler.submit_nowait("k", double, 1)
    with pytest.raises(SchedulerClosed, match=closed_message(scheduler_name)):
        await scheduler.run("k", double, 1)
    with anyio.fail_after(WAIT):
        await scheduler.aclose()  # idempotent
    scheduler.close(timeout=WAIT)


@pytest.mark.anyio
async def test_tasks_can_submit_sub_tasks(scheduler: Scheduler) -> None:
    def parent(n: int) -> list[TaskHandle[int]]:
        return [scheduler.submit(TaskKey("child", i), double, i) for i in range(n)]

    with anyio.fail_after(WAIT):
        children = await scheduler.run("parent", parent, 20)
        assert [await child.wait() for child in children] == [2 * i for i in range(20)]


def test_key_must_be_a_name_or_a_task_key(scheduler: Scheduler) -> None:
    with pytest.raises(TypeError, match=re.escape("got ('v', 1)")):
        scheduler.submit(("v", 1), double, 1)  # type: ignore[arg-type]


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_errors_keep_their_traceback_and_workers_survive(scheduler: Scheduler) -> None:
    workers = scheduler.statistics().workers
    for value in range(2 * workers):
        with pytest.raises(ValueError, match=rf"^boom {value}$") as info, anyio.fail_after(WAIT):
            await scheduler.run(f"k{value}", explode, value)
        frames = [frame.name for frame in traceback.extract_tb(info.tb)]
        assert "explode" in frames
    handle = scheduler.submit("k", explode, 99)
    with pytest.raises(ValueError, match=r"^boom 99$") as first:
        handle.result(timeout=WAIT)
    with pytest.raises(ValueError, match=r"^boom 99$") as second:
        handle.result(timeout=WAIT)
    assert first.value is second.value
    with anyio.fail_after(WAIT):
        assert [await scheduler.run(f"k{i}", double, i) for i in range(20)] == [
            2 * i for i in range(20)
        ]
    stats = scheduler.statistics()
    assert (stats.failed, stats.completed) == (2 * workers + 1, 20)


def test_inline_runs_in_the_callers_thread() -> None:
    with open_scheduler("inline", workers=3) as scheduler:
        handle = scheduler.submit("k", threading.get_ident)
        assert handle.done()
        assert not handle.cancel()
        assert handle.result(timeout=0) == threading.get_ident()
        assert scheduler.statistics().workers == 1


# -- cancellation ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_cancel_a_queued_task_and_it_never_runs(queueing: Scheduler) -> None:
    ran = threading.Event()
    blockers = Blockers(queueing)
    victim = queueing.submit("victim", ran.set)
    assert victim.cancel()
    assert victim.cancel(), "cancelling twice still reports cancelled"
    assert victim.done() and victim.cancelled()
    blockers.release()
    with anyio.fail_after(WAIT):
        await queueing.aclose()
    assert not ran.is_set()
    with pytest.raises(TaskCancelled, match=re.escape("task TaskKey(variable='victim', shard=0)")):
        victim.result(timeout=0)
    with pytest.raises(TaskCancelled):
        await victim.wait()
    assert queueing.statistics().cancelled == 1


@pytest.mark.anyio
async def test_cancelling_the_awaiter_cancels_a_queued_task(queueing: Scheduler) -> None:
    ran = threading.Event()
    blockers = Blockers(queueing)
    handle = queueing.submit("victim", ran.set)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await handle.wait()
    assert scope.cancelled_caught
    assert handle.cancelled()
    with anyio.move_on_after(0.01) as scope:
        await queueing.run("victim", ran.set)
    assert scope.cancelled_caught
    blockers.release()
    with anyio.fail_after(WAIT):
        await queueing.aclose()
    assert not ran.is_set()
    assert queueing.statistics().cancelled == 2


@pytest.mark.anyio
async def test_cancelling_the_awaiter_of_a_running_task_discards_its_result(
    scheduler: Scheduler,
) -> None:
    started, finish = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        assert finish.wait(WAIT)
        return "done"

    if scheduler.name == "inline":
        finish.set()  # the task runs inside submit, which must not block forever
    handle = scheduler.submit("k", slow)
    assert started.wait(WAIT)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await handle.wait()
    assert scope.cancelled_caught
    assert not handle.cancel(), "a running or finished task cannot be cancelled"
    finish.set()
    assert handle.result(timeout=WAIT) == "done"
    assert not handle.cancelled()


# -- shutdown ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_close_drains_queued_work(queueing: Scheduler) -> None:
    blockers = Blockers(queueing)
    queued = [queueing.submit(TaskKey("q", i % 4), double, i) for i in range(50)]
    assert queueing.statistics().pending == 50
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(queueing.aclose)
            await wait_until(lambda: queueing.closed)
            with pytest.raises(SchedulerClosed):
                queueing.submit("late", double, 1)
            blockers.release()
    assert [h.result(timeout=0) for h in queued] == [2 * i for i in range(50)]
    stats = queueing.statistics()
    assert stats.submitted == stats.completed == 50 + len(blockers.handles)
    assert (stats.pending, stats.running, stats.closed) == (0, 0, True)


@pytest.mark.anyio
async def test_close_can_cancel_queued_work(queueing: Scheduler) -> None:
    blockers = Blockers(queueing)
    queued = [queueing.submit(TaskKey("q", i % 4), double, i) for i in range(50)]
    blockers.release_when_done(queued[-1])
    with anyio.fail_after(WAIT):
        await queueing.aclose(cancel_pending=True)
    assert_completed_or_cancelled(queued)
    assert all(h.cancelled() for h in queued)
    assert all(h.result(timeout=0) is None for h in blockers.handles)
    stats = queueing.statistics()
    assert stats.submitted == stats.completed + stats.cancelled
    assert stats.cancelled == 50


@pytest.mark.anyio
async def test_a_cancelled_aclose_cancels_pending_work_and_joins(queueing: Scheduler) -> None:
    blockers = Blockers(queueing)
    queued = [queueing.submit(TaskKey("q", i % 4), double, i) for i in range(20)]
    blockers.release_when_done(queued[-1])
    with anyio.move_on_after(0.05) as scope:
        await queueing.aclose()
    assert scope.cancelled_caught
    assert all(h.cancelled() for h in queued)
    assert all(h.done() for h in blockers.handles)
    assert queueing.statistics().running == 0


def test_leaving_a_with_block_by_an_exception_cancels_queued_work(queueing_name: str) -> None:
    scheduler = open_scheduler(queueing_name, workers=2)
    queued: list[TaskHandle[int]] = []
    with pytest.raises(KeyError), scheduler:
        blockers = Blockers(scheduler)
        queued.extend(scheduler.submit("q", double, i) for i in range(10))
        blockers.release_when_done(queued[-1])
        raise KeyError("the body failed")
    assert all(h.cancelled() for h in queued)


def test_close_times_out_while_a_task_runs(queueing: Scheduler) -> None:
    blockers = Blockers(queueing)
    with pytest.raises(TimeoutError, match="call close\\(\\) again to keep waiting"):
        queueing.close(timeout=0.01)
    blockers.release()
    queueing.close(timeout=WAIT)
    assert all(h.done() for h in blockers.handles)


def test_a_task_cannot_close_its_scheduler(queueing: Scheduler) -> None:
    handle = queueing.submit("k", queueing.close)
    with pytest.raises(RuntimeError, match="a task cannot close its own"):
        handle.result(timeout=WAIT)


def assert_completed_or_cancelled(handles: Sequence[TaskHandle[int]]) -> None:
    for handle in handles:
        assert handle.done()
        if not handle.cancelled():
            handle.result(timeout=0)
        else:
            with pytest.raises(TaskCancelled):
                handle.result(timeout=0)


# -- backpressure, merging, statistics ---------------------------------------------------------


def test_submit_nowait_refuses_beyond_max_pending(queueing_name: str) -> None:
    with open_scheduler(queueing_name, workers=2, max_pending=2) as scheduler:
        blockers = Blockers(scheduler)
        queued = [scheduler.submit_nowait("q", double, i) for i in range(2)]
        message = (
            f"the {queueing_name} scheduler already has 2 pending tasks (max_pending=2); "
            "retry later or shed load"
        )
        with pytest.raises(SchedulerBusy, match=re.escape(message)):
            scheduler.submit_nowait("q", double, 2)
        queued.append(scheduler.submit("q", double, 2))  # submit does not apply the bound
        blockers.release()
        assert [h.result(timeout=WAIT) for h in queued] == [0, 2, 4]


def test_merge_never_changes_results(scheduler: Scheduler) -> None:
    def add_all(calls: Sequence[tuple[int, int]]) -> list[int]:
        return [a + b for a, b in calls]

    handles = [scheduler.submit("k", int.__add__, i, 1, merge=add_all) for i in range(40)]
    assert [h.result(timeout=WAIT) for h in handles] == [i + 1 for i in range(40)]


def test_statistics_add_up_after_close(scheduler: Scheduler) -> None:
    handles = [
        scheduler.submit(f"k{i % 3}", explode if i % 5 == 0 else double, i) for i in range(60)
    ]
    if scheduler.name != "inline":
        blockers = Blockers(scheduler)
        handles.append(scheduler.submit("never", double, 0))
        assert handles[-1].cancel()
        blockers.release()
    scheduler.close(timeout=WAIT)
    stats = scheduler.statistics()
    assert stats.submitted == stats.completed + stats.failed + stats.cancelled
    assert stats.failed == 12
    assert stats.cancelled == (0 if scheduler.name == "inline" else 1)
    assert (stats.pending, stats.running) == (0, 0)
    assert stats.queue_wait.count == stats.completed + stats.failed
    assert stats.run_time.count == stats.completed + stats.failed
    assert len(stats.busy_seconds) == stats.workers
    assert all(0.0 <= u <= 1.0 for u in stats.utilization())
    assert stats.backend == scheduler.name
