"""Where a table's row arrays live: mappings of their own, on small pages, untouched until used.

Why small pages. numpy advises Linux to back each of its allocations of 4 MB or more with 2 MB
transparent huge pages (``MADV_HUGEPAGE``). A table's row arrays (weights, optimizer state,
``slot_of_row``, stamps, Adam's steps) are sized for the variable's whole vocabulary and
filled from the start of each shard's row range as new signs arrive. On huge pages the first
row a shard takes has 2 MB zeroed at once (32,768 rows of dim 16), and a variable of 8 shards
that has seen a few hundred signs holds 8 x 2 MB of each array. seed_ctr at scale 1.0 spent
2.1-4.5 s of system time in its first 60 batches (a 2-3 s run) zeroing pages; on 4 KB pages,
0.7-0.8 s, and the run trained 33-46% more examples/s. Full tables, looked up and pushed at
random, ran within 0-3% of their speed on huge pages (the page walks of 4 KB pages hit the
caches): CHANGELOG.md, 2026-11-27.

Why mappings of their own. Advice only applies to pages not yet touched, and ``np.zeros`` does
not promise untouched memory: once a process has freed large buffers (and
:func:`sniper.runtime.reuse_freed_memory` has blocks up to 32 MiB come from the heap), glibc
hands back recycled heap memory and zeroes it with ``memset``, on whatever pages it had. A
private anonymous mapping is the kernel's zero pages until a row is written, and is unmapped
when the array is freed.

The hash index keeps numpy's allocation and advice: it is written whole when the table is made,
and its probes land anywhere in it, which is where huge pages spare the most TLB misses.
"""

from __future__ import annotations

import logging
import math
import mmap
from typing import Any

import numpy as np
from numpy.typing import DTypeLike, NDArray

__all__ = ["untouched_zeros"]

log = logging.getLogger("sniper.store")

_NO_HUGE_PAGES: int | None = getattr(mmap, "MADV_NOHUGEPAGE", None)
"""Linux's advice; None where the platform has none (no transparent huge pages to refuse)."""


def untouched_zeros(shape: tuple[int, ...], dtype: DTypeLike) -> NDArray[Any]:
    """A zeroed array in a private anonymous mapping of its own, advised onto small pages,
    whose pages the kernel zeroes one at a time as they are first written. Page-aligned, so
    a row of 16 float32 spans one cache line instead of straddling two, which halves the
    cache misses of a random row gather (pooling 270k zipf signs over 5M rows took 1.4 ms
    instead of 2.2). A refused advice is logged, not raised: the array works the same, its
    first touches cost more."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes == 0:
        return np.zeros(shape, dtype)
    memory = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if _NO_HUGE_PAGES is not None:
        try:
            memory.madvise(_NO_HUGE_PAGES)
        except OSError as exc:  # a kernel built without transparent huge pages
            log.debug("madvise(MADV_NOHUGEPAGE) refused: %s", exc)
    return np.frombuffer(memory, dtype).reshape(shape)
