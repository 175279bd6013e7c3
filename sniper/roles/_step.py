"""The trainer's step: the model's forward and backward, the push, the model's update.

The trainer calls a :class:`~sniper.models.DenseModel` it is given; the loss is the model's.
The model runs on one thread of its own (its BLAS and kernels release the GIL): on the event
loop it held up every other coroutine for its 10-20 ms, and in a one-process job that loop is
every role's (measured at seed_ctr scale 0.02: the loop's p99 lag fell from 21 to 10 ms).
Training steps and the scoring of held-out batches run there, one at a time and in order. The
evaluation data's scoring (``eval_data``) still runs on the loop, between steps
(:class:`Predictor`).

Several ranks (``num_trainers``). The model's update averages its gradients across the ranks
first (:meth:`~sniper.models.TrainStep.update_averaged`): the all-reduce runs on the model's
thread, while the push is under way. A rank whose data has ended takes part in the others'
steps with a weight of 0 (:meth:`DenseStep.join`), so that every rank applies every update.
With ``sync = "local_sgd"`` the update is the rank's own, and every ``sync_every`` steps the
ranks average their models instead (:meth:`~sniper.roles._ranks.Ranks.local_step`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from sniper._metrics import Histogram
from sniper.models import DenseModel, Jagged, TrainStep
from sniper.roles._cluster import PsCluster
from sniper.roles._errors import RPC_ERRORS, TrainingError, describe_error
from sniper.roles._pipeline import Offer, jagged, timed
from sniper.roles._ranks import Ranks
from sniper.roles._scores import Scores
from sniper.rpc import Pooled
from sniper.scheduler import Scheduler, TaskHandle, open_scheduler

__all__ = ["DenseStep", "Predictor"]

T = TypeVar("T")
F32 = NDArray[np.float32]
_MODEL = "model"
"""The key of every task on the trainer's model thread."""


class Predictor:
    """Predictions from pooled embeddings and dense features, with a dense model.

    The model's input is ``[pooled embedding of each of variables ‖ dense features]``: the
    trainer and ``sniper eval`` build it the same way, here. The model's sequence variables
    (:attr:`~sniper.models.ModelInputs.sequences`) are left out of ``variables`` and of the
    matrix, and handed to it as jagged blocks.
    """

    def __init__(self, model: DenseModel, variables: Sequence[str]) -> None:
        self.model = model
        self.sequences = list(model.inputs.sequences)
        self.variables = [name for name in variables if name not in model.inputs.sequences]

    def model_input(self, pooled: Mapping[str, Pooled], dense: F32) -> F32:
        """``[pooled embedding of each variable ‖ dense features]``, one row per example."""
        parts = [pooled[name].pooled for name in self.variables]
        return np.concatenate([*parts, dense], axis=1).astype(np.float32, copy=False)

    def __call__(self, pooled: Mapping[str, Pooled], dense: F32) -> F32:
        """Predictions for a batch (no training)."""
        inputs = self.model_input(pooled, dense)
        if not self.sequences:
            return self.model.predict(inputs)
        return self.model.predict(inputs, sequences=jagged(pooled, self.sequences))


