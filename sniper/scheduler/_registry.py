"""Opening a scheduler by name, importing its backend only when it is asked for.

Like anyio's ``get_async_backend``: ``sniper.scheduler._{name}`` is imported on demand and
must define ``scheduler_class``, so a server started with ``--scheduler=work_stealing`` never
imports the other backends.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Final

from ._abc import Scheduler
from ._base import BaseScheduler

__all__ = ["SCHEDULER_NAMES", "open_scheduler"]

SCHEDULER_NAMES: Final = ("inline", "per_variable", "thread_pool", "work_stealing")
"""Every name ``open_scheduler`` accepts."""


def open_scheduler(name: str, *, workers: int | None = None, **options: Any) -> Scheduler:
    """Open the scheduler backend called ``name`` with ``workers`` threads.

    ``workers`` defaults to the number of CPUs. ``options`` go to the backend:
    ``max_pending`` (every backend), ``max_batch`` (``per_variable``), ``seed``
    (``work_stealing``). The result is a context manager, sync and async::

        async with open_scheduler("per_variable", workers=4) as scheduler:
            rows = await scheduler.run(TaskKey("emb", shard), lookup, signs)
    """
    if name not in SCHEDULER_NAMES:
        raise LookupError(
            f"no scheduler named {name!r}; valid names are: {', '.join(SCHEDULER_NAMES)}"
        )
    module = importlib.import_module(f"sniper.scheduler._{name}")
    cls: type[BaseScheduler] = module.scheduler_class
    if workers is None:
        workers = os.cpu_count() or 1
    return cls(workers, **options)
