"""The ``work_stealing`` backend, one concern per module as in tokio's ``multi_thread``.

``_queue`` (local deques and the inject queue), ``_park`` (sleeping without spinning),
``_idle`` (who is parked or searching, whom to wake), ``_worker`` (the run loop, its
work-search order and shutdown steps) and ``_scheduler`` (the ``Scheduler`` glue).
"""

from ._scheduler import WorkStealingScheduler as WorkStealingScheduler

scheduler_class = WorkStealingScheduler

__all__ = ["WorkStealingScheduler", "scheduler_class"]
