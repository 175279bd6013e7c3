"""The ``inline`` backend: every task runs in its submitter, inside ``submit``.

It is the baseline the other backends are measured against: zero dispatch cost, no
parallelism, and an event loop that is blocked while a task runs. Because a task is done before
``submit`` returns, nothing is ever queued, so there is nothing to cancel or drain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ._base import AnyHandle, BaseScheduler, check_positive
from ._key import KeyLike
from ._task import MergeFn, TaskHandle

__all__ = ["InlineScheduler", "scheduler_class"]

T = TypeVar("T")


class InlineScheduler(BaseScheduler):
    """Runs each task in the calling thread; ``workers`` is validated and otherwise ignored."""

    name = "inline"

    def __init__(self, workers: int = 1, *, max_pending: int | None = None) -> None:
        check_positive("workers", workers)
        # Statistics report one "worker": whichever thread called submit.
        super().__init__(1, max_pending=max_pending)

    def _admit(
        self,
        key: KeyLike,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        merge: MergeFn | None,
        *,
        bounded: bool,
    ) -> TaskHandle[T]:
        handle = super()._admit(key, fn, args, merge, bounded=bounded)
        self._run_one(handle, 0)
        return handle

    def _push(self, handle: AnyHandle) -> None:
        """Nothing to queue: ``_admit`` runs the task as soon as the lock is released."""

    def _take_queued(self) -> list[AnyHandle]:
        return []

    def _stop_workers(self) -> None:
        self._exited._set()


scheduler_class = InlineScheduler
