"""``sniper bench compile``: what numba costs at start-up, cold and cached.

Each measurement runs in a fresh subprocess so nothing is already imported. The cold run uses
an empty ``NUMBA_CACHE_DIR``; the cached run reuses the cache the cold run wrote, which is what
every process after the first one on a machine sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from sniper._table import print_table

_PROBE = r"""
import json, time
t0 = time.perf_counter()
import sniper
t1 = time.perf_counter()
import numpy as np
from sniper.store import EmbeddingTable, Adagrad
t2 = time.perf_counter()
table = EmbeddingTable(16, capacity=1024, optimizer=Adagrad(0.01), num_shards=2)
signs = np.arange(64, dtype=np.uint64)
offsets = np.arange(0, 65, 8)
table.lookup_pool(signs, offsets)
table.push_grad(signs, offsets, np.ones((8, 16), dtype=np.float32))
t3 = time.perf_counter()
table.lookup_pool(signs, offsets)
table.push_grad(signs, offsets, np.ones((8, 16), dtype=np.float32))
t4 = time.perf_counter()
print(json.dumps({"import sniper": t1 - t0, "import sniper.store (numba)": t2 - t1,
                  "first lookup+push": t3 - t2, "second lookup+push": t4 - t3}))
"""


def _probe(cache_dir: str) -> dict[str, float]:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run() -> None:
    """Print cold and cached start-up times."""
    with tempfile.TemporaryDirectory(prefix="sniper-numba-cache-") as cache_dir:
        cold = _probe(cache_dir)
        cached = _probe(cache_dir)
    print("sniper bench compile: seconds, each column a fresh process")
    rows = [[name, f"{cold[name]:.3f}", f"{cached[name]:.3f}"] for name in cold]
    print_table(["step", "cold cache", "warm cache"], rows)
