"""``adaptive``: a task keyed ``small`` runs in its submitter; every other on the workers."""

from __future__ import annotations

import threading

import anyio
import pytest

from sniper.scheduler import Scheduler, SchedulerClosed, TaskKey, open_scheduler

from ._helpers import WAIT
from .conftest import WORKERS

pytestmark = pytest.mark.timeout(60)

SMALL = TaskKey("v", small=True)


def thread_name() -> str:
    return threading.current_thread().name


def test_a_small_task_runs_inside_submit_on_the_submitting_thread() -> None:
    with open_scheduler("adaptive", workers=2) as scheduler:
        handle = scheduler.submit(SMALL, thread_name)
        assert handle.done(), "a small task is finished before submit returns"
        assert handle.result() == thread_name()
        assert (
            scheduler.submit("v", thread_name).result(timeout=WAIT).startswith("sniper-adaptive-")
        )


def test_small_tasks_are_counted_but_are_no_worker_s_busy_time() -> None:
    def fail() -> None:
        raise KeyError("bad shard")

    with open_scheduler("adaptive", workers=2) as scheduler:
        assert scheduler.submit(SMALL, sum, [1, 2]).result() == 3
        failed = scheduler.submit(SMALL, fail)
        with pytest.raises(KeyError, match="bad shard"):
            failed.result()
        stats = scheduler.statistics()
    assert (stats.submitted, stats.completed, stats.failed, stats.pending) == (2, 1, 1, 0)
    assert stats.run_time.count == 2
    assert stats.busy_seconds == (0.0, 0.0)


def test_a_closed_scheduler_refuses_small_tasks_too() -> None:
    scheduler = open_scheduler("adaptive", workers=1)
    scheduler.close()
    with pytest.raises(SchedulerClosed, match="adaptive scheduler is closed"):
        scheduler.submit(SMALL, thread_name)


@pytest.mark.anyio
async def test_run_awaits_small_and_queued_tasks_alike() -> None:
    async with open_scheduler("adaptive", workers=2) as scheduler:
        here = await scheduler.run(SMALL, thread_name)
        there = await scheduler.run("v", thread_name)
    assert here == thread_name()
    assert there != here


@pytest.mark.parametrize("name", ["per_variable", "thread_pool", "work_stealing"])
def test_other_backends_run_a_small_task_as_any_other(name: str) -> None:
    with open_scheduler(name, workers=WORKERS[name]) as scheduler:
        ran_on = scheduler.submit(SMALL, thread_name).result(timeout=WAIT)
    assert ran_on != thread_name()


@pytest.mark.anyio
async def test_a_small_task_queues_while_a_worker_runs_a_task() -> None:
    """A worker's task may hold a lock the small one needs: the loop must not wait for it, so
    the small task waits in the queue instead, and runs once the worker is free."""
    release = threading.Event()
    async with open_scheduler("adaptive", workers=1) as scheduler:
        blocked = scheduler.submit("big", release.wait, WAIT)
        small = scheduler.submit(SMALL, thread_name)
        assert not small.done()
        release.set()
        with anyio.fail_after(WAIT):
            assert await blocked.wait() is True
            assert (await small.wait()).startswith("sniper-adaptive-")
        assert scheduler.submit(SMALL, thread_name).result() == thread_name()


def test_the_key_says_which_hints_it_carries() -> None:
    assert repr(SMALL) == "TaskKey(variable='v', shard=0, small=True)"
    assert repr(TaskKey("v", 2, background=True, small=True)) == (
        "TaskKey(variable='v', shard=2, background=True, small=True)"
    )


class BlockedSubmitter:
    """A thread whose submit runs a small task in itself, blocked until ``release``."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.finished: list[bool] = []
        self.thread = threading.Thread(target=scheduler.submit, args=(SMALL, self._task))
        self.thread.start()
        assert self.started.wait(WAIT)

    def _task(self) -> None:
        self.started.set()
        self.release.wait(WAIT)
        self.finished.append(True)


@pytest.mark.parametrize("name", ["adaptive", "inline"])
def test_close_waits_for_a_task_another_thread_runs_in_its_submitter(name: str) -> None:
    scheduler = open_scheduler(name, workers=2)
    blocked = BlockedSubmitter(scheduler)
    with pytest.raises(TimeoutError, match="still had tasks running"):
        scheduler.close(timeout=0.1)
    assert not blocked.finished
    closer = threading.Thread(target=scheduler.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive(), "close returned while the task still ran"
    blocked.release.set()
    closer.join(WAIT)
    assert not closer.is_alive() and blocked.finished == [True]
    blocked.thread.join(WAIT)


@pytest.mark.anyio
async def test_aclose_waits_for_a_task_another_thread_runs_in_its_submitter() -> None:
    scheduler = open_scheduler("adaptive", workers=2)
    blocked = BlockedSubmitter(scheduler)
    threading.Timer(0.2, blocked.release.set).start()
    await scheduler.aclose()
    assert blocked.finished == [True]
    blocked.thread.join(WAIT)


def test_a_task_run_in_its_submitter_cannot_close_its_scheduler() -> None:
    with open_scheduler("adaptive", workers=2) as scheduler:
        handle = scheduler.submit(SMALL, scheduler.close)
        with pytest.raises(RuntimeError, match="cannot close its own"):
            handle.result()
        assert not scheduler.closed
