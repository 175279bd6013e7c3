"""wait_all: every result in order, failures after everything finished, one loop wake-up."""

from __future__ import annotations

import asyncio
import threading
import time

import anyio
import pytest

from sniper.scheduler import Scheduler, TaskCancelled, wait_all

from ._helpers import WAIT, Blockers

pytestmark = pytest.mark.timeout(60)


@pytest.mark.anyio
async def test_results_come_back_in_submission_order(scheduler: Scheduler) -> None:
    handles = [scheduler.submit(f"k{i % 5}", pow, i, 2) for i in range(40)]
    with anyio.fail_after(WAIT):
        assert await wait_all(handles) == [i * i for i in range(40)]
    assert await wait_all([]) == []


@pytest.mark.anyio
async def test_a_failure_is_raised_only_after_every_task_finished(
    queueing: Scheduler,
) -> None:
    finished = threading.Event()

    def slow() -> int:
        time.sleep(0.2)
        finished.set()
        return 1

    def broken() -> int:
        raise KeyError("shard 3")

    handles = [queueing.submit("slow", slow), queueing.submit("broken", broken)]
    with anyio.fail_after(WAIT), pytest.raises(KeyError, match="shard 3"):
        await wait_all(handles)
    assert finished.is_set()


@pytest.mark.anyio
async def test_cancelling_the_waiter_cancels_tasks_not_started(queueing: Scheduler) -> None:
    blockers = Blockers(queueing)
    handles = [queueing.submit(f"queued{i}", abs, -i) for i in range(5)]
    with anyio.move_on_after(0.05):
        await wait_all(handles)
    blockers.release()
    for handle in handles:
        with pytest.raises(TaskCancelled):
            handle.result(timeout=WAIT)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_the_loop_is_woken_once_for_the_whole_group(queueing: Scheduler) -> None:
    loop = asyncio.get_running_loop()
    calls = 0
    original = loop.call_soon_threadsafe

    def counting(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)  # type: ignore[arg-type]

    blockers = Blockers(queueing)
    handles = [queueing.submit(f"k{i}", abs, -i) for i in range(30)]
    loop.call_soon_threadsafe = counting  # type: ignore[method-assign,assignment]
    try:
        blockers.release()
        with anyio.fail_after(WAIT):
            assert await wait_all(handles) == list(range(30))
    finally:
        loop.call_soon_threadsafe = original  # type: ignore[method-assign]
    assert calls == 1
