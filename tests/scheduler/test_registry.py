"""Opening schedulers by name: lazy imports, validation at the edge, exact error messages."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import sniper.scheduler
from sniper.scheduler import SCHEDULER_NAMES, open_scheduler

from ._helpers import WAIT

pytestmark = pytest.mark.timeout(60)


def test_unknown_name_lists_the_valid_ones() -> None:
    message = (
        "no scheduler named 'fifo'; valid names are: "
        "adaptive, inline, per_variable, thread_pool, work_stealing"
    )
    with pytest.raises(LookupError, match=f"^{re.escape(message)}$"):
        open_scheduler("fifo", workers=1)


def test_the_names() -> None:
    assert SCHEDULER_NAMES == ("adaptive", "inline", "per_variable", "thread_pool", "work_stealing")


def test_private_modules_are_not_scheduler_names() -> None:
    with pytest.raises(LookupError):
        open_scheduler("abc", workers=1)


@pytest.mark.parametrize("workers", [0, -1, 1.5, True, "2"])
def test_workers_must_be_a_positive_integer(scheduler_name: str, workers: object) -> None:
    message = f'"workers" should be a positive integer, got {workers!r}'
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        open_scheduler(scheduler_name, workers=workers)  # type: ignore[arg-type]


def test_max_pending_must_be_a_positive_integer(scheduler_name: str) -> None:
    with pytest.raises(ValueError, match='"max_pending" should be a positive integer, got 0'):
        open_scheduler(scheduler_name, workers=1, max_pending=0)


def test_unknown_options_are_refused(scheduler_name: str) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        open_scheduler(scheduler_name, workers=1, colour="blue")


def test_workers_default_to_the_cpu_count() -> None:
    with open_scheduler("thread_pool") as scheduler:
        assert scheduler.statistics().workers == (os.cpu_count() or 1)


def test_every_name_is_a_backend_module(scheduler_name: str) -> None:
    with open_scheduler(scheduler_name, workers=1) as scheduler:
        assert scheduler.name == scheduler_name
        assert scheduler.statistics().backend == scheduler_name


def test_backends_are_imported_only_when_opened() -> None:
    code = (
        "import sys, sniper.scheduler as s\n"
        "backends = [m for m in sys.modules if m.startswith('sniper.scheduler._') and "
        "m.split('.')[2][1:] in s.SCHEDULER_NAMES]\n"
        "assert backends == [], backends\n"
        "s.open_scheduler('thread_pool', workers=1).close()\n"
        "assert 'sniper.scheduler._thread_pool' in sys.modules\n"
        "assert 'sniper.scheduler._work_stealing' not in sys.modules\n"
    )
    root = Path(sniper.scheduler.__file__).parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, timeout=WAIT * 3)
