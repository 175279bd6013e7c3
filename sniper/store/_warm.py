"""Start numba's runtime when the first table is made, not on the first batch.

The first kernel a process calls pays 0.2-0.3 s even when every kernel's machine code is in
numba's on-disk cache: numba builds its typing and target contexts and its runtime (NRT) then,
once per process. Measured (``max_abs`` on 1,000 floats, cache warm): 0.24-0.35 s for the
first kernel called, 3 ms for each kernel after it. Left to the first lookup or push, that
time lands inside training, on the trainer's critical path; paid here, it is start-up, before
any batch is fed.
"""

from __future__ import annotations

import functools

import numpy as np

from sniper.store import _kernels as k

__all__ = ["start_numba"]


@functools.cache
def start_numba() -> None:
    """Call one small kernel, once per process (later calls return at once; two threads that
    race here both call it, which is harmless)."""
    k.max_abs(np.zeros(1, dtype=np.float32))  # it allocates: NRT starts too
