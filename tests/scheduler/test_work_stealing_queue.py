"""The work-stealing run queues against a list model, sequentially and under real threads."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from sniper.scheduler._work_stealing._queue import InjectQueue, LocalQueue

from ._helpers import WAIT

pytestmark = pytest.mark.timeout(60)


class LocalQueueMachine(RuleBasedStateMachine):
    """The model is a list, oldest first: the owner works at its end, thieves at its start."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: LocalQueue[int] = LocalQueue()
        self.model: list[int] = []

    @rule(item=st.integers())
    def push(self, item: int) -> None:
        self.queue.push(item)
        self.model.append(item)

    @rule()
    def pop(self) -> None:
        expected = self.model.pop() if self.model else None
        assert self.queue.pop() == expected

    @rule()
    def steal_half(self) -> None:
        take = len(self.model) - len(self.model) // 2
        expected, self.model = self.model[:take], self.model[take:]
        assert self.queue.steal_half() == expected

    @rule()
    def drain(self) -> None:
        expected, self.model = self.model, []
        assert self.queue.drain() == expected

    @invariant()
    def same_length(self) -> None:
        assert len(self.queue) == len(self.model)


LocalQueueMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40)
TestLocalQueue = LocalQueueMachine.TestCase


def test_inject_queue_is_fifo() -> None:
    queue: InjectQueue[int] = InjectQueue()
    assert queue.pop() is None
    for item in range(5):
        queue.push(item)
    assert queue.pop() == 0
    assert len(queue) == 4
    assert queue.drain() == [1, 2, 3, 4]
    assert len(queue) == 0


def test_inject_queue_takes_background_items_only_when_no_other_waits() -> None:
    queue: InjectQueue[int] = InjectQueue()
    queue.push(1, background=True)
    queue.push(2)
    queue.push(3, background=True)
    assert len(queue) == 3
    assert queue.pop() == 2
    queue.push(4)
    assert queue.drain() == [4, 1, 3]


def test_owner_and_thieves_take_every_item_exactly_once() -> None:
    """The owner pushes and pops while three thieves steal: nothing is lost or duplicated."""
    queue: LocalQueue[int] = LocalQueue()
    total = 30_000
    taken: list[list[int]] = [[] for _ in range(4)]
    owner_done = threading.Event()

    def owner() -> None:
        for start in range(0, total, 100):
            for item in range(start, start + 100):
                queue.push(item)
            for _ in range(30):
                item_or_none = queue.pop()
                if item_or_none is not None:
                    taken[0].append(item_or_none)
            time.sleep(0)  # hand the GIL to the thieves, as a nogil kernel would
        while (item_or_none := queue.pop()) is not None:
            taken[0].append(item_or_none)
        owner_done.set()

    def thief(index: int) -> None:
        while not owner_done.is_set():
            stolen = queue.steal_half()
            taken[index].extend(stolen)
            if not stolen:
                owner_done.wait(0.0001)  # nothing to steal yet; don't hog the GIL

    threads = [threading.Thread(target=owner)]
    threads += [threading.Thread(target=thief, args=(i,)) for i in (1, 2, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()
    counts = Counter(item for part in taken for item in part)
    assert sorted(counts) == list(range(total))
    assert set(counts.values()) == {1}
    assert sum(len(part) for part in taken[1:]) > 0, "the thieves never stole anything"
