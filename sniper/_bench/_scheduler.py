"""``sniper bench scheduler``: a ps's whole per-batch work through every scheduler backend.

One step is what a ps does for one batch of a training job, through
:class:`sniper.roles.PsEngine`'s async calls on an asyncio loop, as :class:`~sniper.roles.PsRole`
makes them: FeedSample (split every variable's signs by shard, then map and pin their rows in
background tasks), EmbeddingLookup of all 76 variables of ``seed_ctr`` (719k signs, one
variable with 270k; a gather of the pinned rows) and PushGrad (the optimizer update, which frees
the batch). As in a job, where the hub feeds batches ahead of the trainer, the next batch's
feed runs during this batch's lookup and push; a step ends when all three are done. Variables
with many signs per batch get several shards (``sniper.placement.SHARD_SIGNS`` signs each), so
their work becomes several tasks.

Every backend runs the same batches on the same tables; ``inline`` is the baseline. The
seeds' pathology, every table behind one process-wide lock (``lock="global"``), runs on
``work_stealing`` in the same table, and so does a reference without any scheduler: one
inline pipeline per worker, each on its own thread and tables, which shows what Python threads
can make of this step at all (its "task ms/step" above ``inline``'s is time spent waiting for
the GIL). The machine is shared, so backends take turns in rounds, and each round also
measures the parallel capacity (how much faster ``workers`` processes of pure arithmetic run
than one): a backend's speedup over ``inline`` is read against the capacity measured in the
same run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import anyio
import numpy as np
from numpy.typing import NDArray

from sniper._bench._local import Batch, make_batches, make_tables
from sniper._bench._report import verdict
from sniper._table import print_table
from sniper.data import Workload
from sniper.placement import shards_for
from sniper.roles import PsEngine
from sniper.runtime import parallel_capacity
from sniper.scheduler import SCHEDULER_NAMES, open_scheduler
from sniper.store import SGD, EmbeddingTable, LockMode

Grads = dict[str, NDArray[np.float32]]

CAPACITY_TARGET = {"work_stealing": 0.9}
"""Speedup over ``inline`` a backend should reach, as a share of the parallel capacity."""
BUSY_CAPACITY = 0.75
"""Below this capacity per worker (another tenant holds a core), no share is judged: every
backend then runs near ``inline`` and near the capacity, so any verdict would be noise."""
SLOWDOWN_LIMIT = 0.9
"""The other parallel backends should not be slower than ``inline`` by more than this."""
ROUNDS = 3
"""Turns each backend takes; every round measures the parallel capacity once."""


@dataclass(frozen=True)
class BackendResult:
    backend: str
    lock: str
    latencies: NDArray[np.float64]
    """Seconds of each measured step."""
    utilization: float
    """Share of the workers' time spent in tasks; NaN where there are no workers."""
    task_seconds: float
    """Seconds spent in task functions per step, over every thread: above ``inline``'s, it is
    time the same work spent waiting (for the GIL, mostly) rather than computing."""

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies, q))


@dataclass(frozen=True)
class Row:
    """One backend's line: its speedup over ``inline`` and its share of the capacity."""

    result: BackendResult
    speedup: float
    capacity_share: float
    target: str
    verdict: str


@contextmanager
def _engine(backend: str, workers: int, tables: dict[str, EmbeddingTable]) -> Iterator[PsEngine]:
    with open_scheduler(backend, workers=workers) as scheduler:
        engine = PsEngine(scheduler)
        for name, table in tables.items():
            engine.create_variable(name, table)
        yield engine


def gradients(workload: Workload, batches: list[Batch], seed: int) -> list[Grads]:
    """Small random gradients of every variable of every batch, ``[batch, dim]`` float32."""
    rng = np.random.default_rng(seed)
    shape = (workload.batch_size, workload.embedding_dim)
    return [
        {name: (rng.standard_normal(shape) * 1e-3).astype(np.float32) for name in batch}
        for batch in batches
    ]


