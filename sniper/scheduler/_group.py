"""Await many task handles with one wake-up of the event loop.

Awaiting handles one by one costs a hop from the worker thread to the loop per handle that is
still running (``call_soon_threadsafe``: a write to the loop's self-pipe, and a worker queueing
for the GIL behind the loop). A ps lookup or push is 10 to 40 tasks, so it paid that many hops.
Here every handle counts down one shared counter from the worker that finishes it, and only the
last one wakes the loop.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TypeVar

from ._signal import OneShot
from ._task import TaskHandle

__all__ = ["wait_all"]

T = TypeVar("T")


class _Countdown(OneShot):
    """Set once ``count`` calls have been made, from whichever threads make them."""

    __slots__ = ("_remaining", "_remaining_lock")

    def __init__(self, count: int) -> None:
        super().__init__()
        self._remaining = count
        self._remaining_lock = threading.Lock()

    def __call__(self) -> None:
        with self._remaining_lock:
            self._remaining -= 1
            last = self._remaining == 0
        if last:
            self._set()


async def wait_all(handles: Sequence[TaskHandle[T]]) -> list[T]:
    """The results of every handle, in order, under asyncio or trio.

    Every task is finished (or cancelled before it started) before this returns or raises a
    task's failure, so none is still running when the caller hears of it; the first failure,
    in handle order, is raised. If the caller itself is cancelled, tasks that have not started
    are cancelled and the cancellation propagates at once: tasks already running finish on
    their own.
    """
    countdown = _Countdown(len(handles))
    for handle in handles:
        if not handle._add_callback(countdown):
            countdown()
    if not handles:
        countdown._set()
    try:
        await countdown._wait_async()
    except BaseException:
        for handle in handles:
            handle.cancel()
        raise
    return [handle._outcome() for handle in handles]
