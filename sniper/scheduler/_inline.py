"""The ``inline`` backend: every task runs in its submitter, inside ``submit``.

It is the baseline the other backends are measured against: zero dispatch cost, no
parallelism, and an event loop that is blocked while a task runs. Because a task is done before
``submit`` returns, nothing is ever queued, so there is nothing to cancel or drain.
"""

from __future__ import annotations

from ._base import AnyHandle, BaseScheduler, check_positive

__all__ = ["InlineScheduler", "scheduler_class"]


class InlineScheduler(BaseScheduler):
    """Runs each task in the calling thread; ``workers`` is validated and otherwise ignored."""

    name = "inline"

    def __init__(self, workers: int = 1, *, max_pending: int | None = None) -> None:
        check_positive("workers", workers)
        # Statistics report one "worker": whichever thread called submit.
        super().__init__(1, max_pending=max_pending)

    _submitter_worker = 0  # the one "worker" statistics report: every caller together

    def _runs_in_submitter(self, handle: AnyHandle) -> bool:
        return True

    def _push(self, handle: AnyHandle) -> None:
        """Never called: every task runs in its submitter."""

    def _take_queued(self) -> list[AnyHandle]:
        return []

    def _stop_workers(self) -> None:
        self._exited._set()


scheduler_class = InlineScheduler
