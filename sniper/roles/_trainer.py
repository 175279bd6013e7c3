"""The trainer: prefetches batches from the hubs, trains the dense model, pushes gradients.

Pipeline. ``prefetch`` worker tasks (one anyio task group) each loop over: take the next read
of :class:`~sniper.roles._reading.HubReader` (a ticket), ReadSample from its hub, then
EmbeddingLookup of every variable on every ps at once, then hand the batch to the training loop
through a memory object stream. So up to ``prefetch`` batches are in flight while the model
trains on the current one: the seeds' feed_queue. A batch's lookup waits for the pushes of
every batch more than ``max_staleness`` before it (0 by default: each lookup sees every
earlier gradient, as in a synchronous trainer), so the reads run ahead and the lookups follow
the pushes; a larger bound is the usual asynchronous-PS staleness, traded for overlap. The
training loop trains the tickets in number order, whichever arrives first: the same batches in
the same order on every run, and after a resume.

Training. Every ``eval_every``-th batch of each hub is held out: looked up with ``release``
(no PushGrad), scored, and counted in the evaluation AUC and logloss only (progressive
validation). The others go forward, backward and Adam on the dense model. The gradient with
respect to each variable's pooled embedding goes back with PushGrad. Each variable has its own
width (``dims``), so the model's input is their concatenation, then the dense features. The
dense model runs on the trainer's own thread (its BLAS releases the GIL): on the event loop it
held up every other coroutine for its 10-20 ms, and in a one-process job that loop is every
role's (measured at seed_ctr scale 0.02: the loop's p99 lag fell from 21 to 10 ms).

Evaluation data. With an :class:`~sniper.roles._evaluate.DataEvaluator` (``eval_data`` of
``sniper train``), the whole held-out input is scored every ``eval_every_steps`` training steps
and once more at the end; its AUC and logloss go in the report beside the in-stream figures.

Failure. A hub or ps that stops answering ends training with :class:`TrainingError`, which
names the server and the call that failed. Nothing is retried silently past the client's own
retries.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import anyio
import numpy as np
from anyio import CancelScope
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from numpy.typing import NDArray
from threadpoolctl import threadpool_limits

from sniper._config import RunSettings, check_at_least, check_positive
from sniper._metrics import Histogram
from sniper.data import StreamingAuc, log_loss
from sniper.placement import Move
from sniper.roles._balance import AutoShard
from sniper.roles._batch_id import BatchId
from sniper.roles._cluster import PsCluster
from sniper.roles._errors import RPC_ERRORS, describe_error
from sniper.roles._evaluate import DataEvaluator, EvalResult
from sniper.roles._model import Backward, DenseModel, Predictor, sigmoid, start_dense_kernels
from sniper.roles._reading import HubReader, Ticket
from sniper.rpc._api import HubApi, LookupTarget, Pooled
from sniper.rpc._tensor import check_wire_dtype
from sniper.scheduler import Scheduler, TaskHandle, open_scheduler

__all__ = ["LiveProgress", "OpStats", "TrainReport", "Trainer", "TrainerConfig", "TrainingError"]

log = logging.getLogger("sniper.trainer")
T = TypeVar("T")
OPS = ("ReadSample", "EmbeddingLookup", "PushGrad", "Dense")
_MODEL = "model"
"""The key of every task on the trainer's model thread."""
_Step = tuple[float, dict[str, NDArray[np.float32]], Backward]
"""What :meth:`Trainer._dense_step` returns: the loss, each variable's input gradient, and the
Adam step still to apply."""
Checkpointer = Callable[["Trainer", "TrainReport"], Awaitable[None]]
"""Saves the job when the pipeline is drained: every ps, the trainer's :meth:`Trainer.state`
and each hub's position (:attr:`Trainer.positions`)."""


class TrainingError(RuntimeError):
    """Training cannot go on: a hub or ps failed. The message names it."""

    steps: int = 0
    """Training steps done when it failed (set by :meth:`Trainer.run`)."""


