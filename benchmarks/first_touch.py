"""First touches of fresh memory, and of memory freed moments before.

On the benchmark machine of docs/benchmarks.md (a Firecracker VM booted with
``page_reporting.page_reporting_order=11``) the guest hands memory it frees back to the host
about 2 s later, and touching it again costs a host fault per page. A table's new rows are
such first touches, which is what a run at scale 1.0 pays and the peers, whose tables are
allocated before their clocks start, do not. This script allocates 2 GiB, writes a byte a
page, frees it, and does it again after pauses of 0, 1, 3 and 10 s. On 2026-11-24 it printed
0.79 GB/s fresh, 10.1-10.5 GB/s within a second of the free, and 1.66 and 0.98 GB/s after 3
and 10 s. On a machine that keeps freed memory, every line reads about the same.

Usage: ``python benchmarks/first_touch.py``
"""

from __future__ import annotations

import time

import numpy as np

GIB = 2
PAGE = 4096


def touch() -> float:
    """GB/s of writing one byte a page of ``GIB`` GiB of fresh zeros."""
    memory = np.zeros(GIB << 30, np.uint8)
    start = time.perf_counter()
    memory[::PAGE] = 1
    return GIB / (time.perf_counter() - start)


if __name__ == "__main__":
    print(f"fresh: {touch():.2f} GB/s")
    for wait in (0, 1, 3, 10):
        time.sleep(wait)
        print(f"freed {wait} s before: {touch():.2f} GB/s")
