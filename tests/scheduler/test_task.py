"""Task handles: blocking and async waits, timeouts, and the thread hop back to the loop."""

from __future__ import annotations

import asyncio
import re
import threading

import anyio
import pytest

from sniper.scheduler import Scheduler, TaskCancelled, TaskKey
from sniper.scheduler._signal import _schedule_quietly

from ._helpers import WAIT, Blockers

pytestmark = pytest.mark.timeout(60)


def test_result_times_out_with_a_clear_message(queueing: Scheduler) -> None:
    blockers = Blockers(queueing)
    handle = queueing.submit(TaskKey("emb", 2), abs, -1)
    message = "task TaskKey(variable='emb', shard=2) did not finish within 0.01 seconds"
    with pytest.raises(TimeoutError, match=re.escape(message)):
        handle.result(timeout=0.01)
    assert repr(handle) == "<TaskHandle emb[2] pending>"
    blockers.release()
    assert handle.result(timeout=WAIT) == 1
    assert repr(handle) == "<TaskHandle emb[2] finished>"


@pytest.mark.anyio
async def test_awaits_do_not_use_threads(queueing: Scheduler) -> None:
    """Hundreds of concurrent awaits cost no thread each: the worker hops onto the loop."""
    blockers = Blockers(queueing)
    await anyio.sleep(0.01)  # trio starts a helper thread on its first timed sleep
    threads_before = threading.active_count()
    results: list[int] = []

    async def await_one(i: int) -> None:
        results.append(await queueing.run(f"k{i % 9}", abs, -i))

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            for i in range(300):
                tg.start_soon(await_one, i)
            await anyio.sleep(0.01)
            assert threading.active_count() <= threads_before
            blockers.release()
    assert sorted(results) == list(range(300))


@pytest.mark.anyio
async def test_sync_and_async_waiters_all_see_the_outcome(queueing: Scheduler) -> None:
    blockers = Blockers(queueing)
    handle = queueing.submit("k", abs, -7)
    cancelled = queueing.submit("k", abs, -8)
    assert cancelled.cancel()
    seen: list[int] = []

    def wait_in_thread() -> None:
        seen.append(handle.result(timeout=WAIT))
        with pytest.raises(TaskCancelled):
            cancelled.result(timeout=WAIT)

    async def wait_in_loop() -> None:
        seen.append(await handle.wait())
        with pytest.raises(TaskCancelled):
            await cancelled.wait()

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(anyio.to_thread.run_sync, wait_in_thread)
                tg.start_soon(wait_in_loop)
            await anyio.sleep(0.01)
            blockers.release()
    assert seen == [7] * 6


@pytest.mark.anyio
async def test_a_cancelled_awaiter_unregisters_its_wake_up(queueing: Scheduler) -> None:
    blockers = Blockers(queueing)
    handle = queueing.submit("k", abs, -1)
    with anyio.move_on_after(0.01):
        await handle.wait()
    assert handle.cancelled()
    assert not handle._callbacks
    blockers.release()


def test_a_wake_up_for_a_closed_loop_is_dropped() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    _schedule_quietly(loop.call_soon_threadsafe, lambda: None)  # must not raise


def test_repeated_result_calls_do_not_grow_the_traceback() -> None:
    import traceback

    from sniper.scheduler import open_scheduler

    def fail() -> None:
        raise RuntimeError("boom")

    with open_scheduler("thread_pool", workers=1) as scheduler:
        handle = scheduler.submit("k", fail)
        depths = []
        for _ in range(3):
            try:
                handle.result(timeout=10)
            except RuntimeError as exc:
                depths.append(len(traceback.extract_tb(exc.__traceback__)))
    assert depths[0] == depths[1] == depths[2]
