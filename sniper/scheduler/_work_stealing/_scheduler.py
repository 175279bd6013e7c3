"""The ``work_stealing`` backend: per-worker deques, an inject queue, and idle workers that steal.

Tasks submitted from outside go to the inject queue and wake a parked worker; tasks submitted
by a running task (splitting its work into sub-tasks) go to that worker's own deque, where idle
siblings can steal them. No ordering is promised, except that an outside task keyed
``background`` waits until no other outside task does. The one source of randomness, the choice of
steal victim, is a seeded ``random.Random`` exposed as :attr:`WorkStealingScheduler.random`
so that tests can hand it to ``hypothesis.register_random`` and replay a failing example.
"""

from __future__ import annotations

import random

from .._base import AnyHandle, BaseScheduler
from ._worker import Shared

__all__ = ["WorkStealingScheduler"]


class WorkStealingScheduler(BaseScheduler):
    """N workers with their own deques that steal from each other when idle."""

    name = "work_stealing"

    def __init__(self, workers: int, *, max_pending: int | None = None, seed: int = 0) -> None:
        super().__init__(workers, max_pending=max_pending)
        self._random = random.Random(seed)
        self._shared = Shared(workers, self._random, self._run_one, self._count_stolen)
        self._start_workers(self._work, workers)

    @property
    def random(self) -> random.Random:
        """The scheduler's only source of randomness (which sibling a thief tries first)."""
        return self._random

    def _work(self, index: int) -> None:
        self._shared.workers[index].run()

    def _push(self, handle: AnyHandle) -> None:
        self._shared.push(handle)

    def _take_queued(self) -> list[AnyHandle]:
        return self._shared.drain()

    def _stop_workers(self) -> None:
        self._shared.stop()
