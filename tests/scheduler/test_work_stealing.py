"""``work_stealing``: local deques, stealing, the fairness tick, parking and seeded randomness."""

from __future__ import annotations

import random
import threading
import time

import hypothesis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sniper.scheduler import TaskHandle, TaskKey, open_scheduler
from sniper.scheduler._work_stealing import WorkStealingScheduler
from sniper.scheduler._work_stealing._idle import Idle
from sniper.scheduler._work_stealing._park import Parker
from sniper.scheduler._work_stealing._worker import FAIRNESS_TICKS

from ._helpers import WAIT

pytestmark = pytest.mark.timeout(60)


def open_work_stealing(workers: int, seed: int = 0) -> WorkStealingScheduler:
    scheduler = open_scheduler("work_stealing", workers=workers, seed=seed)
    assert isinstance(scheduler, WorkStealingScheduler)
    return scheduler


def test_idle_workers_steal_sub_tasks_of_a_busy_one() -> None:
    with open_work_stealing(3) as scheduler:
        hypothesis.register_random(scheduler.random)

        def nap(i: int) -> str:
            time.sleep(0.002)  # releases the GIL, like a nogil kernel
            return threading.current_thread().name

        def parent() -> list[TaskHandle[str]]:
            return [scheduler.submit(f"shard{i}", nap, i) for i in range(60)]

        children = scheduler.submit("parent", parent).result(timeout=WAIT)
        ran_on = {child.result(timeout=WAIT) for child in children}
    stats = scheduler.statistics()
    assert stats.stolen > 0
    assert len(ran_on) > 1, "the sub-tasks all ran on the worker that spawned them"
    assert stats.submitted == stats.completed == 61


def test_sub_tasks_go_to_the_local_deque_and_run_newest_first() -> None:
    order: list[int] = []
    with open_work_stealing(1) as scheduler:

        def parent() -> list[TaskHandle[None]]:
            return [scheduler.submit("child", order.append, i) for i in range(5)]

        for child in scheduler.submit("parent", parent).result(timeout=WAIT):
            child.result(timeout=WAIT)
    assert order == [4, 3, 2, 1, 0]


def test_outside_submissions_run_oldest_first() -> None:
    order: list[int] = []
    gate = threading.Event()
    with open_work_stealing(1) as scheduler:
        scheduler.submit("hold", gate.wait, WAIT)
        handles = [scheduler.submit("k", order.append, i) for i in range(5)]
        gate.set()
        for handle in handles:
            handle.result(timeout=WAIT)
    assert order == [0, 1, 2, 3, 4]


def test_the_inject_queue_is_not_starved_by_local_work() -> None:
    """A worker busy with its own sub-tasks still takes outside work every 61 ticks."""
    chain_length = 5 * FAIRNESS_TICKS
    log: list[str] = []
    outside_submitted = threading.Event()
    with open_work_stealing(1) as scheduler:

        def link(i: int) -> None:
            if i == 0:
                assert outside_submitted.wait(WAIT)
            log.append(f"link{i}")
            if i + 1 < chain_length:
                scheduler.submit("chain", link, i + 1)

        scheduler.submit("chain", link, 0)
        scheduler.submit("outside", log.append, "outside")
        outside_submitted.set()
    assert log.index("outside") <= FAIRNESS_TICKS + 1


def wait_until_all_parked(scheduler: WorkStealingScheduler) -> None:
    """Parking is not observable through any event, so poll briefly."""
    idle = scheduler._shared.idle
    deadline = time.monotonic() + WAIT
    while idle.num_parked < scheduler.statistics().workers:
        assert time.monotonic() < deadline, "the workers never parked"
        time.sleep(0.001)


def test_the_random_source_is_seeded_and_exposed() -> None:
    """Steal victims are drawn from ``scheduler.random``, a stream fixed by ``seed``.

    Which worker draws which number still depends on thread timing, so the test checks the
    stream: the exposed generator's state is a point on ``Random(seed)``'s sequence.
    """
    with open_work_stealing(3, seed=7) as scheduler:
        assert scheduler._shared.rng is scheduler.random
        wait_until_all_parked(scheduler)  # each worker searched (and drew) once, then parked
        state = scheduler.random.getstate()
    reference = random.Random(7)
    for _ in range(1000):
        if reference.getstate() == state:
            break
        reference.getrandbits(32)  # randrange on a few workers draws one 32-bit word a try
    assert reference.getstate() == state
    assert state != random.Random(7).getstate(), "the workers drew nothing"


@settings(max_examples=10, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=1, max_size=30))
def test_every_task_runs_once_whatever_the_steal_order(depths: list[int]) -> None:
    """Replayable: the scheduler's random source is registered with hypothesis."""
    expected = sorted((root, d) for root, depth in enumerate(depths) for d in range(depth + 1))
    ran: list[tuple[int, int]] = []
    finished = threading.Semaphore(0)
    with open_work_stealing(3) as scheduler:
        hypothesis.register_random(scheduler.random)

        def spawn(root: int, depth: int) -> None:
            ran.append((root, depth))
            if depth > 0:
                scheduler.submit(f"r{root}", spawn, root, depth - 1)
            finished.release()

        for root, depth in enumerate(depths):
            scheduler.submit(f"r{root}", spawn, root, depth)
        # Wait before closing: once closing starts, a running task can no longer submit.
        for _ in expected:
            assert finished.acquire(timeout=WAIT)
    assert sorted(ran) == expected
    stats = scheduler.statistics()
    assert stats.submitted == stats.completed == len(expected)


