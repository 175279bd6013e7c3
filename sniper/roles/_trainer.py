"""The trainer: prefetches batches from the hubs, trains the dense model, pushes gradients.

Pipeline. ``prefetch`` worker coroutines each loop over: ReadSample from the next hub, then
EmbeddingLookup of every variable on every ps at once, then hand the batch to the training loop
through a bounded queue. So up to ``prefetch`` batches are in flight while the model trains
on the current one. This is the seeds' feed_queue, and it means a pushed gradient may land
after up to ``prefetch`` newer lookups: the usual asynchronous-PS staleness.

Training. Every ``eval_every``-th batch of each hub is held out: looked up with ``release``
(no PushGrad), scored, and counted in the evaluation AUC and logloss only (progressive
validation). The others go forward, backward and Adam on the dense model. The gradient with
respect to each variable's pooled embedding goes back with PushGrad.

Failure. A hub or ps that stops answering ends training with :class:`TrainingError`, which
names the server and the call that failed. Nothing is retried silently past the client's own
retries.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from grpclib.exceptions import GRPCError, StreamTerminatedError
from numpy.typing import NDArray
from threadpoolctl import threadpool_limits

from sniper._metrics import Histogram
from sniper.data import StreamingAuc, log_loss
from sniper.roles._model import DenseModel, sigmoid
from sniper.rpc._client import Pooled, PsCluster
from sniper.rpc._generated.sniper.v1 import HubStub, ReadSampleRequest
from sniper.rpc._tensor import decode

__all__ = ["OpStats", "TrainReport", "Trainer", "TrainerConfig", "TrainingError"]

log = logging.getLogger("sniper.trainer")
OPS = ("ReadSample", "EmbeddingLookup", "PushGrad", "Dense")
RPC_ERRORS = (GRPCError, StreamTerminatedError, OSError, TimeoutError)
"""What a call to a hub or ps raises when the server fails or goes away."""


class TrainingError(RuntimeError):
    """Training cannot go on: a hub or ps failed. The message names it."""


@dataclass(frozen=True)
class TrainerConfig:
    """What the trainer does; validated at construction."""

    hidden: tuple[int, ...] = (64,)
    lr: float = 0.002
    prefetch: int = 4
    eval_every: int = 10
    stats_interval: float = 10.0
    max_steps: int = 0
    """Stop after this many training batches (0: at the end of the data)."""
    seed: int = 0
    progress: bool = True
    blas_threads: int = 1
    """Threads for the dense model's BLAS (0: the library's default, one per core). The MLP is
    small, and OpenBLAS's idle threads spin: with its default of one thread per core, half of
    the trainer's CPU in a local 2-core cluster went to spinning, taken from the ps and hub
    processes (measured: trainer 9.6 s of CPU for 100 batches, 4.4 s with one thread). The
    limit is process-wide while :meth:`Trainer.run` runs (BLAS has no other scope), so two
    trainers in one process should use the same value."""

    def __post_init__(self) -> None:
        if self.blas_threads < 0:
            raise ValueError(f"blas_threads must be 0 (default) or more, got {self.blas_threads}")
        if self.prefetch < 1:
            raise ValueError(f"prefetch must be at least 1, got {self.prefetch}")
        if self.eval_every < 0 or self.eval_every == 1:
            raise ValueError(
                f"eval_every must be 0 (no evaluation) or at least 2, got {self.eval_every}"
            )
        for name in ("lr", "stats_interval"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_steps < 0:
            raise ValueError(f"max_steps must be 0 (no limit) or more, got {self.max_steps}")


@dataclass(frozen=True)
class OpStats:
    """Latency of one trainer-side op, in microseconds (the seeds' unit)."""

    count: int
    p50_us: float
    p95_us: float
    p99_us: float
    max_us: float


@dataclass
class TrainReport:
    """What ``sniper train`` prints and writes as JSON."""

    steps: int = 0
    eval_batches: int = 0
    examples: int = 0
    seconds: float = 0.0
    examples_per_second: float = 0.0
    train_auc: float = 0.0
    train_logloss: float = 0.0
    eval_auc: float = 0.0
    """Held-out AUC over the second half of the run: the model as training ends."""
    eval_logloss: float = 0.0
    eval_auc_whole_run: float = 0.0
    """Held-out AUC over every held-out batch, early untrained ones included."""
    losses: list[float] = field(default_factory=list)
    """Mean training logloss of each 10-batch window, in order (to see it decrease)."""
    ops: dict[str, OpStats] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Ready:
    batch_id: int
    labels: NDArray[np.float32]
    dense: NDArray[np.float32]
    pooled: dict[str, Pooled]
    held_out: bool


_DONE = object()


class Trainer:
    """Runs the pipeline over ``hubs`` and the ps ``cluster`` until the data ends."""

    def __init__(
        self,
        hubs: Sequence[tuple[str, HubStub]],
        cluster: PsCluster,
        variables: Sequence[str],
        dim: int,
        dense_features: int,
        config: TrainerConfig,
    ) -> None:
        if not hubs:
            raise ValueError("the trainer needs at least one hub")
        self.hubs = list(hubs)
        self.cluster = cluster
        self.variables = list(variables)
        self.dim = dim
        self.config = config
        self.model = DenseModel(
            len(self.variables) * dim + dense_features, config.hidden, config.lr, config.seed
        )
        self.histograms = {op: Histogram() for op in OPS}
        self._next_hub = 0
        self._ended: set[int] = set()
        self._held_out: list[tuple[NDArray[np.float32], NDArray[np.float32]]] = []

    # -- the prefetch workers ---------------------------------------------------------------

    def _pick_hub(self) -> int | None:
        live = [i for i in range(len(self.hubs)) if i not in self._ended]
        if not live:
            return None
        index = live[self._next_hub % len(live)]
        self._next_hub += 1
        return index

    async def _timed(self, op: str, awaitable: Any) -> Any:
        start = time.perf_counter()
        result = await awaitable
        self.histograms[op].record(time.perf_counter() - start)
        return result

    async def _prefetch_one(self) -> _Ready | None:
        while (index := self._pick_hub()) is not None:
            address, stub = self.hubs[index]
            try:
                response = await self._timed("ReadSample", stub.read_sample(ReadSampleRequest()))
            except RPC_ERRORS as exc:
                raise TrainingError(
                    f"hub {address} failed on ReadSample: {_describe(exc)}"
                ) from exc
            if response.end_of_data:
                self._ended.add(index)
                continue
            counter = response.batch_id & (2**32 - 1)  # the batch's index in its epoch
            held_out = (
                self.config.eval_every > 0
                and counter % self.config.eval_every == self.config.eval_every - 1
            )
            try:
                pooled = await self._timed(
                    "EmbeddingLookup",
                    self.cluster.embedding_lookup(
                        response.batch_id, self.variables, release=held_out
                    ),
                )
            except RPC_ERRORS as exc:
                raise TrainingError(
                    f"EmbeddingLookup of batch {response.batch_id} failed: {_describe(exc)}"
                ) from exc
            return _Ready(
                response.batch_id,
                decode(response.labels, "labels", "float32", 1),
                decode(response.dense, "dense", "float32", 2),
                pooled,
                held_out,
            )
        return None

    async def _worker(self, queue: asyncio.Queue[Any]) -> None:
        # _DONE tells the training loop this worker ended (data exhausted, or an error it will
        # find in the task). A cancelled worker sends nothing: the loop that cancelled it is
        # gone, and waiting for room in a full queue would never end.
        try:
            while (ready := await self._prefetch_one()) is not None:
                await queue.put(ready)
        except asyncio.CancelledError:
            raise
        except BaseException:
            await queue.put(_DONE)
            raise
        await queue.put(_DONE)

    # -- the training loop ------------------------------------------------------------------

    def _inputs(self, ready: _Ready) -> NDArray[np.float32]:
        parts = [ready.pooled[name].pooled for name in self.variables]
        return np.concatenate([*parts, ready.dense], axis=1).astype(np.float32, copy=False)

    async def _train_on(
        self, ready: _Ready, report: TrainReport, train_auc: StreamingAuc, window: list[float]
    ) -> None:
        start = time.perf_counter()
        x = self._inputs(ready)
        logits, activations = self.model.forward(x)
        probs = sigmoid(logits)
        labels = ready.labels
        loss = log_loss(labels, probs)
        train_auc.update(labels, probs)
        d_input = self.model.backward(
            activations, ((probs - labels) / len(labels)).astype(np.float32)
        )
        grads = {
            name: np.ascontiguousarray(d_input[:, i * self.dim : (i + 1) * self.dim])
            for i, name in enumerate(self.variables)
        }
        self.histograms["Dense"].record(time.perf_counter() - start)
        try:
            await self._timed("PushGrad", self.cluster.push_grad(ready.batch_id, grads))
        except RPC_ERRORS as exc:
            raise TrainingError(
                f"PushGrad of batch {ready.batch_id} failed: {_describe(exc)}"
            ) from exc
        report.steps += 1
        report.examples += len(labels)
        report.train_logloss += loss
        window.append(loss)
        if len(window) == 10:
            report.losses.append(float(np.mean(window)))
            window.clear()

    def _evaluate(self, ready: _Ready, report: TrainReport) -> None:
        logits, _ = self.model.forward(self._inputs(ready))
        probs = sigmoid(logits)
        self._held_out.append((ready.labels, probs))
        report.eval_batches += 1

    async def run(self) -> TrainReport:
        """Train until every hub signals the end of its data (or ``max_steps``)."""
        if not self.config.blas_threads:
            return await self._run()
        with threadpool_limits(limits=self.config.blas_threads, user_api="blas"):
            return await self._run()

    async def _run(self) -> TrainReport:
        report = TrainReport()
        train_auc = StreamingAuc()
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=self.config.prefetch)
        workers = [asyncio.create_task(self._worker(queue)) for _ in range(self.config.prefetch)]
        started = last_log = time.perf_counter()
        window: list[float] = []
        finished = 0
        try:
            while finished < len(workers):
                item = await queue.get()
                if item is _DONE:
                    finished += 1
                    _raise_worker_error(workers)
                    continue
                if item.held_out:
                    self._evaluate(item, report)
                else:
                    await self._train_on(item, report, train_auc, window)
                now = time.perf_counter()
                if now - last_log >= self.config.stats_interval:
                    self.log_op_statistics()
                    last_log = now
                self._progress(report, now - started, train_auc)
                if self.config.max_steps and report.steps >= self.config.max_steps:
                    break
        finally:
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        _raise_worker_error(workers)
        self._finish(report, time.perf_counter() - started, train_auc)
        return report

    def _finish(self, report: TrainReport, seconds: float, train_auc: StreamingAuc) -> None:
        if self.config.progress and sys.stderr.isatty():
            sys.stderr.write("\n")
        report.seconds = seconds
        report.examples_per_second = report.examples / seconds if seconds else 0.0
        report.train_auc = train_auc.value() if report.steps else 0.0
        report.train_logloss /= max(1, report.steps)
        if self._held_out:
            late = self._held_out[len(self._held_out) // 2 :]
            report.eval_auc = _auc_of(late)
            report.eval_auc_whole_run = _auc_of(self._held_out)
            labels = np.concatenate([labels for labels, _ in late])
            report.eval_logloss = log_loss(labels, np.concatenate([p for _, p in late]))
        report.ops = self.op_statistics()

    def _progress(self, report: TrainReport, elapsed: float, train_auc: StreamingAuc) -> None:
        if not (self.config.progress and sys.stderr.isatty()) or report.steps % 5:
            return
        sys.stderr.write(
            f"\rstep {report.steps:6d}  {report.examples / elapsed:9,.0f} ex/s  "
            f"train auc {train_auc.value():.4f}  "
        )
        sys.stderr.flush()

    def op_statistics(self) -> dict[str, OpStats]:
        stats = {}
        for op, histogram in self.histograms.items():
            s = histogram.snapshot()
            stats[op] = OpStats(
                s.count,
                s.p50_seconds * 1e6,
                s.p95_seconds * 1e6,
                s.p99_seconds * 1e6,
                s.max_seconds * 1e6,
            )
        return stats

    def log_op_statistics(self) -> None:
        """One line per op, as the seed system's trainer printed them."""
        for op, s in self.op_statistics().items():
            log.info(
                "Ops%s statistics => count: %d  P50: %.0f  P95: %.0f  P99: %.0f  Max: %.0f",
                op,
                s.count,
                s.p50_us,
                s.p95_us,
                s.p99_us,
                s.max_us,
            )


def _auc_of(batches: list[tuple[NDArray[np.float32], NDArray[np.float32]]]) -> float:
    auc = StreamingAuc()
    for labels, probs in batches:
        auc.update(labels, probs)
    return float(auc.value())


def _raise_worker_error(workers: list[asyncio.Task[None]]) -> None:
    for worker in workers:
        if worker.done() and not worker.cancelled() and worker.exception() is not None:
            raise worker.exception()  # type: ignore[misc]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, GRPCError):
        return f"{exc.status.name}: {exc.message}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
