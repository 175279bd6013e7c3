"""Which of a table's arrays may sit on transparent huge pages.

Why. numpy advises Linux to back each of its allocations of 4 MB or more with 2 MB huge pages
(``MADV_HUGEPAGE``). A table's row arrays (weights, optimizer state, ``slot_of_row``, stamps,
Adam's steps) are sized for the variable's whole vocabulary, left for the kernel to zero on
first touch, and filled from the start of each shard's row range as new signs arrive. On huge
pages the first row a shard takes has 2 MB zeroed at once (32,768 rows of dim 16), and a
variable of 8 shards that has seen a few hundred signs holds 8 x 2 MB of each array. seed_ctr
at scale 1.0 spent 2.1-4.5 s of system time in its first 60 batches (a 2-3 s run) zeroing
pages; on 4 KB pages, 0.7-0.8 s, and the run trained 33-46% more examples/s. Full tables,
looked up and pushed at random, ran within 0-3% of their speed on huge pages (the page walks
of 4 KB pages hit the caches): docs/benchmarks.md, the twenty-second session.

The hash index keeps numpy's advice: it is written whole when the table is made, and its
probes land anywhere in it, which is where huge pages spare the most TLB misses.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
from typing import Any

from numpy.typing import NDArray

from sniper.store._pointers import address

__all__ = ["small_pages"]

log = logging.getLogger("sniper.store")

_NO_HUGE_PAGES: int | None = getattr(mmap, "MADV_NOHUGEPAGE", None)
"""Linux's advice; None where the platform has none (no transparent huge pages to refuse)."""


def _madvise() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    function = libc.madvise
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_MADVISE = _madvise() if _NO_HUGE_PAGES is not None else None


def small_pages(array: NDArray[Any]) -> bool:
    """Advise the kernel to back the whole pages of ``array``'s data with small pages, before
    anything touches them. Returns whether the advice was taken: False where the platform has
    no such advice, where the array spans no whole page, or where the kernel refused (logged;
    the table works the same, its first touches cost more)."""
    if _MADVISE is None or _NO_HUGE_PAGES is None:
        return False
    start = address(array)
    page = mmap.PAGESIZE
    first = -(-start // page) * page
    end = (start + array.nbytes) // page * page
    if end <= first:
        return False
    if _MADVISE(first, end - first, _NO_HUGE_PAGES) != 0:
        log.debug("madvise(MADV_NOHUGEPAGE) refused: %s", os.strerror(ctypes.get_errno()))
        return False
    return True
