"""The trainer's ``cores_busy``: the machine's CPU over its training window, in cores."""

from __future__ import annotations

import os
import time

import pytest

from sniper.roles._trainer import MIN_BUSY_WINDOW, _cores_busy
from sniper.runtime import machine_cpu_reading


def test_cores_busy_is_left_out_where_the_machine_s_cores_are_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``os.cpu_count()`` may be None: the report then has neither figure, not a share of a
    guessed one core beside an unknown machine. On this machine it is never None, so the test
    replaces it."""
    before = machine_cpu_reading()
    started = time.perf_counter() - 2 * MIN_BUSY_WINDOW
    busy, cores = _cores_busy(before, started)
    assert cores is not None and cores == os.cpu_count()
    assert busy is not None and 0 <= busy <= cores
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert _cores_busy(before, started) == (None, None)
    assert _cores_busy(None, started) == (None, None)
