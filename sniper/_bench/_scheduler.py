"""``sniper bench scheduler``: the seed_ctr lookup step through every scheduler backend.

One step is what a ps does for EmbeddingLookup of a whole batch: all 76 variables of
``seed_ctr`` (719k signs, one variable with 270k) pooled on the real store kernels through
:class:`sniper.roles.PsEngine`. Variables with many signs per batch get several shards
(``_spec.SHARD_SIGNS`` signs each), so their work becomes several tasks. Every backend
runs the same batches on the same tables; ``inline`` is the baseline. The seeds' pathology,
every table behind one process-wide lock (``lock="global"``), runs on ``work_stealing`` in the
same table.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from sniper._bench._local import Batch, make_batches, make_tables, shards_for
from sniper._bench._report import parallel_capacity
from sniper._table import print_table
from sniper.data._workload import Workload
from sniper.roles import PsEngine
from sniper.scheduler import SCHEDULER_NAMES, open_scheduler
from sniper.store import SGD, EmbeddingTable

SPEEDUP_TARGET = {"work_stealing": 1.7}
SLOWDOWN_LIMIT = 0.9


@dataclass(frozen=True)
class BackendResult:
    backend: str
    lock: str
    latencies: NDArray[np.float64]
    utilization: float

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies, q))


@contextmanager
def _engine(backend: str, workers: int, tables: dict[str, EmbeddingTable]) -> Iterator[PsEngine]:
    with open_scheduler(backend, workers=workers) as scheduler:
        engine = PsEngine(scheduler)
        for name, table in tables.items():
            engine.create_variable(name, table)
        yield engine


def measure(
    backend: str,
    lock: str,
    workers: int,
    tables: dict[str, EmbeddingTable],
    batches: list[Batch],
    steps: int,
) -> BackendResult:
    """Latency of ``steps`` lookup steps, after one warm-up pass over every batch."""
    with _engine(backend, workers, tables) as engine:
        names = list(tables)

        def step(i: int) -> float:
            batch = batches[i % len(batches)]
            for name, (signs, offsets) in batch.items():
                engine.feed(i, name, signs, offsets)
            start = time.perf_counter()
            engine.lookup(i, names)
            elapsed = time.perf_counter() - start
            engine.release(i)
            return elapsed

        for i in range(len(batches)):
            step(i)
        before = engine.scheduler.statistics()
        wall_start = time.perf_counter()
        latencies = np.array([step(i) for i in range(steps)])
        wall = time.perf_counter() - wall_start
        after = engine.scheduler.statistics()
    busy = sum(after.busy_seconds) - sum(before.busy_seconds)
    return BackendResult(backend, lock, latencies, busy / (wall * len(after.busy_seconds)))


def run(workload: Workload, *, workers: int, steps: int, batches: int, seed: int) -> None:
    """Measure every backend and the global-lock pathology; print one table."""
    huge = workload.largest()
    print(
        f"sniper bench scheduler: {workload.name} lookup step, {len(workload.variables)} "
        f"variables, {workload.signs_per_batch:,} signs per batch ({huge.name}: "
        f"{huge.signs_per_batch:,} in {shards_for(huge)} shards), {workers} workers, "
        f"{steps} steps per backend"
    )
    data = make_batches(workload, batches, seed)
    tables = make_tables(workload, SGD(0.01), "shard")
    results = [
        measure(name, "shard", workers, tables, data, steps)
        for name in ("inline", *[n for n in SCHEDULER_NAMES if n != "inline"])
    ]
    del tables
    results.append(
        measure(
            "work_stealing",
            "global",
            workers,
            make_tables(workload, SGD(0.01), "global"),
            data,
            steps,
        )
    )
    _print(results)
    print(
        f"\nparallel capacity of this machine now: {workers} processes of pure arithmetic run "
        f"{parallel_capacity(workers):.2f}x faster than one (the ceiling for 'vs inline')"
    )


def _print(results: list[BackendResult]) -> None:
    baseline = results[0].percentile(50)
    rows = []
    for r in results:
        speedup = baseline / r.percentile(50)
        target = SPEEDUP_TARGET.get(r.backend, SLOWDOWN_LIMIT) if r.lock == "shard" else None
        verdict = "" if target is None else ("meets" if speedup >= target else "MISSES")
        rows.append(
            [
                r.backend,
                r.lock,
                f"{r.percentile(50) * 1e3:.1f}",
                f"{r.percentile(95) * 1e3:.1f}",
                f"{r.percentile(99) * 1e3:.1f}",
                f"{speedup:.2f}x",
                f"{100 * r.utilization:.0f}%",
                "-" if target is None else f">= {target}x",
                verdict,
            ]
        )
    print()
    print_table(
        [
            "backend",
            "store lock",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "vs inline",
            "worker util",
            "target",
            "",
        ],
        rows,
    )
