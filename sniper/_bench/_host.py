"""How much of the machine its host took during a run: the steal time of ``/proc/stat``.

Why. On a virtual machine the host runs other work on the same physical cores, and the time it
takes from this guest is counted as *steal*. A benchmark's ratio compares runs made one after
the other: when the host took 10% of the CPU during one side and 1% during the other, the ratio
moves by about that much, more than most changes a benchmark is run to judge. On the 2-core
machine of docs/benchmarks.md, steal reached 13% of a second during one series. So each run's
share is printed beside its figures: a round whose sides differ in it says more about the host
than about either side. (A host can slow a guest in ways steal does not count, too: shared
caches, memory bandwidth, clock speed.)

The share is of every CPU's time over the run, as ``top``'s ``st``: 0.05 is 5%. The counters
are :func:`sniper.runtime.machine_steal_reading`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from sniper.runtime import machine_steal_reading

__all__ = ["describe_steal", "steal_during"]

T = TypeVar("T")


def steal_during(run: Callable[[], T], stat: Path | None = None) -> tuple[T, float | None]:
    """``run()``'s result, and the share of the machine's CPU time its host took meanwhile.
    None where the counters are not known (not Linux; ``stat``: another file than
    ``/proc/stat``), no tick passed, or they moved in a way no share can come from (steal
    going back, or past the ticks that passed: some hypervisors' counters jump after a live
    migration)."""
    before = machine_steal_reading(stat)
    result = run()
    after = machine_steal_reading(stat)
    if before is None or after is None:
        return result, None
    stolen, passed = after[0] - before[0], after[1] - before[1]
    if passed <= 0 or not 0 <= stolen <= passed:
        return result, None
    return result, stolen / passed


def describe_steal(share: float | None) -> str:
    """A table cell: ``"3.1%"``, or ``"-"`` where the share is not known."""
    return "-" if share is None else f"{share:.1%}"
