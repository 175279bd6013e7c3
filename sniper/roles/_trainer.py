"""The trainer: runs the pipeline, trains the dense model it is given, pauses, reports.

One place owns a training step, and each of its parts has a module of its own:

- :mod:`sniper.roles._pipeline`: prefetch (ReadSample, EmbeddingLookup), the staleness bound,
  reading order, the gate that pauses it;
- :mod:`sniper.roles._step`: the model's step on its own thread, the push, the model's update;
- :mod:`sniper.roles._pauses`: checkpoints and auto_shard moves at a drained pipeline.

This module is the training loop that ties them: it takes each batch in ticket order, trains on
it (or scores it: every ``eval_every``-th batch of each hub is held out, looked up with
``release``, no PushGrad, and counted in the evaluation AUC and logloss only: progressive
validation), pauses when a pause has drained the pipeline, and fills the report.

The model. The trainer calls a :class:`~sniper.models.DenseModel` (given, or the numpy MLP
built from ``hidden``, ``lr`` and ``seed``). Its input is each variable's pooled embedding, in
the order of ``dims`` (each variable has its own width), then the dense features. What built
it (``model_config``, a :class:`~sniper.models.ModelConfig`) goes in every checkpoint, under
``model_spec``, so that ``sniper eval`` rebuilds the model a checkpoint holds.

Evaluation data. With an :class:`~sniper.roles._evaluate.DataEvaluator` (``eval_data`` of
``sniper train``), the whole held-out input is scored every ``eval_every_steps`` training steps
and once more at the end; its AUC and logloss go in the report beside the in-stream figures.

Preemption. :meth:`Trainer.preempt` (``sniper train`` on SIGTERM or SIGINT) asks for one more
pause: its checkpoint at the clean cut, after which training ends as at ``max_steps``, without
the end's scoring of the evaluation data (the resumed run's end scores it); the report says
``preempted``.

Several ranks (``num_trainers``, :class:`~sniper.roles._ranks.Ranks`). Each rank is a trainer
of its own hubs (hub ``h`` is rank ``h % num_trainers``'s), and its steps average the dense
model's gradients with the other ranks' (:mod:`sniper.roles._step`). A rank whose data ends
takes part in the others' steps until every rank's has ended, so every rank counts the same
steps and pauses for a checkpoint at the same one: there the ranks gather their positions and
counters, rank 0 (the one with a checkpointer) saves the job once, and every rank waits for it.
At the end they gather their figures, which rank 0's report sums and lists by rank.

Failure. A hub or ps that stops answering ends training with :class:`TrainingError`, which
names the server and the call that failed. Nothing is retried silently past the client's own
retries.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import numpy as np
from numpy.typing import NDArray
from threadpoolctl import threadpool_limits

from sniper._figures import existing, shown
from sniper._metrics import Histogram, LatencySummary
from sniper.data import CriteoFormatError, ParquetFormatError, TableError
from sniper.models import DenseModel, ModelConfig, ModelInputs
from sniper.roles._balance import AutoShard
from sniper.roles._batch_id import BatchId
from sniper.roles._cluster import PsCluster
from sniper.roles._errors import RPC_ERRORS, TrainingError, describe_error
from sniper.roles._evaluate import DataEvaluator, EvalResult
from sniper.roles._pauses import Pauses
from sniper.roles._pipeline import Pipeline, Ready
from sniper.roles._ranks import Ranks
from sniper.roles._scores import Scores
from sniper.roles._step import DenseStep, Predictor
from sniper.roles._train_report import LiveProgress, TrainReport
from sniper.roles._trainer_config import TrainerConfig
from sniper.rpc import HubApi, Pooled
from sniper.runtime import busy_share, machine_cpu_reading

__all__ = ["Checkpointer", "Trainer", "checkpoint_report"]

MIN_BUSY_WINDOW = 0.1
"""Seconds of training below which :attr:`TrainReport.cores_busy` is None: the machine's CPU
time moves in ticks of 10 ms per core, so a shorter window's share is mostly rounding."""

DATA_ERRORS = (TableError, ParquetFormatError, CriteoFormatError)
"""What a reader raises about its file's contents (and not, say, a diverged model's logits)."""

