"""load_kernels: the first table of a process loads every kernel a ps calls, not its first
batch (``tests/cluster/test_warm_start.py`` checks a whole job)."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
from numba.core.dispatcher import Dispatcher
from sniper.store import EmbeddingTable, make_optimizer, _kernels, _warm

def loaded():
    return {
        name: len(value.signatures)
        for name, value in vars(_kernels).items()
        if isinstance(value, Dispatcher) and value.signatures
    }

assert not _warm._started.is_set() and not loaded()  # importing the store loads nothing
EmbeddingTable(16, capacity=64, optimizer=make_optimizer("adagrad", {"lr": 0.05}))
first = loaded()
wanted = {"first_decrease", "split_by_shard", "map_many", "pool_many", "push_many", "max_abs_many"}
assert _warm._started.is_set() and wanted <= set(first), sorted(first)
EmbeddingTable(16, capacity=64, optimizer=make_optimizer("adam", {"lr": 0.05}), num_shards=3)
assert loaded() == first  # the second table: nothing more, whatever its optimizer
print("ok")
"""


def test_the_first_table_loads_the_kernels_of_every_request() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], check=False, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


SERVE = """
from sniper.rpc._http2 import Server
from sniper.store import _warm

async def start(self, *args, **kwargs):
    print("loaded before listening:", _warm._started.is_set(), flush=True)
    raise SystemExit(0)

Server.start = start
from sniper.cli import main
main(["serve", "--role", "ps", "--port", "0"])
"""


def test_a_ps_server_loads_the_kernels_before_it_listens() -> None:
    """So that no request waits for them (on an empty cache they take seconds to compile)."""
    out = subprocess.run([sys.executable, "-c", SERVE], check=False, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "loaded before listening: True"
