"""A table's row arrays sit on small pages; its hash index keeps numpy's huge-page advice."""

from __future__ import annotations

import mmap
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sniper.store import Adagrad, EmbeddingTable
from sniper.store._pages import small_pages
from sniper.store._pointers import address


def _mapping(array: NDArray[Any]) -> dict[str, str]:
    """The /proc/self/smaps fields of the mapping that holds ``array``'s first whole page (the
    page its data starts in is shared with the allocator's header)."""
    at = -(-address(array) // mmap.PAGESIZE) * mmap.PAGESIZE
    fields: dict[str, str] = {}
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):  # a mapping's first line: START-END ...
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start <= at < end
        elif inside:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    assert fields, f"no mapping holds {at:#x}"
    return fields


def _kib(field: str) -> int:
    return int(field.split(maxsplit=1)[0])


def first_touches() -> None:
    """The checks, in a process of their own: in a long one (pytest's), the table may be
    given heap memory that earlier tests freed and glibc zeroed, touched already."""
    shards = 8
    table = EmbeddingTable(16, capacity=1 << 20, optimizer=Adagrad(0.1), num_shards=shards)
    rows: list[NDArray[Any]] = [table._weights, table._state, table._slot_of_row, table._stamps]
    for array in rows:
        assert "nh" in _mapping(array)["VmFlags"].split()
    assert "nh" not in _mapping(table._slots)["VmFlags"].split()

    # New signs land at the start of every shard's row range: each shard touches a page or
    # two of weights, not the 2 MB a huge page would zero there.
    # (Measured as the change in the mapping: the kernel may have merged it with a neighbour.)
    before = _mapping(table._weights)
    signs = np.arange(1, 4097, dtype=np.uint64)
    table.lookup_pool(signs, np.arange(signs.size + 1))
    assert len(table) == signs.size
    after = _mapping(table._weights)
    assert _kib(after["AnonHugePages"]) == _kib(before["AnonHugePages"])
    grown = _kib(after["Rss"]) - _kib(before["Rss"])
    assert 0 < grown <= shards * 64, grown
    print("ok")


def test_a_table_s_rows_take_small_pages_and_its_index_huge_ones() -> None:
    child = "from tests.store.test_pages import first_touches; first_touches()"
    out = subprocess.run(
        [sys.executable, "-c", child],
        cwd=Path(__file__).parents[2],
        check=False,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_small_pages_needs_a_whole_page() -> None:
    assert not small_pages(np.zeros(16, np.float32))
    assert small_pages(np.zeros(1 << 20, np.float32))
