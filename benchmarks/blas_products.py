"""The dense model's three products at criteo's shapes, on one BLAS thread.

The trainer runs its model with numpy's BLAS limited to one thread (``blas_threads``). On the
machine of docs/benchmarks.md's 2026-11-27 runs, an AMD EPYC of family 26 with AVX-512,
OpenBLAS 0.3.31 picked its Haswell kernels (the script prints the architecture
``threadpoolctl`` reports); ``OPENBLAS_CORETYPE=SkylakeX``, set before numpy loads, picks the
AVX-512 ones. This
script times the forward product ``x @ w`` (batch 1024, 429 inputs, 64 hidden), the weight
gradient ``x.T @ g`` and the input gradient, transposed as the trainer computes it, ``w @
g.T``. On 2026-11-27 ``x @ w`` took 0.45 ms
as chosen and 0.24 ms with ``SkylakeX``, but the criteo job trained only 2-3% faster, since its
event loop, not the model, bounds it. Compare::

    python benchmarks/blas_products.py
    OPENBLAS_CORETYPE=SkylakeX python benchmarks/blas_products.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

BATCH, INPUTS, HIDDEN = 1024, 429, 64
REPEATS = 200


def best_ms(product: Callable[[], object]) -> float:
    """The fastest of ``REPEATS`` calls, in ms."""
    product()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        product()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH, INPUTS)).astype(np.float32)
    w = rng.normal(size=(INPUTS, HIDDEN)).astype(np.float32)
    g = rng.normal(size=(BATCH, HIDDEN)).astype(np.float32)
    for pool in threadpool_info():
        print(f"{pool['internal_api']} {pool['version']}: {pool.get('architecture', '?')}")
    with threadpool_limits(1):
        print(f"x @ w   {best_ms(lambda: x @ w):.3f} ms")
        print(f"x.T @ g {best_ms(lambda: x.T @ g):.3f} ms")
        print(f"w @ g.T {best_ms(lambda: w @ g.T):.3f} ms")


if __name__ == "__main__":
    main()