log = logging.getLogger("sniper.trainer")
OPS = ("ReadSample", "EmbeddingLookup", "PushGrad", "Dense")
Checkpointer = Callable[["Trainer", TrainReport], Awaitable[None]]
"""Saves the job when the pipeline is drained: every ps, the trainer's :meth:`Trainer.state`
and each hub's position (:attr:`Trainer.positions`). A trainer given one saves the end of
training, and every ``checkpoint_every`` steps before it."""


class Trainer:
    """Runs the pipeline over ``hubs`` and the ps ``cluster`` until the data ends.

    ``dims`` gives every pooled variable's embedding width, in the order of the model's
    input, ``sequences`` every unpooled one's (pooling ``none``: looked up beside the input
    matrix and handed to the model as jagged blocks) and ``labels`` the data's label names;
    ``model`` is the dense model to train (default: the numpy MLP of ``config``), built for
    them and ``dense_features`` by ``model_config`` (recorded in checkpoints; None: not
    recorded, for a model built by other means). With ``ranks``, this is one rank of several
    (see the module doc): ``hubs`` are its own, of the job's ``num_hubs``.
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
        model: DenseModel | None = None,
        model_config: ModelConfig | None = None,
        labels: Sequence[str] = ("label",),
        *,
        sequences: Mapping[str, int] | None = None,
        ranks: Ranks | None = None,
        num_hubs: int | None = None,
    ) -> None:
        if not hubs:
            raise ValueError("the trainer needs at least one hub")
        inputs = ModelInputs(dims, dense_features, tuple(labels), sequences=sequences or {})
        if model is None:
            model_config = ModelConfig(params={"hidden": list(config.hidden)}, lr=config.lr)
            model = model_config.open(inputs, seed=config.seed)
        elif _layout(model.inputs) != _layout(inputs):
            built, data = _layout(model.inputs), _layout(inputs)
            raise ValueError(
                f"the model was built for {built[0]}, {built[1]} dense features, labels "
                f"{built[2]} and sequences {built[3]}; the data has {data[0]}, {data[1]}, "
                f"{data[2]} and {data[3]}"
            )
        self.hubs = list(hubs)
        self.num_hubs = num_hubs or len(self.hubs)
        """The job's hubs, those of every rank."""
        self.ranks = ranks
        self.cluster = cluster
        self.variables = list(dims)
        self.dims = dict(dims)
        self.config = config
        self.evaluator = evaluator
        self.model = model
        self.model_config = model_config
        model.warm_up()
        self.histograms = {op: Histogram() for op in OPS}
        if ranks is not None:
            self.histograms["AllReduce"] = ranks.allreduce
        self.pipeline = Pipeline(
            hubs,
            cluster,
            inputs.columns,
            (inputs.embedding_width, inputs.width),
            sequences=list(inputs.sequences),
            prefetch=config.prefetch,
            max_staleness=config.max_staleness,
            eval_every=config.eval_every,
            histograms=self.histograms,
        )
        self.reader = self.pipeline.reader
        self._step = DenseStep(model, cluster, self.histograms, ranks)
        self._predictor = Predictor(model, self.variables)
        self.checkpointer = checkpointer
        self.balancer = balancer
        # Every rank pauses for a checkpoint; rank 0's checkpointer saves it.
        save = None if checkpointer is None and ranks is None else self._save
        self.pauses = Pauses(self.pipeline, cluster, save, config.checkpoint_every, balancer)
        self.positions: dict[int, BatchId] = {}
        """The last batch trained or scored of each hub (by hub number): this rank's hubs',
        and with several ranks the others' as gathered at the latest checkpoint."""
        self._hubs_read: set[int] = set()
        """The hubs this rank took a batch of: the positions only it knows."""
        self.data_ended = False
        """Every hub signalled the end of its data (not ``max_steps``): nothing is left."""
        # Its live AUC is read by live() from any thread.
        self._scores = Scores(model.inputs.labels, model.inputs.regression)
        self._report = TrainReport()
        self._loss_total = 0.0
        """The model's step losses summed (the report's ``train_logloss`` is their mean)."""
        self._live_lock = threading.Lock()
        self._started: float | None = None
        self._resumed_examples = 0
        self._rank_states: list[dict[str, Any]] = []  # every rank's, at the latest checkpoint

    async def _save(self, report: TrainReport) -> None:
        if self.ranks is not None:
            mine = {
                "tickets": self.pipeline.next_ticket,
                "examples": report.examples,
                "eval_batches": report.eval_batches,
                # Its own hubs' alone: a copy of another rank's, gathered at an earlier
                # checkpoint, would overwrite that rank's newer one (its hub then read again,
                # on resume, the batches trained between the two checkpoints).
                "positions": {hub: self.positions[hub] for hub in self._hubs_read},
            }
            self._rank_states = await anyio.to_thread.run_sync(self.ranks.gather, mine)
            for state in self._rank_states:
                self.positions.update(state["positions"])
        if self.checkpointer is not None:
            await self.checkpointer(self, report)
        if self.ranks is not None:
            await anyio.to_thread.run_sync(self.ranks.barrier)

    def model_input(
        self, pooled: Mapping[str, Pooled], dense: NDArray[np.float32]
    ) -> NDArray[np.float32]:
        """``[pooled embedding of each variable ‖ dense features]``, one row per example."""
        return self._predictor.model_input(pooled, dense)

    def predict(self, pooled: Mapping[str, Pooled], dense: NDArray[np.float32]) -> NDArray[Any]:
        """The model's predictions for a batch (no training)."""
        return self._predictor(pooled, dense)

    async def run(self) -> TrainReport:
        """Train until every hub signals the end of its data (or ``max_steps``).

        The BLAS limit is process-wide while this runs; a failed or cancelled run waits inside
        it for a step still running on the model's thread, which must not see the limit lifted
        under it."""
        if not self.config.blas_threads:
            async with self._step.model_thread():
                return await self._run()
        with threadpool_limits(limits=self.config.blas_threads, user_api="blas"):
            async with self._step.model_thread():
                return await self._run()

    async def _run(self) -> TrainReport:
        report = self._report
        resumed_examples = self._resumed_examples = report.examples
        started = self._started = time.perf_counter()
        cpu_before = machine_cpu_reading()
        scored_before = sum(r.seconds for r in report.eval_data_history)
        try:
            await self.pipeline.run(lambda: self._consume(report, started))
            report.cores_busy, report.machine_cores = _cores_busy(cpu_before, started)
            # Training throughput leaves out the time spent scoring the evaluation data.
            scoring = sum(r.seconds for r in report.eval_data_history) - scored_before
            seconds = time.perf_counter() - started - scoring
            if self.pauses.stopped:
                # Preempted: the stop's pause checkpointed this step; the rest is the resume's.
                report.preempted = True
            else:
                await self._end(report)
            self._finish(report, seconds, report.examples - resumed_examples)
            if self.ranks is not None:
                await self._sum_ranks(report, report.examples - resumed_examples)
        except TrainingError as exc:
            exc.steps = report.steps
            raise
        return report

    async def _sum_ranks(self, report: TrainReport, examples: int) -> None:
        """Every rank's figures in the report: each rank's, and the job's totals."""
        assert self.ranks is not None
        mine: dict[str, Any] = {
            "rank": self.ranks.rank,
            "examples": examples,
            "seconds": report.seconds,
            "examples_per_second": report.examples_per_second,
            "cores_busy": report.cores_busy,
            "job_examples": report.examples,
            "eval_batches": report.eval_batches,
        }
        ranks = await anyio.to_thread.run_sync(self.ranks.gather, mine)
        report.examples = sum(int(r.pop("job_examples")) for r in ranks)
        report.eval_batches = sum(int(r["eval_batches"]) for r in ranks)
        report.examples_per_second = sum(float(r["examples_per_second"]) for r in ranks)
        report.ranks = ranks
        report.allreduce_bytes = self.ranks.bytes_per_step

    async def _end(self, report: TrainReport) -> None:
        """Score the evaluation data (unless this step's scoring is done) and checkpoint the
        end."""
        last = report.eval_data_history[-1].step if report.eval_data_history else None
        scored = self.evaluator is not None and last != report.steps
        failed: Exception | None = None
        if scored:
            try:
                await self._score_eval_data(report)
            except DATA_ERRORS as exc:  # the evaluation data's: what was trained is kept
                failed = exc
        # Scored first, and saved again if a checkpoint at this step came before the end, so
        # that the last checkpoint holds the whole report and says whether the data ended (a
        # resume of a finished run answers with it). Every rank saves, or none: they agree
        # (rank 0 alone scores, so a failed scoring still takes part in every collective).
        again = (scored and failed is None) or self.data_ended
        # A job with a checkpoint directory saves its end, checkpoint_every or not: the
        # model trained is what its directory was named for. Rank 0 alone holds the
        # checkpointer, so the ranks learn it from it.
        end = self.checkpointer is not None
        if self.ranks is not None:
            flags = await anyio.to_thread.run_sync(self.ranks.gather, (again, end))
            again, end = any(f[0] for f in flags), any(f[1] for f in flags)
        await self.pauses.finish(report, again=again, end=end)
        if failed is not None:
            kept = (
                "its checkpoint keeps it: sniper eval scores that once the data is fixed"
                if self.pauses.checkpointed_step == report.steps
                else "no checkpoint keeps it"
            )
            raise TrainingError(
                f"eval_data: {failed} (training ended at step {report.steps}; {kept})"
            ) from failed

    def preempt(self) -> None:
        """Checkpoint at the next clean cut and end training there (a preemption: ``sniper
        train`` signalled). Call on the trainer's event loop, with a checkpointer; training
        that is ending anyway (the data, ``max_steps``) checkpoints its end instead."""
        self.pauses.stop()

    async def _consume(self, report: TrainReport, started: float) -> None:
        """The training loop: train on (or score) each prefetched batch, in ticket order;
        pause when a pause has drained the pipeline."""
        pipeline = self.pipeline
        last_log = started
        window: list[float] = []
        while True:
            if pipeline.closed and pipeline.drained():
                await self.pauses.run(report)
                if self.pauses.stopped:
                    return
            try:
                item = await pipeline.next()
            except anyio.EndOfStream:
                if self.ranks is None or await self._join(report):
                    self.data_ended = True
                return
            ticket = pipeline.next_ticket - 1
            if item is None:
                pipeline.settle(ticket)  # an empty ticket (its hub's data had ended), or a pause
                continue
            place = BatchId.unpack(item.batch_id)
            self.positions[place.hub] = place
            self._hubs_read.add(place.hub)
            if item.held_out:
                # It pushes nothing, so later lookups need not wait for its scoring (a forward
                # pass on a thread): every tenth batch, that wait stood on the critical path.
                pipeline.settle(ticket)
                await self._evaluate(item, report)
            else:
                await self._train_on(item, ticket, report, window)
                scoring = self.config.eval_every_steps
                if scoring and report.steps % scoring == 0:
                    await self._score_eval_data(report)
                await self.pauses.after_step(report.steps)
            now = time.perf_counter()
            if now - last_log >= self.config.stats_interval:
                self.log_op_statistics()
                last_log = now
            if self.config.max_steps and report.steps >= self.config.max_steps:
                return

    async def _join(self, report: TrainReport) -> bool:
        """This rank's data has ended: take part in the other ranks' steps (and their
        checkpoints) until every rank's data has ended (True) or ``max_steps`` (False)."""
        pipeline = self.pipeline
        while not (self.config.max_steps and report.steps >= self.config.max_steps):
            if pipeline.closed and pipeline.drained():
                await self.pauses.run(report)
            if not await self._step.join():
                return True
            report.steps += 1
            await self.pauses.after_step(report.steps)
        return False

    async def _train_on(
        self,
        ready: Ready,
        ticket: int,
        report: TrainReport,
        window: list[float],
    ) -> None:
        """Train on one batch; its ticket settles as soon as its push is on the ps."""
        loss = await self._step.train(
            ready.batch_id,
            ready.inputs,
            ready.labels,
            self._scores,
            lambda: self.pipeline.settle(ticket),
            ready.sequences,
            lambda: self.pipeline.offer_after(ticket),
        )
        self.pipeline.inputs.give(ready.inputs)
        report.steps += 1
        report.examples += len(ready.labels)
        self._loss_total += loss
        window.append(loss)
        if len(window) == 10:
            report.losses.append(float(np.mean(window)))
            window.clear()

    async def _evaluate(self, ready: Ready, report: TrainReport) -> None:
        probs = await self._step.score(ready.inputs, ready.sequences)
        self.pipeline.inputs.give(ready.inputs)
        with self._live_lock:
            self._scores.add_held_out(ready.labels, probs)
        report.eval_batches += 1

    def live(self) -> LiveProgress:
        """Where training is now; cheap, and safe to call from another thread (a scrape)."""
        report = self._report
        seconds = time.perf_counter() - self._started if self._started is not None else 0.0
        trained = report.examples - self._resumed_examples
        if report.losses:
            loss = report.losses[-1]
        else:
            loss = self._loss_total / report.steps if report.steps else 0.0
        with self._live_lock:
            auc = self._scores.live_auc()
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
        _take_eval_data(report, result)
        log.info(
            "eval data at step %d: AUC %s  logloss %s  (%d examples, %.1f s)",
            result.step,
            shown(result.auc),
            shown(result.logloss),
            result.examples,
            result.seconds,
        )

    def state(self, report: TrainReport) -> dict[str, Any]:
        """What a resumed trainer needs: the model (``"model"``: arrays), the streaming
        figures of the report (``"metrics"``: arrays) and its counters (the rest: JSON)."""
        return {
            "model": self.model.state(),
            "metrics": self._scores.state(),
            "model_spec": None if self.model_config is None else self.model_config.to_dict(),
            "steps": report.steps,
            "examples": report.examples,
            "eval_batches": report.eval_batches,
            "train_logloss": self._loss_total,
            "losses": list(report.losses),
            "eval_data_history": [dataclasses.asdict(r) for r in report.eval_data_history],
            "tickets": self.pipeline.next_ticket,
            "data_ended": self.data_ended,
        } | self._ranks_state()

    def _ranks_state(self) -> dict[str, Any]:
        """Each rank's place (its next ticket, examples and held-out batches) and the job's
        sums, from the ranks' states gathered for this checkpoint (nothing with one rank)."""
        if self.ranks is None:
            return {}
        keys = ("tickets", "examples", "eval_batches")
        ranks = [{key: r[key] for key in keys} for r in self._rank_states]
        return {key: sum(r[key] for r in ranks) for key in keys[1:]} | {"ranks": ranks}

    def resume_from(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state`: the model, the report's counters and its streaming
        figures, so that the report covers the whole job (call before :meth:`run`)."""
        self.model.load_state(state["model"])
        self._scores, self._loss_total = _restore(
            self._report, state, self._scores.names, self._scores.regression
        )
        self.data_ended = bool(state["data_ended"])
        self.pauses.checkpointed_step = self._report.steps
        tickets = int(state["tickets"])
        if self.ranks is not None:
            if len(state.get("ranks", ())) != self.ranks.size:
                raise ValueError(
                    f"the checkpoint was trained by {len(state.get('ranks', ())) or 1} "
                    f"trainer rank(s); resume it with num_trainers = that many"
                )
            mine = state["ranks"][self.ranks.rank]
            tickets, self._report.examples = int(mine["tickets"]), int(mine["examples"])
            self._report.eval_batches = int(mine["eval_batches"])
        # The checkpoint's tickets were all pushed.
        self.pipeline.start_at(tickets)

    def _finish(self, report: TrainReport, seconds: float, examples: int) -> None:
        report.seconds = seconds
        report.examples_per_second = examples / seconds if seconds else 0.0
        _score(report, self._scores, self._loss_total)
        report.ops = self.op_statistics()

    def op_statistics(self) -> dict[str, LatencySummary]:
        """The latency of each op the trainer timed, in microseconds."""
        return {op: histogram.summary() for op, histogram in self.histograms.items()}

    def log_op_statistics(self) -> None:
        """One line per op, as the seed system's trainer printed them, with their unit (as the
        ps' lines say it)."""
        for op, s in self.op_statistics().items():
            log.info(
                "Ops%s statistics in microseconds => count: %d  P50: %.0f  P95: %.0f  P99: %.0f  "
                "Max: %.0f",
                op,
                s.count,
                s.p50_us,
                s.p95_us,
                s.p99_us,
                s.max_us,
            )


def checkpoint_report(
    state: dict[str, Any], labels: Sequence[str] = ("label",), regression: Sequence[str] = ()
) -> TrainReport:
    """The report of the run a trainer's :meth:`Trainer.state` was taken in, as it stood
    then: of a finished run's last checkpoint, that run's report (no timings). ``labels``:
    the job's label names."""
    report = TrainReport()
    _score(report, *_restore(report, state, labels, regression))
    return report


def _layout(
    inputs: ModelInputs,
) -> tuple[dict[str, int], int, tuple[str, ...], dict[str, int]]:
    """What a model is built for: the widths, the dense features, the labels, the sequences."""
    return dict(inputs.dims), inputs.dense_features, inputs.labels, dict(inputs.sequences)


def _restore(
    report: TrainReport, state: dict[str, Any], labels: Sequence[str], regression: Sequence[str]
) -> tuple[Scores, float]:
    """Put :meth:`Trainer.state`'s counters in ``report``; its training and held-out AUCs,
    and the model's step losses summed."""
    report.steps = int(state["steps"])
    report.examples = int(state["examples"])
    report.eval_batches = int(state["eval_batches"])
    report.losses = [float(x) for x in state["losses"]]
    report.resumed_from_step = report.steps
    report.eval_data_history = [EvalResult(**r) for r in state["eval_data_history"]]
    if report.eval_data_history:
        _take_eval_data(report, report.eval_data_history[-1])
    scores = Scores.from_state(labels, state["metrics"], regression)
    return scores, float(state["train_logloss"])


def _cores_busy(
    before: tuple[float, float] | None, started: float
) -> tuple[float | None, int | None]:
    """:attr:`TrainReport.cores_busy` and :attr:`TrainReport.machine_cores` of a window that
    started at ``started`` (a ``perf_counter``) with the machine's CPU time read as
    ``before``; both None over less than :data:`MIN_BUSY_WINDOW` seconds, or without the
    readings, or where the machine's number of cores is unknown (a share of an unknown
    number is no count of cores)."""
    after, cores = machine_cpu_reading(), os.cpu_count()
    if before is None or after is None or cores is None:
        return None, None
    if time.perf_counter() - started < MIN_BUSY_WINDOW:
        return None, None
    return busy_share(before, after) * cores, cores


def _take_eval_data(report: TrainReport, result: EvalResult) -> None:
    """The evaluation data's latest scoring as the report's figures (each label's too)."""
    report.eval_data_auc = existing(result.auc)
    report.eval_data_logloss = existing(result.logloss)
    report.eval_data_examples = result.examples
    for name, figures in result.per_label.items():
        label = report.per_label.setdefault(name, {})
        label |= {f"eval_data_{key}": value for key, value in figures.items()}


def _score(report: TrainReport, scores: Scores, loss_total: float) -> None:
    """The report's AUCs and mean loglosses, from the streams' figures and the model's step
    losses summed: each label's, and the first binary label's as the headline figures (None
    without one: a regression job's figures are its labels' RMSEs)."""
    figures = scores.figures(trained=bool(report.steps))
    for name, label in figures.items():
        report.per_label.setdefault(name, {}).update(label)
    binary = [name for name in scores.names if name not in scores.regression]
    if not binary:
        return
    first = figures[binary[0]]
    report.train_auc = first.get("train_auc")
    # Beside other labels the step's loss is every label's mean: the label's own is kept.
    own = loss_total / report.steps if report.steps and len(scores.names) == 1 else None
    report.train_logloss = first.get("train_logloss", own)
    report.eval_auc, report.eval_logloss = first.get("eval_auc"), first.get("eval_logloss")
    report.eval_auc_whole_run = first.get("eval_auc_whole_run")
