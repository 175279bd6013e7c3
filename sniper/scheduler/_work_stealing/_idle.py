"""Who is parked, who is searching for work, and whom to wake (after tokio's ``idle.rs``).

A worker is *running* a task, *searching* (its own queue is empty and it is looking at the
others' and the inject queue), or *parked*. The rules that keep wake-ups from being lost:

* Whoever makes work visible (a submit, a sub-task pushed to a local queue) calls
  :meth:`Idle.notify_one` **after** pushing. It wakes a parked worker only when nobody is
  searching: a searcher will find the work, and waking more workers would only make them race
  for it.
* A worker about to sleep registers as parked (:meth:`Idle.park`) and **then** looks at every
  queue once more. So either it sees the work, or the pusher, whose check came after the push,
  sees it parked and wakes it. The registry's lock orders the two.
* The last searcher to find work wakes another parked worker if more work is visible, because
  pushers skipped waking anyone while it was searching.
* The waker counts the worker it wakes as searching and sets its token under this module's
  lock. A worker that finds work during its final look asks :meth:`Idle.unpark_self` whether
  someone already woke it, and if so drops the token it was sent.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ._park import Parker

__all__ = ["Idle"]


class Idle:
    """The registry of parked and searching workers for one scheduler."""

    __slots__ = ("_lock", "_parked", "_parkers", "_searching")

    def __init__(self, parkers: Sequence[Parker]) -> None:
        self._lock = threading.Lock()
        self._parkers = parkers
        self._parked: list[int] = []
        self._searching = 0

    def start_searching(self) -> None:
        """A running worker ran out of local work and starts looking elsewhere."""
        with self._lock:
            self._searching += 1

    def stop_searching(self) -> bool:
        """A searching worker found work; True if it was the last searcher."""
        with self._lock:
            self._searching -= 1
            return self._searching == 0

    def park(self, index: int, *, searching: bool) -> None:
        """Register worker ``index`` as parked; it must look at the queues once more after."""
        with self._lock:
            if searching:
                self._searching -= 1
            self._parked.append(index)

    def unpark_self(self, index: int) -> bool:
        """Undo :meth:`park` for a worker that found work; True if it was woken meanwhile.

        A woken worker was counted as searching by its waker and has a token to clear.
        """
        with self._lock:
            if index in self._parked:
                self._parked.remove(index)
                return False
            return True

    def notify_one(self) -> None:
        """Wake one parked worker, unless a worker is already searching."""
        with self._lock:
            if self._searching or not self._parked:
                return
            index = self._parked.pop()
            self._searching += 1
            self._parkers[index].unpark()

    def notify_all(self) -> None:
        """Wake every parked worker (shutdown)."""
        with self._lock:
            for index in self._parked:
                self._searching += 1
                self._parkers[index].unpark()
            self._parked.clear()

    @property
    def num_parked(self) -> int:
        """How many workers are parked right now."""
        return len(self._parked)

    @property
    def num_searching(self) -> int:
        """How many workers are searching right now."""
        return self._searching
