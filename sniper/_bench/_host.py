"""How much of the machine its host took during a run: the steal time of ``/proc/stat``.

Why. On a virtual machine the host runs other work on the same physical cores, and the time it
takes from this guest is counted as *steal*. A benchmark's ratio compares runs made one after
the other: when the host took 10% of the CPU during one side and 1% during the other, the ratio
moves by about that much, more than most changes a benchmark is run to judge. On the 2-core
machine of docs/benchmarks.md, steal reached 13% of a second during a series, and one series'
kernel-bound limits (the same work each round) ran from 58.7 to 97.4 ms a batch. So each run's
share is printed beside its figures: a round whose sides differ in it says more about the host
than about either side.

The share is of every CPU's time over the run, as ``top``'s ``st``: 0.05 is 5%. Where the kernel
gives no steal field (not Linux), there is no figure.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

__all__ = ["STAT", "cpu_jiffies", "describe_steal", "steal_during"]

T = TypeVar("T")

STAT = Path("/proc/stat")
"""The kernel's CPU counters: its first line sums every CPU's."""

_FIELDS = 8
"""user, nice, system, idle, iowait, irq, softirq, steal (guest time is already in user)."""


def cpu_jiffies(stat: Path = STAT) -> tuple[int, int] | None:
    """``(steal, total)`` clock ticks of every CPU since boot; None where ``stat`` cannot be
    read or its ``cpu`` line has no steal field."""
    try:
        with stat.open() as lines:
            first = lines.readline().split()
    except OSError:
        return None
    if len(first) <= _FIELDS or first[0] != "cpu":
        return None
    try:
        ticks = [int(value) for value in first[1 : _FIELDS + 1]]
    except ValueError:
        return None
    return ticks[-1], sum(ticks)


def steal_during(run: Callable[[], T], stat: Path = STAT) -> tuple[T, float | None]:
    """``run()``'s result, and the share of the machine's CPU time its host took meanwhile
    (None where it is not known, or no tick passed)."""
    before = cpu_jiffies(stat)
    result = run()
    after = cpu_jiffies(stat)
    if before is None or after is None or after[1] <= before[1]:
        return result, None
    return result, (after[0] - before[0]) / (after[1] - before[1])


def describe_steal(share: float | None) -> str:
    """A table cell: ``"3.1%"``, or ``"-"`` where the share is not known."""
    return "-" if share is None else f"{share:.1%}"
