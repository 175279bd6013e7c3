"""The training and held-out scores of every label a model predicts.

A multi-task model (a click and a conversion label, say) is judged per label: the report gives
each label's figures (:attr:`~sniper.roles.TrainReport.per_label`), and its headline figures
(``train_auc``, ``eval_auc``...) are the first binary label's, the one a single-label job has.

A binary label keeps a :class:`~sniper.data.StreamingAuc` of the training batches and a
:class:`~sniper.roles._held_out.HeldOutScores` of the held-out ones (AUC and logloss). A
regression label keeps the squared errors (:class:`SquaredErrors`): its figures are RMSEs.
A checkpoint stores the first label's streams under the keys a single-label job always used
(``train_auc.``, ``held_out.``), and each further label's under ``label.NAME.``, so
checkpoints of single-label jobs resume as before.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sniper._figures import existing_figures
from sniper.data import StreamingAuc, log_loss
from sniper.roles._held_out import HeldOutScores

__all__ = ["Scores", "SquaredErrors", "label_columns"]

_TRAIN, _HELD_OUT = "train_auc.", "held_out."
_LOGLOSS = "logloss"
"""A binary label's training logloss ``[sum, examples]``, beside its AUC's arrays."""
Arrays = dict[str, NDArray[np.generic]]


def label_columns(
    labels: NDArray[np.float32], predictions: NDArray[Any], count: int
) -> Iterator[tuple[NDArray[np.float32], NDArray[Any]]]:
    """Each label's ``(labels, predictions)`` of a batch: ``[batch]`` arrays, ``count`` of
    them (one label's arrays are ``[batch]`` already; several labels' are columns)."""
    if count == 1:
        yield labels.reshape(-1), predictions.reshape(-1)
        return
    for k in range(count):
        yield labels[:, k], predictions[:, k]


class SquaredErrors:
    """A regression label's squared errors: their sum and count, per batch with
    ``per_batch`` (so that the second half of the held-out batches is exact: two numbers a
    held-out batch), else in all."""

    def __init__(self, per_batch: bool, sums: Sequence[float] = (), counts: Sequence[int] = ()):
        self.per_batch = per_batch
        self._sums = list(sums)
        self._counts = list(counts)

    @property
    def batches(self) -> int:
        """Batches counted (per batch), or 1 once any was (in all)."""
        return len(self._sums)

    def add(self, labels: NDArray[np.float32], predictions: NDArray[Any]) -> None:
        """Count one batch's examples."""
        error = float(np.sum((predictions.astype(np.float64) - labels) ** 2))
        if self.per_batch or not self._sums:
            self._sums.append(error)
            self._counts.append(len(labels))
        else:
            self._sums[0] += error
            self._counts[0] += len(labels)

    def rmse(self, first: int = 0) -> float:
        """The root mean squared error of the batches from ``first`` on (NaN before any)."""
        count = sum(self._counts[first:])
        return math.sqrt(sum(self._sums[first:]) / count) if count else math.nan

    def state(self) -> Arrays:
        return {"sums": np.array(self._sums), "counts": np.array(self._counts, dtype=np.int64)}

    @classmethod
    def from_state(
        cls, per_batch: bool, arrays: Mapping[str, NDArray[np.generic]]
    ) -> SquaredErrors:
        return cls(per_batch, arrays["sums"].tolist(), arrays["counts"].tolist())


class _Binary:
    """A binary label's streams: training AUC (and logloss, beside other labels), held-out AUC
    and logloss."""

    def __init__(
        self,
        train: StreamingAuc | None = None,
        held_out: HeldOutScores | None = None,
        logloss: tuple[float, int] | None = None,
    ) -> None:
        """``logloss``: the training logloss's sum and examples, kept when the model has
        other labels (its own loss is then the mean of every label's, a regression's squared
        error among them); None when it has none (its loss is this label's logloss)."""
        self.train = train or StreamingAuc()
        self.held_out = held_out or HeldOutScores()
        self.logloss = logloss

    def add_train(self, labels: NDArray[np.float32], predictions: NDArray[Any]) -> None:
        self.train.update(labels, predictions)
        if self.logloss is not None and len(labels):
            total, count = self.logloss
            self.logloss = (
                total + log_loss(labels, predictions) * len(labels),
                count + len(labels),
            )

    def figures(self, trained: bool) -> dict[str, float]:
        figures = {"train_auc": self.train.value() if trained else math.nan}
        if self.logloss is not None and self.logloss[1]:
            figures["train_logloss"] = self.logloss[0] / self.logloss[1]
        if self.held_out.batches:
            figures["eval_auc"], figures["eval_logloss"] = self.held_out.late()
            figures["eval_auc_whole_run"] = self.held_out.whole.value()
        return existing_figures(figures)

    def state(self) -> tuple[Arrays, Arrays]:
        train: Arrays = dict(self.train.state())
        if self.logloss is not None:
            train[_LOGLOSS] = np.array(self.logloss, dtype=np.float64)
        return train, self.held_out.state()

    @classmethod
    def from_state(cls, train: Arrays, held_out: Arrays, others: bool) -> _Binary:
        """``others``: whether the model has other labels (see ``logloss``); a checkpoint
        written before the training logloss was kept counts it from the resume on."""
        train = dict(train)
        kept = train.pop(_LOGLOSS, None)
        logloss = None
        if others:
            logloss = (float(kept[0]), int(kept[1])) if kept is not None else (0.0, 0)
        return cls(StreamingAuc.from_state(train), HeldOutScores.from_state(held_out), logloss)


