"""Load every kernel a ps calls at start-up, not on the first batches it serves.

The first kernel a process calls pays 0.2-0.3 s even when every kernel's machine code is in
numba's on-disk cache: numba builds its typing and target contexts and its runtime (NRT) then,
once per process. Measured (``max_abs`` on 1,000 floats, cache warm): 0.24-0.35 s for the
first kernel called, 3 ms for each kernel after it. And on an empty cache (a fresh install, or
after an upgrade), each kernel is compiled at its first call: a first ``sniper train`` compiled
58 kernels while it trained and reported 23.6k examples/s, where the next run, cached, reported
30.5k. Left to the first feed, lookup and push, that time lands inside training, on the
trainer's critical path and in its clock; paid here, it is start-up, before any batch is fed.
So :func:`load_kernels` runs a scratch table through every request a ps serves: a feed's
split and pins, a lookup, a push, the same with rows mapped at lookup, and a push's finite
check. The kernels take the tables' arrays by address, so one scratch table types them for
every table, whatever its optimizer, initializer or admission. Every server of a ps calls it
on a thread before any request (:meth:`sniper.roles.PsSettings.ps_role`); the first table a
process makes calls it too, for a store embedded elsewhere.
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["load_kernels"]

_lock = threading.RLock()
_started = threading.Event()


def load_kernels() -> None:
    """Load every kernel a ps's requests call, from numba's cache or compiled (on an empty
    cache, 17 s on this 2-core machine), by running a scratch table through them; once per
    process. The first table made calls it; a server calls it on a thread before it listens,
    so that no request waits for it (a gRPC deadline is 30 s) and its loop stays free. Later
    calls return at once: the scratch table's own creation calls this again, and another
    thread waits until the first call is done."""
    with _lock:
        if _started.is_set():
            return
        _started.set()  # first: the scratch table below calls this again
        _scratch_requests()


def _scratch_requests() -> None:
    # Imported here: the table module imports this one.
    from sniper.store._grouped import max_abs_matrices
    from sniper.store._optimizers import Adagrad
    from sniper.store._table import EmbeddingTable

    table = EmbeddingTable(4, capacity=64, optimizer=Adagrad(0.1), num_shards=2)
    signs = np.arange(1, 9, dtype=np.uint64)
    offsets = np.arange(0, 9, 2)  # four examples of two signs
    grads = np.ones((4, 4), dtype=np.float32)
    table.split(_read_only(signs), _read_only(offsets))  # a hub's arrays are Arrow's buffers
    fed = table.split(signs, offsets)  # FeedSample: split by shard, then mapped and pinned
    shards = range(table.num_shards)
    for shard in shards:
        table.pin_shard(fed, shard)
    for shard in shards:
        table.lookup_shard(fed, shard)  # EmbeddingLookup: pooled from the pinned rows
    for shard in shards:
        table.push_grad_shard(fed, shard, grads)  # PushGrad
    table.push_grad(signs, offsets, table.lookup_pool(signs, offsets))  # mapped at lookup
    max_abs_matrices([grads])  # a ps's check that gradients are finite


def _read_only(array: np.ndarray) -> np.ndarray:
    """A read-only copy: numba types it apart from a writable array, so it is a kernel of its
    own."""
    copy = array.copy()
    copy.setflags(write=False)
    return copy
