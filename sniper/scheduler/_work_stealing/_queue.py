"""Run queues: each worker's local deque and the global inject queue.

Both sit on ``collections.deque``, whose ``append``, ``pop`` and ``popleft`` are documented to
be thread-safe and atomic (in free-threaded builds too). Each item therefore leaves a queue
exactly once, whoever takes it, without a lock of our own. ``steal_half`` is a sequence of
atomic ``popleft`` calls rather than one atomic step, so an owner popping from the other end
can win the race for the last few items; every item is still taken exactly once, and the thief
just gets fewer. Items must not be ``None``, which is how "empty" is reported.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

__all__ = ["InjectQueue", "LocalQueue"]

T = TypeVar("T")


class LocalQueue(Generic[T]):
    """A worker's own queue: the owner pushes and pops at the back, thieves steal the front.

    LIFO for the owner because a sub-task just spawned is the one whose data is still in cache;
    FIFO for thieves because the oldest entries tend to be the largest unsplit pieces of work.
    """

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: deque[T] = deque()

    def push(self, item: T) -> None:
        """Owner only: add an item at the back."""
        self._items.append(item)

    def pop(self) -> T | None:
        """Owner only: take the newest item, or None when empty."""
        # Test first: raising IndexError costs more than a task's whole dequeue, and an owner
        # finds its deque empty on most calls. The try covers a thief taking the last item.
        if not self._items:
            return None
        try:
            return self._items.pop()
        except IndexError:
            return None

    def steal_half(self) -> list[T]:
        """Any thread: take the older half (rounded up) of the items, oldest first."""
        count = len(self._items)
        stolen: list[T] = []
        for _ in range(count - count // 2):
            try:
                stolen.append(self._items.popleft())
            except IndexError:  # the owner popped the rest meanwhile
                break
        return stolen

    def drain(self) -> list[T]:
        """Any thread: take every item, oldest first (used to cancel pending work)."""
        return _drain(self._items)

    def __len__(self) -> int:
        return len(self._items)


class InjectQueue(Generic[T]):
    """The global queue for tasks submitted from outside the workers: FIFO, with a second
    FIFO lane for background work that is taken only while the first is empty."""

    __slots__ = ("_background", "_items")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._background: deque[T] = deque()

    def push(self, item: T, *, background: bool = False) -> None:
        """Any thread: add an item at the back of its lane."""
        (self._background if background else self._items).append(item)

    def pop(self) -> T | None:
        """Any thread: take the oldest item, background ones only when no other waits."""
        for lane in (self._items, self._background):
            if lane:  # testing first is cheaper than raising IndexError on an empty lane
                try:
                    return lane.popleft()
                except IndexError:  # another thread took the last item meanwhile
                    pass
        return None

    def drain(self) -> list[T]:
        """Any thread: take every item, oldest first, background ones last."""
        return _drain(self._items) + _drain(self._background)

    def __len__(self) -> int:
        return len(self._items) + len(self._background)


def _drain(items: deque[T]) -> list[T]:
    """Take every item from the front, oldest first; safe while other threads pop too."""
    drained: list[T] = []
    while True:
        try:
            drained.append(items.popleft())
        except IndexError:
            return drained
