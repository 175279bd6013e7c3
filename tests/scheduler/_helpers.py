"""Helpers shared by the scheduler tests.

``Blockers`` and ``WAIT`` belong to the contract checks in :mod:`sniper._contracts`, which
ship with sniper so that plugin backends can be tested the same way; they are re-exported
here for the tests of sniper's own backends.
"""

from __future__ import annotations

import threading

from sniper._contracts._scheduler import WAIT as WAIT
from sniper._contracts._scheduler import Blockers as Blockers
from sniper.scheduler import Scheduler


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
