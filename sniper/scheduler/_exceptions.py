"""Exceptions raised by schedulers and task handles.

They separate "you used a closed or full scheduler" (fix the caller or back off) from failures of
the task itself, which reach the awaiter unchanged.
"""

from __future__ import annotations

__all__ = ["SchedulerBusy", "SchedulerClosed", "SchedulerError", "TaskCancelled"]


class SchedulerError(Exception):
    """Base class of the errors a scheduler raises on its own behalf."""


class SchedulerClosed(SchedulerError):
    """``submit`` was called after the scheduler started closing.

    Submit work before ``close``/``aclose``, or open a new scheduler.
    """


class SchedulerBusy(SchedulerError):
    """``submit_nowait`` found ``max_pending`` tasks already queued.

    Like trio's ``WouldBlock``: back off, shed load (an RPC handler answers RESOURCE_EXHAUSTED),
    or use ``submit``, which does not apply the bound.
    """


class TaskCancelled(SchedulerError):
    """The task was cancelled before it started, so it never ran and has no result."""