class DenseStep:
    """Trains ``model`` on batches and pushes their gradients to ``cluster``.

    ``histograms`` must hold ``Dense`` and ``PushGrad``. Steps run only inside
    :meth:`model_thread`.
    """

    def __init__(
        self,
        model: DenseModel,
        cluster: PsCluster,
        histograms: Mapping[str, Histogram],
        ranks: Ranks | None = None,
    ) -> None:
        self.model = model
        self.cluster = cluster
        self.ranks = ranks
        self._dense = histograms["Dense"]
        self._pushes = histograms["PushGrad"]
        self._thread: Scheduler | None = None

    @asynccontextmanager
    async def model_thread(self) -> AsyncIterator[None]:
        """The model's thread, for as long as the block runs. Leaving waits for a step still
        running there (a failed or cancelled run included)."""
        async with open_scheduler("thread_pool", workers=1) as thread:
            self._thread = thread
            try:
                yield
            finally:
                self._thread = None

    def _on_thread(self, fn: Callable[..., T], *args: Any) -> TaskHandle[T]:
        """Queue ``fn(*args)`` on the model's thread, behind what is queued there."""
        assert self._thread is not None, "the model's thread runs only inside model_thread()"
        return self._thread.submit(_MODEL, fn, *args)

    async def train(
        self,
        batch_id: int,
        inputs: F32,
        labels: F32,
        scores: Scores,
        pushed: Callable[[], None],
        sequences: Mapping[str, Jagged] | None = None,
        then: Callable[[], Offer | None] | None = None,
    ) -> float:
        """Train on one batch; its loss. ``pushed()`` is called once its gradients are on the
        ps. ``sequences``: the model's sequence variables' blocks (their gradients are
        pushed with the others). ``then()``, asked as the push starts, may give the next
        batch's lookup, which the push answers (:meth:`Pipeline.offer_after`).

        The model's step computes the input gradients; they are pushed while the model's update
        runs on its thread, and ``pushed`` runs as soon as they are on the ps, so the next
        batch's lookup overlaps the update too. Both are done before this returns: the next
        forward pass sees the new weights.

        Both are queued on the model's thread at once, the update behind the step, so it starts
        the moment the input gradients exist. Started from here instead, it began only after
        the push, which runs on this event loop without a pause: in a one-process job it added
        its 0.5 ms to every criteo batch's critical path (CHANGELOG.md, 2026-11-27).
        """
        start = time.perf_counter()
        step = self._on_thread(_forward_backward, self.model, inputs, labels, scores, sequences)
        update = self._on_thread(_update_after, step, self.ranks, self.model)
        try:
            done = await step.wait()
        except BaseException:
            update.cancel()  # not raised again on the thread: nothing is left to apply
            raise
        seconds = time.perf_counter() - start
        failures: list[Exception] = []
        try:
            await self._push(batch_id, done.input_grads, then() if then else None)
        except Exception as exc:
            failures.append(exc)
        else:
            pushed()
        try:
            seconds += await update.wait()  # its own time: it overlapped the push
        except Exception as exc:
            failures.append(exc)
        self._dense.record(seconds)
        if failures:
            raise failures[0]
        return done.loss

    async def join(self) -> bool:
        """This rank's data has ended: take part in the other ranks' step with a weight of 0
        and apply its update. False once every rank's data has ended (no update)."""
        assert self.ranks is not None, "join() is for a rank of several"
        return await self._on_thread(_join, self.model, self.ranks).wait()

    async def score(self, inputs: F32, sequences: Mapping[str, Jagged] | None = None) -> F32:
        """The model's predictions for a held-out batch, on the model's thread."""
        if not sequences:
            return await self._on_thread(self.model.predict, inputs).wait()
        return await self._on_thread(_predict, self.model, inputs, sequences).wait()

    async def _push(self, batch_id: int, grads: dict[str, F32], then: Offer | None) -> None:
        """Push the gradients; with ``then``, answer its lookup in the same calls."""
        try:
            if then is None:
                await timed(self._pushes, self.cluster.push_grad(batch_id, grads))
            else:
                call = self.cluster.push_grad_then_lookup(batch_id, grads, then.lookup)
                _, then.answers = await timed(self._pushes, call)
        except RPC_ERRORS as exc:
            raise TrainingError(
                f"PushGrad of batch {batch_id} failed: {describe_error(exc)}"
            ) from exc


def _forward_backward(
    model: DenseModel,
    inputs: F32,
    labels: F32,
    scores: Scores,
    sequences: Mapping[str, Jagged] | None = None,
) -> TrainStep:
    """The model's step on one batch (on the model's thread), counted in the training AUCs.
    A model without sequence variables is called as it always was."""
    if sequences:
        step = model.train_step(inputs, labels, sequences=sequences)
    else:
        step = model.train_step(inputs, labels)
    scores.add_train(labels, step.predictions)
    return step


def _predict(model: DenseModel, inputs: F32, sequences: Mapping[str, Jagged]) -> F32:
    return model.predict(inputs, sequences=sequences)


def _update_after(step: TaskHandle[TrainStep], ranks: Ranks | None, model: DenseModel) -> float:
    """The update of ``step``, queued right behind it on the model's one thread (so done by
    now), its gradients averaged across ``ranks`` (None: one rank; ``local_sgd``: the
    rank's own update, then ``model`` averaged if this step is due); its own seconds. A
    failed step fails this too."""
    start = time.perf_counter()
    if ranks is None:
        step.result().update()
    elif ranks.local_sgd:
        step.result().update()
        ranks.local_step(model, trained=True)
    else:
        step.result().update_averaged(ranks.average)
    return time.perf_counter() - start


def _join(model: DenseModel, ranks: Ranks) -> bool:
    """A step on two examples of zeros, weighted 0 in the average: this rank's gradients count
    for nothing, and it applies the others' update (see :meth:`DenseStep.join`); with
    ``local_sgd``, a step counted without training, and the average if one is due."""
    if ranks.local_sgd:
        return ranks.local_step(model, trained=False)
    labels = len(model.inputs.labels)
    shape = (2,) if labels == 1 else (2, labels)
    step = model.train_step(
        np.zeros((2, model.inputs.width), dtype=np.float32), np.zeros(shape, dtype=np.float32)
    )
    step.update_averaged(lambda grads: ranks.average(grads, 0.0))
    return ranks.contributors > 0
