"""start_numba: the first table of a process starts numba's runtime, not its first batch."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
from sniper.store import EmbeddingTable, make_optimizer, _warm
started = _warm.start_numba.cache_info
assert started().misses == 0  # importing the store compiles and loads nothing
EmbeddingTable(16, capacity=64, optimizer=make_optimizer("adagrad", {"lr": 0.05}))
assert started().misses == 1
EmbeddingTable(16, capacity=64, optimizer=make_optimizer("adagrad", {"lr": 0.05}))
assert (started().misses, started().hits) == (1, 1)  # the second table: nothing more
print("ok")
"""


def test_the_first_table_starts_numba() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], check=False, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
