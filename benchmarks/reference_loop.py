"""The reference loop: is the machine quiet enough to measure on?

Twenty million Python additions on one core, timed. On the machine of docs/benchmarks.md it
takes 1.2-1.7 s when the machine is quiet and 2.6-3.2 s when another tenant holds the cores.
``series.py`` runs it at the start of every round; publish its range beside the figures, and
distrust a comparison whose rounds saw very different times.

Usage: ``python benchmarks/reference_loop.py``
"""

from __future__ import annotations

import time

ADDITIONS = 20_000_000


def reference_seconds() -> float:
    """Seconds the loop takes now."""
    start = time.perf_counter()
    total = 0
    for i in range(ADDITIONS):
        total += i * i
    return time.perf_counter() - start


if __name__ == "__main__":
    print(f"ref loop {reference_seconds():.2f}s")