@dataclass(frozen=True)
class TrainerConfig(RunSettings):
    """What the trainer does; validated at construction (``seed`` seeds the dense model)."""

    hidden: tuple[int, ...] = (64,)
    """Widths of the dense model's hidden layers."""
    lr: float = 0.002
    """Adam's learning rate for the dense model."""
    prefetch: int = 4
    """Batches read and looked up ahead of the one training."""
    max_staleness: int = 0
    """Pushes a batch's lookup may miss: its EmbeddingLookup waits until every batch more
    than this many before it has been pushed. 0 looks up each batch after the push of the one
    before, as a synchronous trainer (TorchRec) does; ``prefetch`` or more never waits. Each batch
    missed costs AUC early in training (seed_ctr, 150 batches: train AUC 0.70 at 0 against
    0.57-0.62 at 3) and lets the lookups overlap the dense model."""
    eval_every: int = 10
    """Hold out every this many-th batch of each hub for the in-stream evaluation (0: none)."""
    max_steps: int = 0
    """Stop after this many training batches (0: at the end of the data)."""
    eval_every_steps: int = 0
    """Score the evaluation data every this many training steps (0: only at the end)."""
    checkpoint_every: int = 0
    """Checkpoint the job every this many training steps, and at the end (0: never)."""
    progress: bool = True
    """Show progress on standard error: a bar on a terminal, else a line every
    ``stats_interval`` seconds (``sniper train --quiet``: none). The trainer itself draws
    nothing; ``sniper train`` reads :meth:`Trainer.live`."""
    blas_threads: int = 1
    """Threads for the dense model's BLAS (0: the library's default, one per core). The MLP is
    small, and OpenBLAS's idle threads spin: with its default of one thread per core, half of
    the trainer's CPU in a local 2-core cluster went to spinning, taken from the ps and hub
    processes (measured: trainer 9.6 s of CPU for 100 batches, 4.4 s with one thread). The
    limit is process-wide while :meth:`Trainer.run` runs (BLAS has no other scope), so two
    trainers in one process should use the same value."""

    wire_dtype: str = "float32"
    """How pooled embeddings and gradients travel between trainer and ps over gRPC:
    ``float32``, or ``bfloat16`` / ``float16`` in half the bytes (rounded; the AUC cost is
    measured by ``experiments/wire_dtype.toml``). The in-process transport passes arrays as
    they are, whatever this says."""
    auto_shard: bool = False
    """Move variables off the busiest ps while training (``sniper.roles._balance``)."""
    auto_shard_ratio: float = 1.5
    """Move when the busiest ps's kernel time exceeds the lightest's by more than this."""
    auto_shard_window: int = 20
    """Steps over which each variable's cost is measured; a move can follow each window."""
    auto_shard_max_moves: int = 1
    """Variables moved at most after one window."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_at_least(
            self,
            0,
            "blas_threads",
            "max_steps",
            "eval_every_steps",
            "checkpoint_every",
            "max_staleness",
        )
        check_at_least(self, 1, "auto_shard_window", "auto_shard_max_moves")
        check_wire_dtype(self.wire_dtype)
        if self.auto_shard_ratio < 1:
            raise ValueError(f"auto_shard_ratio must be at least 1, got {self.auto_shard_ratio}")
        check_at_least(self, 1, "prefetch")
        check_positive(self, "lr")
        if self.eval_every < 0 or self.eval_every == 1:
            raise ValueError(
                f"eval_every must be 0 (no evaluation) or at least 2, got {self.eval_every}"
            )
        if any(width < 1 for width in self.hidden):
            raise ValueError(f"hidden layer sizes must be at least 1, got {list(self.hidden)}")


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
    """Training steps of the whole job, those before a resume included."""
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
    eval_data_auc: float | None = None
    """AUC on the evaluation data (``eval_data``) at the end of training; None without it."""
    eval_data_logloss: float | None = None
    eval_data_examples: int = 0
    eval_data_history: list[EvalResult] = field(default_factory=list)
    """Every scoring of the evaluation data, in order (every ``eval_every_steps`` steps)."""
    checkpoints: int = 0
    """Job checkpoints taken in this run (``checkpoint_every``)."""
    checkpoint_pause_seconds: list[float] = field(default_factory=list)
    """How long training stood still for each: draining the pipeline, then saving."""
    resumed_from_step: int = 0
    """The checkpoint's step this run resumed from (0: a fresh run)."""
    restarts: int = 0
    """Times ``sniper train`` restarted its processes after one died (``max_restarts``)."""
    lost_steps: int = 0
    """Training steps done after the last checkpoint before each restart, trained again."""
    losses: list[float] = field(default_factory=list)
    """Mean training logloss of each 10-batch window, in order (to see it decrease)."""
    ops: dict[str, OpStats] = field(default_factory=dict)
    """The trainer's view of each op: ReadSample, EmbeddingLookup, PushGrad, Dense."""
    ps_ops: list[dict[str, OpStats]] = field(default_factory=list)
    """Each ps's own timings of its calls (``EmbeddingLookup``) and their stages
    (``EmbeddingLookup.decode``, ``.dispatch``, ``.wait``, ``.kernel``, ``.encode``...), read
    at the end of training: with :attr:`ops`, where a step's time goes across the layers."""
    ps_cpu_seconds: list[float] = field(default_factory=list)
    """CPU seconds each ps process had used when training ended (its own count); empty with
    launcher ``inprocess``, where the ps are not processes of their own."""
    moves: list[dict[str, Any]] = field(default_factory=list)
    """Variables auto_shard moved: step, variable, from, to, cost (kernel seconds in the
    window that planned it) and seconds (the move's pause)."""
    placement_version: int = 0
    """The placement's version at the end (0: every variable on its hashed ps)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LiveProgress:
    """Where a training run is now (:meth:`Trainer.live`): what the progress line and the
    Prometheus metrics show while it trains."""

    steps: int
    examples: int
    seconds: float
    """Since this run started (a resumed run counts from its resume)."""
    examples_per_second: float
    loss: float
    """Mean training logloss of the latest 10-batch window (of every step before the first)."""
    eval_auc: float
    """AUC of every held-out batch scored so far (0.0 before the first)."""
    max_steps: int
    """The run's step limit (0: until the data ends)."""