def test_parker_keeps_a_wake_up_that_comes_first() -> None:
    parker = Parker()
    parker.unpark()
    parker.park()  # returns at once: the token was already there

    woke = threading.Event()

    def sleeper() -> None:
        parker.park()
        woke.set()

    thread = threading.Thread(target=sleeper)
    thread.start()
    assert not woke.wait(0.02), "park returned without an unpark"
    parker.unpark()
    thread.join(WAIT)
    assert woke.is_set()


def test_idle_wakes_a_parked_worker_only_when_nobody_searches() -> None:
    parkers = [Parker() for _ in range(3)]
    idle = Idle(parkers)
    idle.park(0, searching=False)
    idle.park(1, searching=False)
    idle.start_searching()  # worker 2 is looking for work: no need to wake anyone
    idle.notify_one()
    assert (idle.num_parked, idle.num_searching) == (2, 1)
    assert idle.stop_searching(), "worker 2 was the last searcher"
    idle.notify_one()  # wakes the most recently parked worker and counts it as searching
    assert (idle.num_parked, idle.num_searching) == (1, 1)
    parkers[1].park()  # its token is set, so this returns
    assert idle.unpark_self(1), "worker 1 was woken by notify_one"
    assert not idle.unpark_self(0), "worker 0 was still parked and removes itself"
    assert idle.num_parked == 0
    idle.park(0, searching=False)
    idle.notify_all()
    parkers[0].park()
    assert (idle.num_parked, idle.num_searching) == (0, 2)


def test_workers_park_when_idle_and_wake_for_new_work() -> None:
    with open_work_stealing(3) as scheduler:
        wait_until_all_parked(scheduler)
        assert scheduler.submit("k", abs, -5).result(timeout=WAIT) == 5


def test_background_submissions_wait_for_every_other_outside_one() -> None:
    order: list[str] = []
    gate = threading.Event()
    with open_work_stealing(1) as scheduler:
        scheduler.submit("hold", gate.wait, WAIT)
        handles = [
            scheduler.submit(TaskKey("pins", background=True), order.append, "pin 0"),
            scheduler.submit("lookup", order.append, "lookup"),
            scheduler.submit(TaskKey("pins", background=True), order.append, "pin 1"),
            scheduler.submit("push", order.append, "push"),
        ]
        gate.set()
        for handle in handles:
            handle.result(timeout=WAIT)
    assert order == ["lookup", "push", "pin 0", "pin 1"]


def test_outside_work_is_taken_without_searching_when_there_is_nothing_to_steal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker running a queue of outside tasks takes each from the inject queue without
    registering as searching (two turns of the idle lock per task); it searches only once it
    runs out of work, before it parks."""
    searches: list[int] = []
    original = Idle.start_searching

    def counting(idle: Idle) -> None:
        searches.append(1)
        original(idle)

    gate = threading.Event()
    with open_work_stealing(1) as scheduler:
        wait_until_all_parked(scheduler)
        scheduler.submit("hold", gate.wait, WAIT)
        handles = [scheduler.submit("k", abs, -i) for i in range(20)]
        monkeypatch.setattr(Idle, "start_searching", counting)
        gate.set()
        assert [handle.result(timeout=WAIT) for handle in handles] == list(range(20))
        wait_until_all_parked(scheduler)
    assert len(searches) <= 2, "the worker searched for each of the 20 tasks"


def test_two_workers_draw_nothing_from_the_random_source() -> None:
    """With one sibling there is no victim to choose, so stealing leaves the stream alone."""
    with open_work_stealing(2, seed=5) as scheduler:

        def nap() -> None:
            time.sleep(0.001)

        def parent() -> list[TaskHandle[None]]:
            return [scheduler.submit("child", nap) for _ in range(40)]

        for child in scheduler.submit("parent", parent).result(timeout=WAIT):
            child.result(timeout=WAIT)
        wait_until_all_parked(scheduler)
    assert scheduler.random.getstate() == random.Random(5).getstate()


def test_a_task_of_one_scheduler_submits_to_another_through_its_inject_queue() -> None:
    """Only a scheduler's own workers push to their local deques; a worker of another
    scheduler is an outside thread to it."""
    with open_work_stealing(1) as first, open_work_stealing(1) as second:

        def hop() -> TaskHandle[str]:
            return second.submit("other", lambda: threading.current_thread().name)

        ran_on = first.submit("k", hop).result(timeout=WAIT).result(timeout=WAIT)
        assert ran_on == second._threads[0].name
        assert not first._shared.workers[0].local
