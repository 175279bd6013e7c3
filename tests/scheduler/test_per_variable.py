"""``per_variable``: per-key order, one task per key at a time, and the merge protocol."""

from __future__ import annotations

import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence

import anyio
import pytest

from sniper.scheduler import Scheduler, TaskHandle, TaskKey, open_scheduler

from ._helpers import WAIT, hold_key

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def scheduler() -> Iterator[Scheduler]:
    scheduler = open_scheduler("per_variable", workers=3, max_batch=4)
    try:
        yield scheduler
    finally:
        scheduler.close(cancel_pending=True, timeout=WAIT)


@pytest.mark.anyio
async def test_tasks_of_a_key_run_one_at_a_time_in_submission_order(
    scheduler: Scheduler,
) -> None:
    order_lock = threading.Lock()
    submitted: dict[TaskKey, list[int]] = defaultdict(list)
    ran: dict[TaskKey, list[int]] = defaultdict(list)
    running: set[TaskKey] = set()
    overlaps: list[TaskKey] = []
    sequence = iter(range(10**9))

    def task(key: TaskKey, seq: int) -> None:
        if key in running:
            overlaps.append(key)
        running.add(key)
        time.sleep(0)  # let another worker try to run the same key
        ran[key].append(seq)
        running.discard(key)

    def submit_many(thread: int) -> list[TaskHandle[None]]:
        handles = []
        for i in range(200):
            key = TaskKey("var", (i + thread) % 5)
            # Submission order across threads is the order submits take the scheduler's lock;
            # numbering under our own lock around submit pins that order down.
            with order_lock:
                seq = next(sequence)
                submitted[key].append(seq)
                handles.append(scheduler.submit(key, task, key, seq))
        return handles

    with anyio.fail_after(WAIT):
        results: list[list[TaskHandle[None]]] = []
        async with anyio.create_task_group() as tg:
            for thread in range(3):

                async def run(thread: int = thread) -> None:
                    results.append(await anyio.to_thread.run_sync(submit_many, thread))

                tg.start_soon(run)
        for handles in results:
            for handle in handles:
                await handle.wait()
    assert overlaps == []
    assert ran == submitted


def test_consecutive_tasks_with_the_same_merge_run_as_one_call(scheduler: Scheduler) -> None:
    calls: list[tuple[str, int]] = []

    def lookup(rows: list[int]) -> int:
        calls.append(("lookup", 1))
        return sum(rows)

    def lookup_many(batch: Sequence[tuple[list[int]]]) -> list[int]:
        calls.append(("lookup_many", len(batch)))
        return [sum(rows) for (rows,) in batch]

    gate = hold_key(scheduler, "emb")
    handles = [scheduler.submit("emb", lookup, list(range(i)), merge=lookup_many) for i in range(4)]
    gate.set()
    assert [h.result(timeout=WAIT) for h in handles] == [0, 0, 1, 3]
    assert calls == [("lookup_many", 4)]
    assert scheduler.statistics().merged == 4


def test_merging_stops_at_a_different_function_and_keeps_order(scheduler: Scheduler) -> None:
    log: list[str] = []

    def make(name: str) -> tuple[Callable[[int], str], Callable[[Sequence[tuple[int]]], list[str]]]:
        def one(x: int) -> str:
            log.append(f"{name}({x})")
            return f"{name}{x}"

        def many(batch: Sequence[tuple[int]]) -> list[str]:
            log.append(f"{name}{[x for (x,) in batch]}")
            return [f"{name}{x}" for (x,) in batch]

        return one, many

    a_one, a_many = make("a")
    b_one, b_many = make("b")

    def plain(x: int) -> str:
        log.append(f"plain({x})")
        return f"p{x}"

    gate = hold_key(scheduler, "k")
    handles = [
        scheduler.submit("k", a_one, 1, merge=a_many),
        scheduler.submit("k", a_one, 2, merge=a_many),
        scheduler.submit("k", plain, 3),
        scheduler.submit("k", a_one, 4, merge=a_many),
        scheduler.submit("k", b_one, 5, merge=b_many),
        scheduler.submit("k", b_one, 6, merge=b_many),
    ]
    gate.set()
    assert [h.result(timeout=WAIT) for h in handles] == ["a1", "a2", "p3", "a4", "b5", "b6"]
    # max_batch=4 splits the six tasks into [a1 a2 p3 a4] and [b5 b6].
    assert log == ["a[1, 2]", "plain(3)", "a(4)", "b[5, 6]"]


def test_a_failing_merge_fails_every_task_of_the_call(scheduler: Scheduler) -> None:
    def many(batch: Sequence[tuple[int]]) -> list[int]:
        raise OverflowError("merged kernel failed")

    def wrong_count(batch: Sequence[tuple[int]]) -> list[int]:
        return [0]

    gate = hold_key(scheduler, "k")
    failing = [scheduler.submit("k", abs, -i, merge=many) for i in range(2)]
    miscounted = [scheduler.submit("k", abs, -i, merge=wrong_count) for i in range(2)]
    gate.set()
    for handle in failing:
        with pytest.raises(OverflowError, match="merged kernel failed"):
            handle.result(timeout=WAIT)
    for handle in miscounted:
        with pytest.raises(ValueError, match=re.escape("returned 1 results for 2 calls")):
            handle.result(timeout=WAIT)
    assert scheduler.submit("k", abs, -3).result(timeout=WAIT) == 3
    assert scheduler.statistics().failed == 4


def test_a_cancelled_task_is_left_out_of_a_merge(scheduler: Scheduler) -> None:
    batches: list[list[int]] = []

    def many(batch: Sequence[tuple[int]]) -> list[int]:
        batches.append([x for (x,) in batch])
        return [x for (x,) in batch]

    gate = hold_key(scheduler, "k")
    handles = [scheduler.submit("k", abs, i, merge=many) for i in range(3)]
    assert handles[1].cancel()
    gate.set()
    assert handles[0].result(timeout=WAIT) == 0
    assert handles[2].result(timeout=WAIT) == 2
    assert batches == [[0, 2]]


def test_max_batch_is_validated() -> None:
    with pytest.raises(ValueError, match='"max_batch" should be a positive integer, got 0'):
        open_scheduler("per_variable", workers=1, max_batch=0)


def test_the_small_hint_keeps_a_shard_s_tasks_in_one_mailbox() -> None:
    """``small`` is for ``adaptive``: here a shard's tasks with and without it still run one
    at a time in submission order, on two workers that could otherwise run them at once."""
    release = threading.Event()
    order: list[int] = []
    with open_scheduler("per_variable", workers=2) as scheduler:
        first = scheduler.submit(TaskKey("v", 3), release.wait, WAIT)
        handles = [
            scheduler.submit(TaskKey("v", 3, small=i % 2 == 0), order.append, i) for i in range(8)
        ]
        time.sleep(0.05)  # room for a second mailbox's tasks to run, were there one
        assert order == []
        release.set()
        first.result(timeout=WAIT)
        for handle in handles:
            handle.result(timeout=WAIT)
    assert order == list(range(8))
