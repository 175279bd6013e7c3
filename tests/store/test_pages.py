"""A table's row arrays sit untouched on small pages until rows are written, even in a process
whose heap holds freed memory; its hash index keeps numpy's huge-page advice."""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sniper.runtime import reuse_freed_memory
from sniper.store import Adagrad, Adam, EmbeddingTable
from sniper.store._pages import untouched_zeros
from sniper.store._pointers import address

SHARDS = 8


def _flags(array: NDArray[Any]) -> list[str]:
    """The VmFlags of the mapping that holds ``array``'s first whole page."""
    at = -(-address(array) // mmap.PAGESIZE) * mmap.PAGESIZE
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(maxsplit=1)[0]
        if "-" in head and not head.endswith(":"):  # a mapping's first line: START-END ...
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start <= at < end
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {at:#x}")


def _resident_pages(array: NDArray[Any]) -> int:
    """How many of the pages ``array``'s data spans are in memory (mincore(2))."""
    page = mmap.PAGESIZE
    start = address(array) // page * page
    pages = -(-(address(array) + array.nbytes - start) // page)
    vector = (ctypes.c_ubyte * pages)()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    assert libc.mincore(start, pages * page, vector) == 0, ctypes.get_errno()
    return sum(byte & 1 for byte in vector)


def _rows(table: EmbeddingTable) -> list[NDArray[Any]]:
    return [table._weights, table._state, table._slot_of_row, table._stamps, table._steps]


def _fresh_table_checked() -> None:
    table = EmbeddingTable(16, capacity=1 << 20, optimizer=Adam(0.01), num_shards=SHARDS)
    for array in _rows(table):
        assert "nh" in _flags(array)
        assert _resident_pages(array) == 0  # nothing touched yet
        assert address(array) % mmap.PAGESIZE == 0  # rows on cache lines
    assert "nh" not in _flags(table._slots)

    # New signs land at the start of every shard's row range: each shard touches a page or
    # two of each row array, not the 2 MB a huge page would zero there.
    signs = np.arange(1, 4097, dtype=np.uint64)
    table.lookup_pool(signs, np.arange(signs.size + 1))
    assert len(table) == signs.size
    touched = _resident_pages(table._weights)
    assert 0 < touched <= SHARDS * 16, touched  # 512 rows of 64 bytes a shard: 8 pages


def test_a_table_s_rows_are_untouched_small_pages_until_written() -> None:
    _fresh_table_checked()


def test_so_they_are_in_a_process_whose_heap_holds_freed_memory() -> None:
    # As sniper's processes run: large blocks from the heap, and some of them freed. np.zeros
    # of such a size then returns memory glibc has zeroed with memset: touched already.
    reuse_freed_memory()
    freed = [np.ones(n << 20, np.uint8) for n in (30, 24, 16)]
    del freed
    assert _resident_pages(np.zeros(16 << 20, np.uint8)) > 0  # what the table must avoid
    _fresh_table_checked()


def test_untouched_zeros_takes_any_shape_and_dtype() -> None:
    empty = untouched_zeros((0, 16), np.float32)
    assert empty.shape == (0, 16) and empty.dtype == np.float32
    rows = untouched_zeros((3, 5), np.int32)
    assert rows.shape == (3, 5) and rows.flags.writeable and not rows.any()
    rows[2, 4] = 7
    assert rows.sum() == 7
    table = EmbeddingTable(4, capacity=64, optimizer=Adagrad(0.1))
    assert table._steps.shape == (0,)  # no steps without Adam