@dataclass
class _Ready:
    batch_id: int
    labels: NDArray[np.float32]
    inputs: NDArray[np.float32]
    """The model's input: each variable's pooled embeddings (the lookup wrote them in place)
    and the dense features."""
    held_out: bool


class _InputPool:
    """Model-input matrices of batches already trained or scored, handed to later batches.

    A batch's input is a ``[batch, width]`` float32 matrix (5 MB for seed_ctr) that its lookup
    writes. A fresh one per batch costs the event loop the kernel's faulting in and zeroing of
    its pages on first write, on the lookup's critical path; a matrix that comes back is
    warm. Only the loop's thread takes and gives, so there is no lock; at most ``limit`` are
    kept, which is more than the batches in flight (``prefetch`` plus the one training).
    """

    def __init__(self, limit: int) -> None:
        self._free: list[NDArray[np.float32]] = []
        self._limit = limit

    def take(self, rows: int, width: int) -> NDArray[np.float32]:
        """A ``[rows, width]`` matrix of unspecified contents."""
        while self._free:
            matrix = self._free.pop()
            if matrix.shape == (rows, width):
                return matrix
        return np.empty((rows, width), dtype=np.float32)

    def give(self, matrix: NDArray[np.float32]) -> None:
        """``matrix`` is no longer read or written by anyone."""
        if len(self._free) < self._limit:
            self._free.append(matrix)


