"""How much parallel work this machine can do right now, for reading a measured speedup.

On a shared VM another tenant may hold a core; a two-thread speedup of 1.4 means one thing on
an idle machine and another when only 1.5 cores are free. Benches and experiments print this
ceiling next to their own ratios.
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor

__all__ = ["parallel_capacity"]


def _spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def parallel_capacity(workers: int, n: int = 3_000_000) -> float:
    """How much faster ``workers`` processes of pure arithmetic run than one, right now.

    On a shared VM another tenant may hold a core; a scheduler's speedup can only be read
    against this ceiling, so benches print it next to their own ratios.
    """
    start = time.perf_counter()
    for _ in range(workers):
        _spin(n)
    sequential = time.perf_counter() - start
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_spin, [10] * workers))
        start = time.perf_counter()
        list(pool.map(_spin, [n] * workers))
        parallel = time.perf_counter() - start
    return sequential / parallel
