"""Fixtures that run every scheduler test on every backend (and, for async tests, on asyncio
and trio through the ``anyio_backend`` fixture in ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sniper.scheduler import SCHEDULER_NAMES, Scheduler, open_scheduler

from ._helpers import WAIT

WORKERS = {"adaptive": 3, "inline": 2, "per_variable": 2, "thread_pool": 2, "work_stealing": 3}
"""Workers per backend: 2, and 3 for work stealing so a thief has more than one victim."""

QUEUEING = [name for name in SCHEDULER_NAMES if name != "inline"]
"""Backends where a task can wait in a queue (``inline`` runs it inside ``submit``)."""


@pytest.fixture(params=SCHEDULER_NAMES)
def scheduler_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=QUEUEING)
def queueing_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _opened(name: str) -> Iterator[Scheduler]:
    scheduler = open_scheduler(name, workers=WORKERS[name])
    try:
        yield scheduler
    finally:
        scheduler.close(cancel_pending=True, timeout=WAIT)


@pytest.fixture
def scheduler(scheduler_name: str) -> Iterator[Scheduler]:
    """An open scheduler of every backend, closed (cancelling leftovers) after the test."""
    yield from _opened(scheduler_name)


@pytest.fixture
def queueing(queueing_name: str) -> Iterator[Scheduler]:
    """An open scheduler of every backend that queues tasks (all but ``inline``)."""
    yield from _opened(queueing_name)
