"""``sniper bench ps``: the ps side of training steps alone, on a workload's shape.

By default (``--transport grpc``) it starts ``--num-ps`` real ``sniper serve`` processes on
loopback and drives them as a hub and trainer would, through :class:`sniper.roles.PsCluster`.
Each variable lives where a fresh ``sniper train`` job on the workload at scale 1.0 puts it
(``placement = "balanced"``: :func:`~sniper.cluster._placement.workload_placement`), as a
sharded Adagrad table. Each step
sends a synthetic zipf batch (FeedSample), looks it up (EmbeddingLookup) and pushes a gradient
(PushGrad). The gradient is synthetic: the dense model and trainer come with ``sniper train``.
At the end it stops every server and checks that each exited cleanly.

``--transport inprocess`` runs the same steps on a :class:`sniper.roles.PsEngine` in this
process, which isolates the store and scheduler from gRPC. Both print per-op latency
percentiles, throughput, and what the tables did.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import anyio
import numpy as np
from numpy.typing import NDArray

from sniper._bench._local import Batch, make_batches, make_tables
from sniper._metrics import Histogram
from sniper._table import print_table
from sniper.cluster import print_placement, ps_command, server_process, workload_placement
from sniper.data import Workload
from sniper.placement import capacity_for, shards_for
from sniper.roles import PsCluster, PsEngine
from sniper.rpc import PsClient, VariableConfig
from sniper.scheduler import open_scheduler
from sniper.store import Adagrad

LR = 0.01


@dataclass(frozen=True)
class PsBenchConfig:
    """What ``sniper bench ps`` runs; validated when built from the command line."""

    scheduler: str = "adaptive"
    workers: int = 1
    """Worker threads per ps (the ps processes share this machine's cores)."""
    steps: int = 30
    num_ps: int = 2
    seed: int = 0
    transport: Literal["grpc", "inprocess"] = "grpc"

    def __post_init__(self) -> None:
        if self.transport not in ("grpc", "inprocess"):
            raise ValueError(f"transport must be grpc or inprocess, got {self.transport!r}")


OPS = ("FeedSample", "EmbeddingLookup", "PushGrad")


class _Steps(Protocol):
    """One training step's three calls, whatever carries them."""

    async def feed(self, step: int, batch: Batch) -> None: ...
    async def lookup(self, step: int, names: list[str]) -> dict[str, NDArray[np.float32]]: ...
    async def push(self, step: int, grads: dict[str, NDArray[np.float32]]) -> None: ...


class _InProcess:
    def __init__(self, engine: PsEngine) -> None:
        self.engine = engine

    async def feed(self, step: int, batch: Batch) -> None:
        self.engine.feed_many(step, [(n, s, o) for n, (s, o) in batch.items()])

    async def lookup(self, step: int, names: list[str]) -> dict[str, NDArray[np.float32]]:
        return {n: r.pooled for n, r in (await self.engine.lookup_async(step, names)).items()}

    async def push(self, step: int, grads: dict[str, NDArray[np.float32]]) -> None:
        await self.engine.push_grad_async(step, grads)


class _Grpc:
    def __init__(self, cluster: PsCluster) -> None:
        self.cluster = cluster

    async def feed(self, step: int, batch: Batch) -> None:
        await self.cluster.feed_sample(step, batch)

    async def lookup(self, step: int, names: list[str]) -> dict[str, NDArray[np.float32]]:
        return {n: p.pooled for n, p in (await self.cluster.embedding_lookup(step, names)).items()}

    async def push(self, step: int, grads: dict[str, NDArray[np.float32]]) -> None:
        await self.cluster.push_grad(step, grads)


async def _run_steps(
    steps: _Steps,
    names: list[str],
    batches: list[Batch],
    config: PsBenchConfig,
    histograms: dict[str, Histogram],
) -> None:
    rng = np.random.default_rng(config.seed)
    # Step -1 warms up (loads the numba cache, or compiles on a machine's first run) unrecorded.
    for step in range(-1, config.steps):
        batch_id = step + 1
        start = time.perf_counter()
        await steps.feed(batch_id, batches[step % len(batches)])
        fed = time.perf_counter()
        pooled = await steps.lookup(batch_id, names)
        looked_up = time.perf_counter()
        grads = {n: rng.normal(0, 0.01, p.shape).astype(np.float32) for n, p in pooled.items()}
        await steps.push(batch_id, grads)
        done = time.perf_counter()
        if step >= 0:
            for op, seconds in zip(
                OPS, (fed - start, looked_up - fed, done - looked_up), strict=True
            ):
                histograms[op].record(seconds)


def _print_report(
    workload: Workload,
    config: PsBenchConfig,
    histograms: dict[str, Histogram],
    stats: Sequence[Any],
) -> None:
    wall = sum(histograms[op].sum_seconds for op in OPS)
    examples = config.steps * workload.batch_size
    signs = config.steps * workload.signs_per_batch
    print(
        f"\n{config.steps} steps in {wall:.2f} s: {examples / wall:,.0f} examples/s, "
        f"{signs / wall / 1e6:.1f} M signs/s (feed + lookup + push)"
    )
    rows = []
    for op in OPS:
        s = histograms[op].summary()
        rows.append(
            [op, str(s.count)]
            + [f"{v / 1e3:.1f}" for v in (s.p50_us, s.p95_us, s.p99_us, s.max_us)]
        )
    print_table(["op", "count", "p50 ms", "p95 ms", "p99 ms", "max ms"], rows)
    hits = sum(s.hits for s in stats)
    print(
        f"\ntables: {sum(s.rows for s in stats):,} rows in {len(stats)} variables, "
        f"{sum(s.inserts for s in stats):,} inserts, {sum(s.evictions for s in stats):,} "
        f"evictions, hit rate {hits / max(1, hits + sum(s.misses for s in stats)):.1%}, "
        f"{sum(s.bytes for s in stats) / 2**20:,.0f} MiB preallocated"
    )


def _run_inprocess(
    workload: Workload,
    config: PsBenchConfig,
    batches: list[Batch],
    histograms: dict[str, Histogram],
) -> None:
    tables = make_tables(workload, Adagrad(lr=LR))

    async def main() -> None:
        async with open_scheduler(config.scheduler, workers=config.workers) as scheduler:
            engine = PsEngine(scheduler)
            for name, table in tables.items():
                engine.create_variable(name, table)
            await _run_steps(_InProcess(engine), list(tables), batches, config, histograms)
            _print_report(workload, config, histograms, [t.statistics() for t in tables.values()])
            sched = scheduler.statistics()
            print(
                f"scheduler {sched.backend}: {sched.completed:,} tasks, {sched.stolen:,} "
                f"stolen, worker utilization "
                f"{', '.join(f'{u:.0%}' for u in sched.utilization())}"
            )

    anyio.run(main)


async def _grpc_main(
    workload: Workload,
    config: PsBenchConfig,
    ports: list[int],
    batches: list[Batch],
    histograms: dict[str, Histogram],
) -> None:
    cluster = PsCluster(
        [PsClient("127.0.0.1", port) for port in ports],
        workload_placement(workload, config.num_ps, "balanced")[0],
    )
    try:
        for spec in workload.variables:
            await cluster.owner(spec.name).create_variable(
                VariableConfig(
                    spec.name,
                    workload.embedding_dim,
                    capacity_for(spec),
                    optimizer="adagrad",
                    optimizer_params={"lr": LR},
                    shards=shards_for(spec),
                    seed=config.seed,
                )
            )
        names = [spec.name for spec in workload.variables]
        await _run_steps(_Grpc(cluster), names, batches, config, histograms)
        per_ps = [await client.stats() for client in cluster.members]
        _print_report(workload, config, histograms, [v for s in per_ps for v in s.variables])
        for index, stats in enumerate(per_ps):
            kernel = stats.latencies.get("EmbeddingLookup.kernel")
            print(
                f"ps {index}: {len(stats.variables)} variables, "
                f"{sum(v.rows for v in stats.variables):,} rows, lookup kernel p50 "
                f"{(kernel.p50_us if kernel else 0) / 1e3:.2f} ms per variable, "
                f"{stats.pending_batches} batches pending"
            )
    finally:
        cluster.close()


def _run_grpc(
    workload: Workload,
    config: PsBenchConfig,
    batches: list[Batch],
    histograms: dict[str, Histogram],
) -> None:
    command = ps_command(config.scheduler, config.workers, "--stats-interval", "3600")
    with ExitStack() as stack:
        servers = [stack.enter_context(server_process(command)) for _ in range(config.num_ps)]
        ports = [server.port for server in servers]
        print(f"started {config.num_ps} ps on 127.0.0.1 ports {', '.join(map(str, ports))}")
        anyio.run(_grpc_main, workload, config, ports, batches, histograms, backend="asyncio")
    codes = [server.returncode for server in servers]
    if any(code != 0 for code in codes):
        raise RuntimeError(f"a ps did not stop cleanly: exit statuses {codes}")
    print(f"stopped {config.num_ps} ps: SIGTERM, drained, exit status 0")


def run(workload: Workload, config: PsBenchConfig) -> None:
    """Run the demo and print its report."""
    print_placement(workload, config.num_ps)
    where = (
        f"{config.num_ps} ps processes over gRPC"
        if config.transport == "grpc"
        else "this process (no gRPC)"
    )
    print(
        f"\nrunning the ps side of {config.steps} training steps on {where}: "
        f"{len(workload.variables)} Adagrad tables (dim {workload.embedding_dim}), "
        f"{config.scheduler} scheduler with {config.workers} worker(s) per ps"
    )
    batches = make_batches(workload, min(config.steps, 4), config.seed)
    histograms = {op: Histogram() for op in OPS}
    if config.transport == "grpc":
        _run_grpc(workload, config, batches, histograms)
    else:
        _run_inprocess(workload, config, batches, histograms)
