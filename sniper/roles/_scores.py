"""The training and held-out scores of every label a model predicts.

A multi-task model (a click and a conversion label, say) is judged per label: the report gives
each label's AUC and logloss (:attr:`~sniper.roles.TrainReport.per_label`), and its headline
figures (``train_auc``, ``eval_auc``...) are the first label's, the one a single-label job has.
Each label keeps its own streams: a :class:`~sniper.data.StreamingAuc` of the training batches
and a :class:`~sniper.roles._held_out.HeldOutScores` of the held-out ones. A checkpoint stores
the first label's streams under the keys a single-label job always used (``train_auc.``,
``held_out.``), and each further label's under ``label.NAME.``, so checkpoints of single-label
jobs resume as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sniper.data import StreamingAuc
from sniper.roles._held_out import HeldOutScores

__all__ = ["Scores", "label_columns"]

_TRAIN, _HELD_OUT = "train_auc.", "held_out."


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


class Scores:
    """Per label, the training AUC and the held-out scores (see the module doc)."""

    def __init__(
        self,
        names: Sequence[str],
        train: Sequence[StreamingAuc] | None = None,
        held_out: Sequence[HeldOutScores] | None = None,
    ) -> None:
        self.names = tuple(names)
        self.train = list(train) if train is not None else [StreamingAuc() for _ in names]
        self.held_out = list(held_out) if held_out is not None else [HeldOutScores() for _ in names]

    def add_train(self, labels: NDArray[np.float32], predictions: NDArray[Any]) -> None:
        """Count one training batch in each label's training AUC."""
        for auc, (truth, probs) in zip(
            self.train, label_columns(labels, predictions, len(self.names)), strict=True
        ):
            auc.update(truth, probs)

    def add_held_out(self, labels: NDArray[np.float32], predictions: NDArray[Any]) -> None:
        """Count one held-out batch in each label's held-out scores."""
        for scores, (truth, probs) in zip(
            self.held_out, label_columns(labels, predictions, len(self.names)), strict=True
        ):
            scores.add(truth, probs)

    def live_auc(self) -> float:
        """The first label's AUC over every held-out example so far (0.0 before there are
        positives and negatives): what the progress line shows."""
        whole = self.held_out[0].whole
        return whole.value() if whole.positives and whole.negatives else 0.0

    def state(self) -> dict[str, NDArray[np.generic]]:
        """Every label's streams, as a checkpoint's arrays (see the module doc for the keys)."""
        arrays: dict[str, NDArray[np.generic]] = {}
        for name, train, held_out in zip(self.names, self.train, self.held_out, strict=True):
            prefix = self._prefix(name)
            arrays |= {f"{prefix}{_TRAIN}{k}": v for k, v in train.state().items()}
            arrays |= {f"{prefix}{_HELD_OUT}{k}": v for k, v in held_out.state().items()}
        return arrays

    @classmethod
    def from_state(cls, names: Sequence[str], arrays: Mapping[str, NDArray[np.generic]]) -> Scores:
        """The scores :meth:`state` wrote for labels ``names``; a label the arrays lack (a
        checkpoint of another data's labels) raises ``ValueError`` naming it."""
        scores = cls(names)

        for i, name in enumerate(scores.names):
            prefix = scores._prefix(name)
            scores.train[i] = StreamingAuc.from_state(_part(arrays, prefix + _TRAIN, name))
            scores.held_out[i] = HeldOutScores.from_state(_part(arrays, prefix + _HELD_OUT, name))
        return scores

    def figures(self, trained: bool) -> dict[str, dict[str, float]]:
        """Each label's report figures: ``train_auc`` (0.0 before any step, as the report's
        is: ``trained``), and once a held-out batch was scored ``eval_auc``, ``eval_logloss``
        (the second half of the run) and ``eval_auc_whole_run``."""
        figures = {}
        for name, train, held_out in zip(self.names, self.train, self.held_out, strict=True):
            label = {"train_auc": train.value() if trained else 0.0}
            if held_out.batches:
                label["eval_auc"], label["eval_logloss"] = held_out.late()
                label["eval_auc_whole_run"] = held_out.whole.value()
            figures[name] = label
        return figures

    def _prefix(self, name: str) -> str:
        return "" if name == self.names[0] else f"label.{name}."


def _part(
    arrays: Mapping[str, NDArray[np.generic]], prefix: str, label: str
) -> dict[str, NDArray[np.generic]]:
    """The arrays under ``prefix``, the prefix taken off; none is a checkpoint of other labels."""
    found = {k.removeprefix(prefix): v for k, v in arrays.items() if k.startswith(prefix)}
    if not found:
        raise ValueError(f"the checkpoint holds no scores of label {label!r}")
    return found
