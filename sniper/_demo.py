"""``sniper demo``: the most complete thing sniper runs today, on the embedded ``seed_ctr`` shape.

It runs the ps side of training in one process: every variable of the workload as a sharded
Adagrad table in a :class:`sniper.roles.PsEngine`, on the chosen scheduler, driven from an
async event loop (anyio on asyncio) the way the gRPC service will drive it. Each step feeds a
synthetic zipf batch (FeedSample), looks it up (EmbeddingLookup) and pushes a gradient
(PushGrad). The gradient is synthetic: the dense model and trainer come with ``sniper train``.
It then prints per-op latency percentiles, throughput, and what the tables and scheduler did.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
import numpy as np

from sniper._bench._report import print_table
from sniper._local import Batch, make_batches, make_tables
from sniper._metrics import Histogram
from sniper._placement import print_placement
from sniper._workload import Workload
from sniper.roles import PsEngine
from sniper.scheduler import open_scheduler
from sniper.store import Adagrad, EmbeddingTable


@dataclass(frozen=True)
class DemoConfig:
    """What ``sniper demo`` runs; validated when built from the command line."""

    scheduler: str = "work_stealing"
    workers: int = 2
    steps: int = 30
    num_ps: int = 2
    seed: int = 0


OPS = ("FeedSample", "EmbeddingLookup", "PushGrad")


async def _run_steps(
    engine: PsEngine, batches: list[Batch], config: DemoConfig, histograms: dict[str, Histogram]
) -> None:
    names = list(engine.variables)
    rng = np.random.default_rng(config.seed)
    # Step -1 warms up (loads the numba cache, or compiles on a machine's first run) unrecorded.
    for step in range(-1, config.steps):
        batch = batches[step % len(batches)]
        start = time.perf_counter()
        for name, (signs, offsets) in batch.items():
            engine.feed(step, name, signs, offsets)
        fed = time.perf_counter()
        pooled = await engine.lookup_async(step, names)
        looked_up = time.perf_counter()
        grads = {
            name: rng.normal(0, 0.01, r.pooled.shape).astype(np.float32)
            for name, r in pooled.items()
        }
        await engine.push_grad_async(step, grads)
        done = time.perf_counter()
        if step < 0:
            continue
        for op, seconds in zip(OPS, (fed - start, looked_up - fed, done - looked_up), strict=True):
            histograms[op].record(seconds)


def _print_report(
    workload: Workload,
    config: DemoConfig,
    histograms: dict[str, Histogram],
    wall: float,
    tables: dict[str, EmbeddingTable],
    engine: PsEngine,
) -> None:
    examples = config.steps * workload.batch_size
    signs = config.steps * workload.signs_per_batch
    print(
        f"\n{config.steps} steps in {wall:.2f} s: {examples / wall:,.0f} examples/s, "
        f"{signs / wall / 1e6:.1f} M signs/s (lookup + push)"
    )
    rows = []
    for op in OPS:
        snap = histograms[op].snapshot()
        rows.append(
            [op, str(snap.count)]
            + [
                f"{v * 1e3:.1f}"
                for v in (snap.p50_seconds, snap.p95_seconds, snap.p99_seconds, snap.max_seconds)
            ]
        )
    print_table(["op", "count", "p50 ms", "p95 ms", "p99 ms", "max ms"], rows)
    stats = [t.statistics() for t in tables.values()]
    hits = sum(s.hits for s in stats)
    print(
        f"\ntables: {sum(s.rows for s in stats):,} rows in {len(stats)} variables, "
        f"{sum(s.inserts for s in stats):,} inserts, {sum(s.evictions for s in stats):,} "
        f"evictions, hit rate {hits / max(1, hits + sum(s.misses for s in stats)):.1%}, "
        f"{sum(s.bytes for s in stats) / 2**20:,.0f} MiB preallocated"
    )
    sched = engine.scheduler.statistics()
    utilization = ", ".join(f"{u:.0%}" for u in sched.utilization())
    print(
        f"scheduler {sched.backend}: {sched.completed:,} tasks, {sched.stolen:,} stolen, "
        f"worker utilization {utilization}, task run p50 "
        f"{sched.run_time.p50_seconds * 1e3:.2f} ms, queue wait p50 "
        f"{sched.queue_wait.p50_seconds * 1e3:.2f} ms"
    )


def run(workload: Workload, config: DemoConfig) -> None:
    """Run the demo and print its report."""
    print_placement(workload, config.num_ps)
    print(
        f"\nrunning the ps side of {config.steps} training steps in this process: "
        f"{len(workload.variables)} Adagrad tables (dim {workload.embedding_dim}) on the "
        f"{config.scheduler} scheduler with {config.workers} workers"
    )
    batches = make_batches(workload, min(config.steps, 4), config.seed)
    tables = make_tables(workload, Adagrad(lr=0.01))
    histograms = {op: Histogram() for op in OPS}

    async def main() -> None:
        async with open_scheduler(config.scheduler, workers=config.workers) as scheduler:
            engine = PsEngine(scheduler)
            for name, table in tables.items():
                engine.create_variable(name, table)
            await _run_steps(engine, batches, config, histograms)
            wall = sum(histograms[op].snapshot().sum_seconds for op in OPS)
            _print_report(workload, config, histograms, wall, tables, engine)

    anyio.run(main)