async def _steps(
    engine: PsEngine,
    batches: list[Batch],
    grads: list[Grads],
    first: int,
    count: int,
) -> list[float]:
    """Run ``count`` steps from batch id ``first``; each one's seconds."""
    names = list(batches[0])

    async def feed(batch_id: int) -> None:
        batch = batches[batch_id % len(batches)]
        await engine.feed_async(
            batch_id, [(name, signs, offsets) for name, (signs, offsets) in batch.items()]
        )

    async def lookup_and_push(batch_id: int, grad: Mapping[str, NDArray[np.float32]]) -> None:
        await engine.lookup_async(batch_id, names)
        await engine.push_grad_async(batch_id, grad)

    await feed(first)
    latencies = []
    for batch_id in range(first, first + count):
        start = time.perf_counter()
        async with anyio.create_task_group() as group:
            group.start_soon(feed, batch_id + 1)
            group.start_soon(lookup_and_push, batch_id, grads[batch_id % len(grads)])
        latencies.append(time.perf_counter() - start)
    engine.release(first + count)
    return latencies


class _Runner:
    """One backend's engine, kept open across rounds, with its latencies and busy time."""

    def __init__(self, engine: PsEngine, lock: str) -> None:
        self.engine = engine
        self.lock = lock
        self.latencies: list[float] = []
        self.busy = 0.0
        self.wall = 0.0
        self.next_id = 0

    def run(self, batches: list[Batch], grads: list[Grads], count: int) -> None:
        before = self.engine.scheduler.statistics()
        start = time.perf_counter()
        self.latencies += anyio.run(
            _steps, self.engine, batches, grads, self.next_id, count, backend="asyncio"
        )
        self.wall += time.perf_counter() - start
        after = self.engine.scheduler.statistics()
        self.busy += sum(after.busy_seconds) - sum(before.busy_seconds)
        self.next_id += count + 1

    def reset(self) -> None:
        """Forget the warm-up."""
        self.latencies.clear()
        self.busy = self.wall = 0.0

    def result(self) -> BackendResult:
        workers = self.engine.scheduler.statistics().workers
        return BackendResult(
            self.engine.scheduler.name,
            self.lock,
            np.array(self.latencies),
            self.busy / (self.wall * workers),
            self.busy / len(self.latencies),
        )


