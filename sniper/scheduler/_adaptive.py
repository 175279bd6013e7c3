"""The ``adaptive`` backend: ``work_stealing`` for work worth a thread, ``inline`` for the rest.

A worker thread pays for itself only when the task releases the GIL for most of its run. A ps
request of a few thousand signs per variable does not: its tasks are Python loops around
kernels of tens of microseconds, and on a worker that Python takes turns at the GIL with the
event loop that submitted it. Measured on two cores (CHANGELOG.md, 2026-11-24, cbd9fcb
and 96340ac): a whole one-process job at scale 0.02 ran 18-20% faster with every task inline than
on ``work_stealing``, and 25-35% faster on ``criteo``, while at scale 1.0 (kernels of
milliseconds) ``work_stealing`` ran 45% faster than inline. So the submitter, which knows how
much work a task carries, marks the small ones (``TaskKey.small``), and this backend runs
those inside ``submit`` on the submitting thread and hands every other task to its
work-stealing workers.

A small task runs in its submitter only while no task is queued or running: otherwise it
queues behind them as any task, so the submitter (often an event loop) never waits for a table
lock that a worker's task holds. Run in the submitter, it is admitted, counted and completed as
every task is (closing refuses it and waits for it, ``max_pending`` bounds it), but never
queued: it cannot be cancelled or stolen, its queue wait is zero and its run time is no
worker's busy time.
"""

from __future__ import annotations

from ._base import AnyHandle
from ._work_stealing import WorkStealingScheduler

__all__ = ["AdaptiveScheduler", "scheduler_class"]


class AdaptiveScheduler(WorkStealingScheduler):
    """Runs a task keyed ``small`` in its submitter, and every other on work-stealing workers."""

    name = "adaptive"

    def _runs_in_submitter(self, handle: AnyHandle) -> bool:
        # Only while no task is queued or running: a worker's task may hold a table lock the
        # small one needs (a checkpoint's export holds them all), and the submitter, often an
        # event loop, must not wait for it. A racy read, which decides placement, not results.
        counters = self._counters
        return handle.key.small and counters.pending == 0 and counters.running == 0


scheduler_class = AdaptiveScheduler
