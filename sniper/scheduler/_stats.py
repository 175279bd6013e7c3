"""Scheduler statistics: the frozen snapshot users see, and the counters behind it."""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter

from sniper._metrics import Histogram, LatencySummary

__all__ = ["Counters", "SchedulerStatistics"]


_NONE = LatencySummary(0, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class SchedulerStatistics:
    """What a scheduler has done so far, read at one moment (see ``Scheduler.statistics()``).

    Every submitted task ends in exactly one of ``completed``, ``failed`` or ``cancelled``;
    until then it is ``pending`` or ``running``. So after close,
    ``submitted == completed + failed + cancelled``. The fields from ``stolen`` on have
    defaults (none, empty), so a plugin that does not steal, merge or time its tasks builds
    one from its counts alone.
    """

    backend: str
    """The scheduler's name, as passed to ``open_scheduler``."""
    workers: int
    """Number of worker threads (1 for ``inline``, whose "worker" is each caller)."""
    submitted: int
    """Tasks accepted by ``submit``/``submit_nowait``/``run``."""
    completed: int
    """Tasks that ran and returned."""
    failed: int
    """Tasks that ran and raised; the exception went to their handle."""
    cancelled: int
    """Tasks cancelled before they started; they never ran."""
    stolen: int = 0
    """Tasks a worker took from another worker's queue (``work_stealing`` only)."""
    merged: int = 0
    """Tasks that ran as part of a merged call with at least one other (``per_variable``)."""
    pending: int = 0
    """Tasks accepted but not yet started or cancelled."""
    running: int = 0
    """Tasks started but not yet finished."""
    busy_seconds: tuple[float, ...] = ()
    """Per worker, the seconds spent running tasks; see :meth:`utilization`."""
    elapsed_seconds: float = 0.0
    """Seconds since the scheduler was opened; the denominator of utilization."""
    queue_wait: LatencySummary = _NONE
    """Per task, the time from submit to start."""
    run_time: LatencySummary = _NONE
    """Per call, the time a task function (or one merged call) ran."""
    closed: bool = False
    """True once closing started: ``submit`` raises ``SchedulerClosed``."""

    def utilization(self) -> tuple[float, ...]:
        """Per worker, the fraction of the elapsed time it spent running tasks.

        For ``inline`` the one "worker" is every calling thread together, so the figure can
        exceed 1 when several threads submit at once.
        """
        elapsed = max(self.elapsed_seconds, 1e-12)
        return tuple(busy / elapsed for busy in self.busy_seconds)


class Counters:
    """Mutable counters behind :class:`SchedulerStatistics`.

    Not locked on its own: the scheduler updates it under the same lock that orders submits
    against close, so one lock acquisition covers both. The histograms lock themselves.
    """

    __slots__ = (
        "busy",
        "cancelled",
        "completed",
        "failed",
        "merged",
        "opened_at",
        "pending",
        "queue_wait",
        "run_time",
        "running",
        "stolen",
        "submitted",
    )

    def __init__(self, workers: int) -> None:
        self.opened_at = perf_counter()
        self.submitted = 0
        self.completed = 0
        self.failed = 0
        self.cancelled = 0
        self.stolen = 0
        self.merged = 0
        self.pending = 0
        self.running = 0
        self.busy = [0.0] * workers
        self.queue_wait = Histogram()
        self.run_time = Histogram()

    def snapshot(self, backend: str, closed: bool) -> SchedulerStatistics:
        """Freeze the counters; call with the scheduler's lock held."""
        return SchedulerStatistics(
            backend=backend,
            workers=len(self.busy),
            submitted=self.submitted,
            completed=self.completed,
            failed=self.failed,
            cancelled=self.cancelled,
            stolen=self.stolen,
            merged=self.merged,
            pending=self.pending,
            running=self.running,
            busy_seconds=tuple(self.busy),
            elapsed_seconds=perf_counter() - self.opened_at,
            queue_wait=self.queue_wait.summary(),
            run_time=self.run_time.summary(),
            closed=closed,
        )
