"""Scoring a model on held-out data that no hub feeds: ``eval_data`` of ``sniper train``.

The ps pools embeddings only for batches that were fed to it, so the evaluator plays a hub
for its own input: it reads each batch (on a worker thread), feeds its signs under an id of
hub :data:`~sniper.roles._batch_id.EVAL_HUB` (never one of the training hubs'), and looks it up
with ``release`` so that no gradient is expected and the ps frees the batch at once.
:meth:`DataEvaluator.predictions` hands back each batch with the model's predictions (what
``sniper predict`` writes); :meth:`DataEvaluator.score` scores those with streaming AUC and
logloss over the whole input, one path for both.

As for the in-stream held-out batches, a lookup of a sign the table has not seen gives it a
fresh row (subject to the variable's admission), as it would at serving time.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import numpy as np
from numpy.typing import NDArray

from sniper._figures import existing_figures
from sniper.data import Batch, Reader, StreamingAuc, log_loss
from sniper.roles._batch_id import EVAL_HUB, BatchId
from sniper.roles._cluster import PsCluster
from sniper.roles._scores import SquaredErrors, label_columns
from sniper.rpc import Pooled

__all__ = ["DataEvaluator", "EvalResult", "Predict"]

Predict = Callable[[Mapping[str, Pooled], NDArray[np.float32]], NDArray[Any]]
"""The model: pooled embeddings and dense features of a batch to click probabilities."""


@dataclass(frozen=True)
class EvalResult:
    """One scoring of the evaluation data."""

    step: int
    """Training steps done when it was scored."""
    auc: float | None
    """The first binary label's (the only one of a single-label job); None without one, or
    where the data holds one class of it only (no AUC exists)."""
    logloss: float | None
    examples: int
    seconds: float
    per_label: dict[str, dict[str, float]] = field(default_factory=dict)
    """Each label's ``auc`` and ``logloss`` (a regression label's ``rmse``), by name."""


class DataEvaluator:
    """Scores a model on every batch of ``reader`` (see the module doc)."""

    def __init__(
        self,
        reader: Reader,
        cluster: PsCluster,
        variables: list[str],
        regression: Sequence[str] = (),
    ) -> None:
        """``regression``: the labels that are regression targets (scored by RMSE)."""
        self.reader = reader
        self.cluster = cluster
        self.variables = variables
        self.regression = tuple(regression)
        self._rounds = 0

    async def predictions(self, predict: Predict) -> AsyncIterator[tuple[Batch, NDArray[Any]]]:
        """Every batch of the input, in order, with ``predict``'s predictions for it."""
        epoch = self._rounds  # a fresh id space per pass: no id is fed twice
        self._rounds += 1
        batches = self.reader.batches()
        index = 0
        while (batch := await anyio.to_thread.run_sync(_next, batches)) is not None:
            batch_id = BatchId(EVAL_HUB, epoch, index).pack()
            index += 1
            await self.cluster.feed_sample(batch_id, batch.sparse)
            pooled = await self.cluster.embedding_lookup(batch_id, self.variables, release=True)
            yield batch, predict(pooled, batch.dense)

    async def score(self, predict: Predict, step: int) -> EvalResult:
        """AUC and logloss of ``predict`` over the whole input (RMSE of a regression label);
        ``step`` labels the result."""
        start = time.perf_counter()
        names = self.reader.label_names
        aucs = {name: StreamingAuc() for name in names if name not in self.regression}
        losses = dict.fromkeys(aucs, 0.0)
        errors = {name: SquaredErrors(per_batch=False) for name in self.regression}
        examples = 0
        async for batch, probs in self.predictions(predict):
            columns = label_columns(batch.labels, probs, len(names))
            for name, (truth, guess) in zip(names, columns, strict=True):
                if name in errors:
                    errors[name].add(truth, guess)
                else:
                    aucs[name].update(truth, guess)
                    losses[name] += log_loss(truth, guess) * batch.batch_size
            examples += batch.batch_size
        if not examples:
            raise ValueError(f"the evaluation data {self.reader!r} holds no examples")
        figures = {n: {"auc": aucs[n].value(), "logloss": losses[n] / examples} for n in aucs}
        figures |= {name: {"rmse": errors[name].rmse()} for name in errors}
        figures = {name: existing_figures(values) for name, values in figures.items()}
        first = figures[next(iter(aucs))] if aucs else {}
        return EvalResult(
            step=step,
            auc=first.get("auc"),
            logloss=first.get("logloss"),
            examples=examples,
            seconds=time.perf_counter() - start,
            per_label={name: figures[name] for name in names},
        )


def _next(batches: Iterator[Batch]) -> Batch | None:
    return next(batches, None)