class _InlineThreads:
    """The reference row: ``workers`` inline pipelines, each on its own thread and tables.

    No scheduler and nothing shared, so what keeps them below the parallel capacity is what
    Python threads pay for running this step at all: the GIL around the store's kernels.
    Steps run ``workers`` at a time, so each counts for its latency over ``workers``.
    """

    def __init__(self, runners: list[_Runner]) -> None:
        self.runners = runners

    def run(self, batches: list[Batch], grads: list[Grads], count: int) -> None:
        threads = [
            threading.Thread(target=runner.run, args=(batches, grads, count))
            for runner in self.runners
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def reset(self) -> None:
        for runner in self.runners:
            runner.reset()

    def result(self) -> BackendResult:
        workers = len(self.runners)
        latencies = np.concatenate([runner.result().latencies for runner in self.runners])
        busy = sum(runner.busy for runner in self.runners)
        return BackendResult(
            f"{workers} inline threads",
            "shard",
            latencies / workers,
            float("nan"),
            busy / len(latencies),
        )


def measure(
    workload: Workload,
    *,
    workers: int,
    steps: int,
    batches: int,
    seed: int,
    rounds: int = ROUNDS,
    capacity: Callable[[int], float] = parallel_capacity,
) -> tuple[list[BackendResult], list[float]]:
    """Every backend's step latencies, and the parallel capacity measured in each round.

    Each backend first runs one unmeasured step per batch (warm-up), then ``rounds`` turns of
    about ``steps / rounds`` steps in a fixed order, so that a noisy neighbour on a shared
    machine slows every backend alike. ``capacity(workers)`` measures the parallel capacity.
    """
    data = make_batches(workload, batches, seed)
    grads = gradients(workload, data, seed)
    tables = make_tables(workload, SGD(0.01), "shard")
    backends: list[tuple[str, LockMode]] = [
        ("inline", "shard"),
        *[(n, "shard") for n in SCHEDULER_NAMES if n != "inline"],
        ("work_stealing", "global"),
    ]
    capacities = []
    with ExitStack() as stack:

        def runner(name: str, lock: str, tables: dict[str, EmbeddingTable]) -> _Runner:
            return _Runner(stack.enter_context(_engine(name, workers, tables)), lock)

        runners: list[_Runner | _InlineThreads] = [
            runner(
                name, lock, tables if lock == "shard" else make_tables(workload, SGD(0.01), lock)
            )
            for name, lock in backends
        ]
        runners.append(
            _InlineThreads(
                [runner("inline", "shard", tables)]
                + [
                    runner("inline", "shard", make_tables(workload, SGD(0.01), "shard"))
                    for _ in range(workers - 1)
                ]
            )
        )
        for each in runners:
            each.run(data, grads, len(data))
            each.reset()
        for turn in range(rounds):
            count = steps // rounds + (turn < steps % rounds)
            capacities.append(capacity(workers))
            for each in runners:
                if count:
                    each.run(data, grads, count)
    return [each.result() for each in runners], capacities


def rows(results: list[BackendResult], capacity: float, workers: int) -> list[Row]:
    """Speedups over the first result (``inline``) and verdicts against the targets."""
    baseline = results[0].percentile(50)
    lines = []
    for r in results:
        speedup = baseline / r.percentile(50)
        share = speedup / capacity
        if r.backend == "inline":
            target, judged = "baseline", ""
        elif r.lock != "shard" or r.backend not in SCHEDULER_NAMES:
            target, judged = "-", ""
        elif r.backend in CAPACITY_TARGET:
            goal = CAPACITY_TARGET[r.backend]
            target = f">= {goal:.0%} of capacity"
            busy = capacity < BUSY_CAPACITY * workers
            judged = "machine busy" if busy else verdict(share, goal)
        else:
            target = f">= {SLOWDOWN_LIMIT}x"
            judged = verdict(speedup, SLOWDOWN_LIMIT)
        lines.append(Row(r, speedup, share, target, judged))
    return lines


def run(workload: Workload, *, workers: int, steps: int, batches: int, seed: int) -> None:
    """Measure every backend, the global-lock pathology and the inline-threads reference;
    print one table."""
    huge = workload.largest()
    print(
        f"sniper bench scheduler: {workload.name} feed+lookup+push step (next batch fed "
        f"during lookup and push), {len(workload.variables)} variables, "
        f"{workload.signs_per_batch:,} signs per batch ({huge.name}: "
        f"{huge.signs_per_batch:,} in {shards_for(huge)} shards), {workers} workers, "
        f"{steps} steps per backend in {ROUNDS} rounds"
    )
    results, capacities = measure(
        workload, workers=workers, steps=steps, batches=batches, seed=seed
    )
    capacity = float(np.median(capacities))
    _print(rows(results, capacity, workers))
    print(
        f"\nparallel capacity of this machine during the run: {workers} processes of pure "
        f"arithmetic ran {capacity:.2f}x faster than one (median of "
        f"{', '.join(f'{c:.2f}x' for c in capacities)}; the ceiling for 'vs inline')"
    )


def _print(lines: list[Row]) -> None:
    print()
    print_table(
        [
            "backend",
            "store lock",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "vs inline",
            "of capacity",
            "worker util",
            "task ms/step",
            "target",
            "",
        ],
        [
            [
                line.result.backend,
                line.result.lock,
                f"{line.result.percentile(50) * 1e3:.1f}",
                f"{line.result.percentile(95) * 1e3:.1f}",
                f"{line.result.percentile(99) * 1e3:.1f}",
                f"{line.speedup:.2f}x",
                f"{100 * line.capacity_share:.0f}%",
                "-" if np.isnan(u := line.result.utilization) else f"{100 * u:.0f}%",
                f"{line.result.task_seconds * 1e3:.1f}",
                line.target,
                line.verdict,
            ]
            for line in lines
        ],
    )
