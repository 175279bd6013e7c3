"""Helpers shared by the scheduler tests."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from sniper.scheduler import Scheduler, TaskCancelled, TaskHandle

WAIT = 10.0
"""Seconds any blocking wait in these tests may take before the test fails instead of hanging."""


class Blockers:
    """Occupies every worker of a scheduler with a task that waits, so later tasks queue.

    The blockers return after :meth:`release`, or after :meth:`release_when_done`'s handle
    completes (deliberately a task waiting on another task: safe here because the handle is
    cancelled by close, never run).
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self._gate = threading.Event()
        self._started = threading.Semaphore(0)
        self._then: Callable[[], object] = lambda: None
        count = scheduler.statistics().workers
        self.handles: list[TaskHandle[None]] = [
            scheduler.submit(f"blocker-{index}", self._block) for index in range(count)
        ]
        for _ in range(count):
            assert self._started.acquire(timeout=WAIT), "a blocker did not start"

    def _block(self) -> None:
        self._started.release()
        assert self._gate.wait(WAIT), "the blockers were never released"
        self._then()

    def release(self) -> None:
        self._gate.set()

    def release_when_done(self, handle: TaskHandle[Any]) -> None:
        """Let the blockers return once ``handle`` completes (e.g. is cancelled by close)."""
        self._then = lambda: _wait_quietly(handle)
        self._gate.set()


def _wait_quietly(handle: TaskHandle[Any]) -> None:
    with contextlib.suppress(TaskCancelled):
        handle.result(timeout=WAIT)


def hold_key(scheduler: Scheduler, key: str) -> threading.Event:
    """Start a task on ``key`` that runs until the returned event is set.

    On ``per_variable`` this holds the key's mailbox, so later tasks of the key queue up
    behind it and are taken as one batch once the event is set.
    """
    started, gate = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        assert gate.wait(WAIT), "the key was never released"

    scheduler.submit(key, hold)
    assert started.wait(WAIT), "the holding task did not start"
    return gate