class Trainer:
    """Runs the pipeline over ``hubs`` and the ps ``cluster`` until the data ends.

    ``dims`` gives every variable's embedding width, in the order of the model's input.
    """

    def __init__(
        self,
        hubs: Sequence[tuple[str, HubApi]],
        cluster: PsCluster,
        dims: Mapping[str, int],
        dense_features: int,
        config: TrainerConfig,
        evaluator: DataEvaluator | None = None,
        checkpointer: Checkpointer | None = None,
        balancer: AutoShard | None = None,
    ) -> None:
        if not hubs:
            raise ValueError("the trainer needs at least one hub")
        self.hubs = list(hubs)
        self.cluster = cluster
        self.variables = list(dims)
        self.dims = dict(dims)
        self.config = config
        self.evaluator = evaluator
        bounds = np.cumsum([0, *self.dims.values()])
        self._columns = {
            name: (int(bounds[i]), int(bounds[i + 1])) for i, name in enumerate(self.variables)
        }
        self._starts = {name: start for name, (start, _) in self._columns.items()}
        self._dense_columns = (int(bounds[-1]), int(bounds[-1]) + dense_features)
        self.model = DenseModel(
            int(bounds[-1]) + dense_features, config.hidden, config.lr, config.seed
        )
        self._predictor = Predictor(self.model, self.variables)
        start_dense_kernels()
        self._inputs = _InputPool(config.prefetch + 2)
        self.histograms = {op: Histogram() for op in OPS}
        self.reader = HubReader(hubs, self.histograms["ReadSample"])
        self._window = anyio.Semaphore(config.prefetch)  # tickets read and not yet trained
        self._arrived: dict[int, _Ready | None] = {}  # by ticket, until its turn to train
        self._next_ticket = 0
        self._settled = -1  # every ticket up to this one is trained and pushed (or scored)
        self._progress = anyio.Event()  # set, and replaced, whenever _settled advances
        self._held_out: list[tuple[NDArray[np.float32], NDArray[np.float32]]] = []
        self.checkpointer = checkpointer
        self.balancer = balancer
        self._due_checkpoint = False  # what the pause under way is for
        self._due_moves: list[Move] = []
        self._pause_started = 0.0
        self.positions: dict[int, BatchId] = {}
        """The last batch trained or scored of each hub (by hub number)."""
        self._gate: anyio.Event | None = None  # None: open; an unset Event: paused
        self._fetching = 0  # workers between the gate and handing their batch over
        self._report = TrainReport()
        self._checkpointed_step = 0
        self._live_auc = StreamingAuc()  # held-out AUC so far, read by live() from any thread
        self._live_lock = threading.Lock()
        self._started: float | None = None
        self._model_thread: Scheduler | None = None  # one thread for the model, while run() runs
        self._resumed_examples = 0

    # -- the prefetch workers ---------------------------------------------------------------

    async def _timed(self, op: str, awaitable: Any) -> Any:
        start = time.perf_counter()
        result = await awaitable
        self.histograms[op].record(time.perf_counter() - start)
        return result

    async def _prefetch_one(self, ticket: Ticket) -> _Ready | None:
        """The ticket's batch with its embeddings; None for an empty ticket."""
        try:
            sample = await self.reader.read(ticket)
        except RPC_ERRORS as exc:
            address = self.hubs[ticket.hub][0]
            raise TrainingError(
                f"hub {address} failed on ReadSample: {describe_error(exc)}"
            ) from exc
        if sample is None:
            return None
        await self._fresh_enough(ticket.number)
        counter = BatchId.unpack(sample.batch_id).index
        held_out = (
            self.config.eval_every > 0
            and counter % self.config.eval_every == self.config.eval_every - 1
        )
        inputs = self._input_matrix(ticket, sample.labels, sample.dense)
        try:
            await self._timed(
                "EmbeddingLookup",
                self.cluster.embedding_lookup(
                    sample.batch_id,
                    self.variables,
                    release=held_out,
                    into=LookupTarget(inputs, self._starts),
                ),
            )
        except RPC_ERRORS as exc:
            raise TrainingError(
                f"EmbeddingLookup of batch {sample.batch_id} failed: {describe_error(exc)}"
            ) from exc
        return _Ready(sample.batch_id, sample.labels, inputs, held_out)

    def _input_matrix(
        self, ticket: Ticket, labels: NDArray[np.float32], dense: NDArray[np.float32]
    ) -> NDArray[np.float32]:
        """The batch's model input with its dense features in place; the lookup writes the
        rest. A hub whose dense features do not fit the model is named."""
        start, stop = self._dense_columns
        if dense.shape != (len(labels), stop - start):
            raise TrainingError(
                f"hub {self.hubs[ticket.hub][0]} sent dense features of shape {dense.shape} "
                f"for {len(labels)} examples; the model takes {stop - start} per example"
            )
        inputs = self._inputs.take(len(labels), stop)
        inputs[:, start:] = dense
        return inputs

    async def _fresh_enough(self, ticket: int) -> None:
        """Wait until every ticket more than ``max_staleness`` before ``ticket`` is settled:
        its gradients are on the ps, so this ticket's lookup sees them."""
        while self._settled < ticket - 1 - self.config.max_staleness:
            await self._progress.wait()

    def _settle(self, ticket: int) -> None:
        """Ticket ``ticket`` (the next in order) is trained and pushed, scored, or empty."""
        self._settled = max(self._settled, ticket)
        progress, self._progress = self._progress, anyio.Event()
        progress.set()

    async def _worker(
        self,
        send: MemoryObjectSendStream[tuple[int, _Ready | None]],
        failures: list[BaseException],
        scope: CancelScope,
    ) -> None:
        """Prefetch until the data ends; a failure is recorded and stops the whole pipeline.
        Closing ``send`` tells the training loop this worker is done."""
        async with send:
            try:
                while True:
                    if self._gate is not None:
                        await self._gate.wait()
                    self._fetching += 1
                    try:
                        await self._window.acquire()
                        ticket = self.reader.next_ticket()
                        if ticket is None:
                            self._window.release()
                            break
                        await send.send((ticket.number, await self._prefetch_one(ticket)))
                    finally:
                        self._fetching -= 1
                # No batch from this worker wakes the training loop, which may be waiting for
                # a pause's pipeline to drain: the other workers wait at the gate, so without
                # this the drain would never be seen.
                await send.send((_WAKE, None))
            except anyio.BrokenResourceError:
                pass  # the training loop stopped reading (max_steps): nothing is wrong
            except Exception as exc:
                failures.append(exc)
                scope.cancel()

    # -- the training loop ------------------------------------------------------------------

    def model_input(
        self, pooled: Mapping[str, Pooled], dense: NDArray[np.float32]
    ) -> NDArray[np.float32]:
        """``[pooled embedding of each variable ‖ dense features]``, one row per example."""
        return self._predictor.model_input(pooled, dense)

    def predict(self, pooled: Mapping[str, Pooled], dense: NDArray[np.float32]) -> NDArray[Any]:
        """Click probabilities of a batch (no training)."""
        return self._predictor(pooled, dense)

    async def _train_on(
        self,
        ready: _Ready,
        ticket: int,
        report: TrainReport,
        train_auc: StreamingAuc,
        window: list[float],
    ) -> None:
        """Train on one batch and settle its ticket.

        The dense step's first half computes the input gradients; they are pushed while the
        step's second half (weight gradients, Adam) runs on the model's thread, and the ticket
        settles as soon as they are on the ps, so the next batch's lookup overlaps the Adam
        step too. Both halves are done before this returns: the next forward pass sees the new
        weights.

        Both halves are queued on the model's thread at once, the second behind the first, so
        Adam starts the moment the input gradients exist. Started from here instead, it began
        only after the push, which runs on this event loop without a pause: in a one-process
        job it added its 0.5 ms to every criteo batch's critical path (docs/benchmarks.md, the
        twenty-third session).
        """
        start = time.perf_counter()
        step = self._on_model_thread(self._dense_step, ready, train_auc)
        update = self._on_model_thread(_update_after, step)
        try:
            loss, grads, _ = await step.wait()
        except BaseException:
            update.cancel()  # not raised again on the thread: nothing is left to apply
            raise
        seconds = time.perf_counter() - start
        failures: list[Exception] = []
        try:
            await self._push(ready.batch_id, grads)
        except Exception as exc:
            failures.append(exc)
        else:
            self._settle(ticket)
        try:
            seconds += await update.wait()  # its own time: it overlapped the push
        except Exception as exc:
            failures.append(exc)
        self.histograms["Dense"].record(seconds)
        self._inputs.give(ready.inputs)
        if failures:
            raise failures[0]
        report.steps += 1
        report.examples += len(ready.labels)
        report.train_logloss += loss
        window.append(loss)
        if len(window) == 10:
            report.losses.append(float(np.mean(window)))
            window.clear()

    async def _push(self, batch_id: int, grads: dict[str, NDArray[np.float32]]) -> None:
        try:
            await self._timed("PushGrad", self.cluster.push_grad(batch_id, grads))
        except RPC_ERRORS as exc:
            raise TrainingError(
                f"PushGrad of batch {batch_id} failed: {describe_error(exc)}"
            ) from exc

    def _dense_step(self, ready: _Ready, train_auc: StreamingAuc) -> _Step:
        """Forward and the first half of backward on one batch: its loss, each variable's
        gradient, and the Adam step still to apply."""
        logits, activations = self.model.forward(ready.inputs)
        probs = sigmoid(logits)
        labels = ready.labels
        loss = log_loss(labels, probs)
        train_auc.update(labels, probs)
        backward = self.model.backward_input(
            activations,
            ((probs - labels) / len(labels)).astype(np.float32),
            list(self._columns.values()),
        )
        return loss, dict(zip(self._columns, backward.d_input, strict=True)), backward

    async def _evaluate(self, ready: _Ready, report: TrainReport) -> None:
        probs = await self._on_model_thread(self._predictor.probabilities, ready.inputs).wait()
        self._inputs.give(ready.inputs)
        self._held_out.append((ready.labels, probs))
        with self._live_lock:
            self._live_auc.update(ready.labels, probs)
        report.eval_batches += 1

    def live(self) -> LiveProgress:
        """Where training is now; cheap, and safe to call from another thread (a scrape)."""
        report = self._report
        seconds = time.perf_counter() - self._started if self._started is not None else 0.0
        trained = report.examples - self._resumed_examples
        if report.losses:
            loss = report.losses[-1]
        else:
            loss = report.train_logloss / report.steps if report.steps else 0.0
        with self._live_lock:
            auc = self._live_auc.value() if self._live_auc.positives else 0.0
        return LiveProgress(
            steps=report.steps,
            examples=report.examples,
            seconds=seconds,
            examples_per_second=trained / seconds if seconds > 0 else 0.0,
            loss=loss,
            eval_auc=auc,
            max_steps=self.config.max_steps,
        )

    async def _score_eval_data(self, report: TrainReport) -> None:
        """Score the evaluation data with the model as it is now; record it in the report."""
        if self.evaluator is None:
            return
        try:
            result = await self.evaluator.score(self.predict, report.steps)
        except RPC_ERRORS as exc:
            raise TrainingError(
                f"evaluation at step {report.steps} failed: {describe_error(exc)}"
            ) from exc
        report.eval_data_history.append(result)
        report.eval_data_auc = result.auc
        report.eval_data_logloss = result.logloss
        report.eval_data_examples = result.examples
        log.info(
            "eval data at step %d: AUC %.4f  logloss %.4f  (%d examples, %.1f s)",
            result.step,
            result.auc,
            result.logloss,
            result.examples,
            result.seconds,
        )

    async def run(self) -> TrainReport:
        """Train until every hub signals the end of its data (or ``max_steps``)."""
        if not self.config.blas_threads:
            return await self._run_with_model_thread()
        with threadpool_limits(limits=self.config.blas_threads, user_api="blas"):
            return await self._run_with_model_thread()

    async def _run_with_model_thread(self) -> TrainReport:
        # Inside the BLAS limit: a failed or cancelled run waits here for a step still
        # running on the thread, which must not see the limit lifted under it.
        async with open_scheduler("thread_pool", workers=1) as model_thread:
            self._model_thread = model_thread
            try:
                return await self._run()
            finally:
                self._model_thread = None

    def _on_model_thread(self, fn: Callable[..., T], *args: Any) -> TaskHandle[T]:
        """Queue ``fn(*args)`` on the model's thread, behind what is queued there: training
        steps and the scoring of held-out batches run there, one at a time and in order (its
        BLAS and kernels release the GIL; on the event loop, which in a one-process job is
        every role's, it held up every other coroutine for its 10-20 ms). The evaluation
        data's scoring (``eval_data``) still runs on the loop, between steps."""
        assert self._model_thread is not None, "the model's thread runs only inside run()"
        return self._model_thread.submit(_MODEL, fn, *args)

    async def _run(self) -> TrainReport:
        report = self._report
        resumed_examples = self._resumed_examples = report.examples
        train_auc = StreamingAuc()
        started = self._started = time.perf_counter()
        send, receive = anyio.create_memory_object_stream[tuple[int, _Ready | None]](
            self.config.prefetch
        )
        failures: list[BaseException] = []
        clones = [send.clone() for _ in range(self.config.prefetch)]
        send.close()
        async with anyio.create_task_group() as group:
            for clone in clones:
                group.start_soon(self._worker, clone, failures, group.cancel_scope)
            try:
                async with receive:
                    await self._consume(receive, report, train_auc, started)
            except Exception as exc:
                failures.append(exc)
            group.cancel_scope.cancel()  # max_steps reached, or a failure: stop prefetching
        for clone in clones:  # a worker cancelled before it started never closed its own
            clone.close()
        if failures:
            if isinstance(failures[0], TrainingError):
                failures[0].steps = report.steps
            raise failures[0]
        # Training throughput leaves out the time spent scoring the evaluation data.
        seconds = time.perf_counter() - started - sum(r.seconds for r in report.eval_data_history)
        checkpointing = self.checkpointer is not None and self.config.checkpoint_every > 0
        if checkpointing and report.steps > self._checkpointed_step:
            await self._checkpoint(report, 0.0)  # the end is a clean cut too
        last = report.eval_data_history[-1].step if report.eval_data_history else None
        if last != report.steps:
            await self._score_eval_data(report)
        self._finish(report, seconds, train_auc, report.examples - resumed_examples)
        return report

    async def _in_order(
        self, receive: MemoryObjectReceiveStream[tuple[int, _Ready | None]]
    ) -> _Ready | None:
        """The next ticket's batch (None: an empty ticket, or a pause whose pipeline has just
        drained), whichever ticket arrived first; ``anyio.EndOfStream`` once every worker is
        done."""
        while self._next_ticket not in self._arrived:
            number, ready = await receive.receive()
            if number == _WAKE:
                if self._gate is not None and self._drained(receive):
                    return None  # the pause's drain is complete: the loop pauses now
                continue
            self._arrived[number] = ready
        item = self._arrived.pop(self._next_ticket)
        self._next_ticket += 1
        self._window.release()
        return item

    async def _consume(
        self,
        receive: MemoryObjectReceiveStream[tuple[int, _Ready | None]],
        report: TrainReport,
        train_auc: StreamingAuc,
        started: float,
    ) -> None:
        """The training loop: train on (or score) each prefetched batch, in ticket order;
        every ``checkpoint_every`` steps, drain the pipeline and checkpoint."""
        last_log = started
        window: list[float] = []
        every = self.config.checkpoint_every if self.checkpointer is not None else 0
        while True:
            if self._gate is not None and self._drained(receive):
                await self._paused(report)
            try:
                item = await self._in_order(receive)
            except anyio.EndOfStream:
                return
            ticket = self._next_ticket - 1
            if item is None:
                self._settle(ticket)  # an empty ticket (its hub's data had ended), or a pause
                continue
            if item.held_out:
                # It pushes nothing, so later lookups need not wait for its scoring (a forward
                # pass on a thread): every tenth batch, that wait stood on the critical path.
                self._settle(ticket)
            await self._take(item, report)
            if not item.held_out:
                await self._train_on(item, ticket, report, train_auc, window)
                scoring = self.config.eval_every_steps
                if scoring and report.steps % scoring == 0:
                    await self._score_eval_data(report)
                if every and report.steps % every == 0:
                    self._pause(checkpoint=True)
                await self._plan_moves(report.steps)
            now = time.perf_counter()
            if now - last_log >= self.config.stats_interval:
                self.log_op_statistics()
                last_log = now
            if self.config.max_steps and report.steps >= self.config.max_steps:
                return

    async def _take(self, item: _Ready, report: TrainReport) -> None:
        """Note the batch's place (for a checkpoint) and score a held-out one."""
        place = BatchId.unpack(item.batch_id)
        self.positions[place.hub] = place
        if item.held_out:
            await self._evaluate(item, report)

    def _drained(self, receive: MemoryObjectReceiveStream[tuple[int, _Ready | None]]) -> bool:
        """Paused, and every batch read before the pause was trained: the ps hold exactly the
        pushes of ``report.steps`` steps, and each hub's position is a clean cut."""
        return (
            self._fetching == 0
            and receive.statistics().current_buffer_used == 0
            and self._next_ticket == self.reader.issued
        )

    def _pause(self, checkpoint: bool = False, moves: Sequence[Move] = ()) -> None:
        """Stop prefetching and let the batches read drain, then checkpoint and/or move
        (:meth:`_paused`). A reason found while already draining joins the pause under way."""
        self._due_checkpoint |= checkpoint
        self._due_moves += moves
        if self._gate is None:
            self._gate = anyio.Event()  # workers stop at the gate; the rest drains
            self._pause_started = time.perf_counter()

    async def _plan_moves(self, step: int) -> None:
        # Not while a pause drains: its moves are planned and not made yet, and a plan now
        # would count from the placement they are about to change.
        if self.balancer is None or not self.balancer.due(step) or self._gate is not None:
            return
        try:
            moves = await self.balancer.plan(step)
        except RPC_ERRORS as exc:
            log.warning("auto_shard skipped step %d: ps Stats: %s", step, describe_error(exc))
            return
        if moves:
            self._pause(moves=moves)

    async def _paused(self, report: TrainReport) -> None:
        """The pipeline is drained: make the moves, then the checkpoint (which then holds the
        new placement), then let the workers go on."""
        waited = time.perf_counter() - self._pause_started
        moves, self._due_moves = self._due_moves, []
        for move in moves:
            await self._move(move, report)
        if self._due_checkpoint:
            self._due_checkpoint = False
            await self._checkpoint(report, waited)
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.set()

    async def _move(self, move: Move, report: TrainReport) -> None:
        assert self.balancer is not None
        try:
            moved = await self.balancer.move(report.steps, move)
        except RPC_ERRORS as exc:
            raise TrainingError(
                f"auto_shard could not move {move.variable} from ps {move.source} to ps "
                f"{move.to}: {describe_error(exc)}"
            ) from exc
        if not moved:
            return
        step, done, seconds = self.balancer.moves[-1]
        report.moves.append(
            {"step": step, "variable": done.variable, "from": done.source, "to": done.to}
            | {"cost": done.cost, "seconds": seconds}
        )
        report.placement_version = self.cluster.placement.version

    async def _checkpoint(self, report: TrainReport, waited: float) -> None:
        assert self.checkpointer is not None
        start = time.perf_counter()
        await self.checkpointer(self, report)
        pause = waited + time.perf_counter() - start
        report.checkpoints += 1
        self._checkpointed_step = report.steps
        report.checkpoint_pause_seconds.append(pause)
        log.info("checkpoint at step %d: training paused %.2f s", report.steps, pause)

    def state(self, report: TrainReport) -> dict[str, Any]:
        """What a resumed trainer needs: the model and the report's counters."""
        return {
            "model": self.model.state(),
            "steps": report.steps,
            "examples": report.examples,
            "eval_batches": report.eval_batches,
            "train_logloss": report.train_logloss,
            "losses": list(report.losses),
            "tickets": self._next_ticket,
        }

    def resume_from(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state`: the model and the report's counters (call before
        :meth:`run`)."""
        report = self._report
        self.model.load_state(state["model"])
        report.steps = int(state["steps"])
        report.examples = int(state["examples"])
        report.eval_batches = int(state["eval_batches"])
        report.train_logloss = float(state["train_logloss"])
        report.losses = [float(x) for x in state["losses"]]
        report.resumed_from_step = report.steps
        self._checkpointed_step = report.steps
        self._next_ticket = int(state.get("tickets", 0))  # older checkpoints: from hub 0
        self._settled = self._next_ticket - 1  # the checkpoint's tickets were all pushed
        self.reader.start_at(self._next_ticket)

    def _finish(
        self, report: TrainReport, seconds: float, train_auc: StreamingAuc, examples: int
    ) -> None:
        report.seconds = seconds
        report.examples_per_second = examples / seconds if seconds else 0.0
        report.train_auc = train_auc.value() if report.steps else 0.0
        report.train_logloss /= max(1, report.steps)
        if self._held_out:
            late = self._held_out[len(self._held_out) // 2 :]
            report.eval_auc = _auc_of(late)
            report.eval_auc_whole_run = _auc_of(self._held_out)
            labels = np.concatenate([labels for labels, _ in late])
            report.eval_logloss = log_loss(labels, np.concatenate([p for _, p in late]))
        report.ops = self.op_statistics()

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


_WAKE = -1
"""Not a ticket number: a worker that stopped tells the training loop to look again."""


def _update_after(step: TaskHandle[_Step]) -> float:
    """The Adam step of ``step``'s backward pass, queued right behind ``step`` on the model's
    one thread (so done by now); its own seconds. A failed step fails this too."""
    return _timed_update(step.result()[2])


def _timed_update(backward: Backward) -> float:
    """Apply a backward pass's Adam step; the seconds it took."""
    start = time.perf_counter()
    backward.update()
    return time.perf_counter() - start


def _auc_of(batches: list[tuple[NDArray[np.float32], NDArray[np.float32]]]) -> float:
    auc = StreamingAuc()
    for labels, probs in batches:
        auc.update(labels, probs)
    return float(auc.value())