class _Regression:
    """A regression label's streams: training and held-out squared errors."""

    def __init__(
        self, train: SquaredErrors | None = None, held_out: SquaredErrors | None = None
    ) -> None:
        self.train = train or SquaredErrors(per_batch=False)
        self.held_out = held_out or SquaredErrors(per_batch=True)

    def add_train(self, labels: NDArray[np.float32], predictions: NDArray[Any]) -> None:
        self.train.add(labels, predictions)

    def figures(self, trained: bool) -> dict[str, float]:
        figures = {"train_rmse": self.train.rmse() if trained else math.nan}
        if self.held_out.batches:
            figures["eval_rmse"] = self.held_out.rmse(self.held_out.batches // 2)
            figures["eval_rmse_whole_run"] = self.held_out.rmse()
        return existing_figures(figures)

    def state(self) -> tuple[Arrays, Arrays]:
        return self.train.state(), self.held_out.state()

    @classmethod
    def from_state(cls, train: Arrays, held_out: Arrays, others: bool) -> _Regression:
        return cls(SquaredErrors.from_state(False, train), SquaredErrors.from_state(True, held_out))


class Scores:
    """Per label, the training and held-out scores (see the module doc); ``regression``
    names the labels that are regression targets."""

    def __init__(self, names: Sequence[str], regression: Sequence[str] = ()) -> None:
        self.names = tuple(names)
        self.regression = tuple(regression)
        others = len(self.names) > 1
        self._labels: list[_Binary | _Regression] = [
            _Regression()
            if name in self.regression
            else _Binary(logloss=(0.0, 0) if others else None)
            for name in self.names
        ]

    def add_train(self, labels: NDArray[np.float32], predictions: NDArray[Any]) -> None:
        """Count one training batch in each label's training figures."""
        columns = label_columns(labels, predictions, len(self.names))
        for label, (truth, guess) in zip(self._labels, columns, strict=True):
            label.add_train(truth, guess)

    def add_held_out(self, labels: NDArray[np.float32], predictions: NDArray[Any]) -> None:
        """Count one held-out batch in each label's held-out figures."""
        columns = label_columns(labels, predictions, len(self.names))
        for label, (truth, guess) in zip(self._labels, columns, strict=True):
            label.held_out.add(truth, guess)

    def live_auc(self) -> float:
        """The first binary label's AUC over every held-out example so far (0.0 before there
        are positives and negatives, or without a binary label): the progress line's."""
        for label in self._labels:
            if isinstance(label, _Binary):
                whole = label.held_out.whole
                return whole.value() if whole.positives and whole.negatives else 0.0
        return 0.0

    def state(self) -> Arrays:
        """Every label's streams, as a checkpoint's arrays (see the module doc for the keys)."""
        arrays: Arrays = {}
        for name, label in zip(self.names, self._labels, strict=True):
            prefix = self._prefix(name)
            train, held_out = label.state()
            arrays |= {f"{prefix}{_TRAIN}{k}": v for k, v in train.items()}
            arrays |= {f"{prefix}{_HELD_OUT}{k}": v for k, v in held_out.items()}
        return arrays

    @classmethod
    def from_state(
        cls,
        names: Sequence[str],
        arrays: Mapping[str, NDArray[np.generic]],
        regression: Sequence[str] = (),
    ) -> Scores:
        """The scores :meth:`state` wrote for labels ``names``; a label the arrays lack (a
        checkpoint of another data's labels) raises ``ValueError`` naming it."""
        scores = cls(names, regression)
        for i, name in enumerate(scores.names):
            prefix = scores._prefix(name)
            train = _part(arrays, prefix + _TRAIN, name)
            held_out = _part(arrays, prefix + _HELD_OUT, name)
            kind = _Regression if name in scores.regression else _Binary
            scores._labels[i] = kind.from_state(train, held_out, len(scores.names) > 1)
        return scores

    def figures(self, trained: bool) -> dict[str, dict[str, float]]:
        """Each label's report figures: a binary label's ``train_auc`` (once a step was
        ``trained``) and, beside other labels, ``train_logloss``; once a held-out batch was
        scored ``eval_auc``, ``eval_logloss`` (the second half of the run) and
        ``eval_auc_whole_run``; a regression label's ``train_rmse``, ``eval_rmse`` and
        ``eval_rmse_whole_run``. A figure that does not exist (an AUC of one class) is left
        out."""
        return {
            name: label.figures(trained)
            for name, label in zip(self.names, self._labels, strict=True)
        }

    def _prefix(self, name: str) -> str:
        return "" if name == self.names[0] else f"label.{name}."


def _part(arrays: Mapping[str, NDArray[np.generic]], prefix: str, label: str) -> Arrays:
    """The arrays under ``prefix``, the prefix taken off; none is a checkpoint of other labels."""
    found = {k.removeprefix(prefix): v for k, v in arrays.items() if k.startswith(prefix)}
    if not found:
        raise ValueError(f"the checkpoint holds no scores of label {label!r}")
    return found
