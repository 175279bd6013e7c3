"""Keep freed multi-megabyte buffers in the process instead of handing them back to the kernel.

Every batch, a ps and a trainer allocate and free the same few buffers of 1 to 6 MB: the 5 MB
lookup answer, its HTTP/2 frames, a gradient message. glibc's dynamic threshold serves blocks
that large with a fresh ``mmap`` and gives them back on ``free``, and trims the heap top as soon
as 128 KiB are free, so each new buffer is written through page faults: copying 5 MB cost 2 to
4 ms where the memory bandwidth allows 0.5. With the thresholds fixed (blocks up to 32 MiB from
the heap; up to 128 MiB of free heap top kept), freed blocks are reused. Measured with
``sniper bench rpc``: the 5 MB 1-sign case went from 35 ms to 15 ms.

The cost: up to ``trim_threshold`` bytes of freed heap stay mapped after a peak, and a freed
block below ``mmap_threshold`` (up to 32 MiB) returns to the heap, not to the kernel. Tables
larger than that are still mapped on their own and given back when freed.

Arrow's buffers come from the same heap. pyarrow's default allocator, mimalloc, gives freed
segments back to the kernel, so each Parquet batch a hub decodes (6 MB at seed_ctr's full
shape) was written on fresh pages, often 2 MB huge ones zeroed whole: over the training window
of the one-process job at scale 1.0 (``perf``), the decoding thread spent 0.5-8% of the job's
CPU zeroing pages, varying from run to run, and 0-0.2% with glibc's allocator (CHANGELOG.md,
2026-11-28). pyarrow makes its default allocator as it is imported, so this must run first.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys
import warnings

__all__ = ["release_freed_memory", "reuse_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MB = 2**20
_MAX_MMAP_THRESHOLD = 32 * _MB  # glibc's HEAP_MAX_SIZE / 2 on 64-bit: larger values are refused
_ARROW_POOL = "ARROW_DEFAULT_MEMORY_POOL"
"""Arrow's own setting of its default allocator, which a user who sets it keeps."""


def reuse_freed_memory(mmap_threshold: int = 32 * _MB, trim_threshold: int = 128 * _MB) -> bool:
    """Fix glibc's ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD``; False where not glibc.

    The CLI calls this at start-up; call it once at the start of a process that embeds
    sniper's server or client, before it imports pyarrow (``sniper.data``, ``sniper.roles``,
    ``sniper.cluster`` and others do), so that Arrow allocates from glibc too. The trim
    threshold is set only once the mmap threshold is accepted: on its own it would freeze
    glibc's dynamic threshold at 128 KiB, which is worse.
    """
    if not 0 < mmap_threshold <= _MAX_MMAP_THRESHOLD:
        raise ValueError(
            f"mmap_threshold must be in (0, {_MAX_MMAP_THRESHOLD}], got {mmap_threshold}"
        )
    if not 0 < trim_threshold < 2**31:
        raise ValueError(f"trim_threshold must be in (0, 2**31), got {trim_threshold}")
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if not mallopt(_M_MMAP_THRESHOLD, mmap_threshold) or not mallopt(
        _M_TRIM_THRESHOLD, trim_threshold
    ):
        warnings.warn(
            "glibc refused sniper's malloc thresholds; multi-MB buffers will be page-faulted "
            "in for every message (slower, not wrong)",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    _arrow_from_the_heap()
    return True


def _arrow_from_the_heap() -> None:
    """Make glibc Arrow's default allocator (its ``system`` pool), unless the environment
    names one (``ARROW_DEFAULT_MEMORY_POOL``, not empty). Arrow reads that variable when
    pyarrow is imported, here and in the processes this one starts. A pyarrow imported already
    has only the pool its Python calls default to changed: Arrow's own default (which some of
    its C++ allocations use) stays the one it made."""
    if os.environ.get(_ARROW_POOL):
        return
    os.environ[_ARROW_POOL] = "system"
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:
        pyarrow.set_memory_pool(pyarrow.system_memory_pool())


def release_freed_memory() -> bool:
    """Give the kernel back the free pages of every malloc arena (glibc's ``malloc_trim``);
    False where not glibc.

    What a burst of large requests leaves behind: their HTTP/2 frames and decoded copies are
    freed, but below the mmap threshold they were carved from the arenas, and free memory
    inside an arena stays mapped (8 concurrent 229 MiB Push calls left 4.9 GB held in a ps).
    A ps calls this once its requests in flight are done after such a burst; it walks the
    arenas, so it is not for every request."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.malloc_trim.restype = ctypes.c_int
    libc.malloc_trim(0)
    return True
