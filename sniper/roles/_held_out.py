"""The held-out batches' scores: what the report's ``eval_auc`` figures come from, in bounded
memory, and kept by a checkpoint so that a resumed run reports on the whole job.

The report gives the AUC of every held-out batch (``eval_auc_whole_run``) and the AUC and
logloss of the second half of them (``eval_auc``, ``eval_logloss``: the model as training
ends). The whole run is one :class:`~sniper.data.StreamingAuc`. The second half starts at a
batch known only when training ends, so the batches that may still fall in it are kept as
*segments*: per segment, its examples' counts per AUC bin (only the bins it uses), the sum of
their logloss, and its number of examples and batches.

Why segments and not the batches: a list of every held-out batch's labels and predictions (as
the trainer kept before) grows with the run, and a checkpoint would have to store it whole.
Here each segment holds one batch until there are more than :data:`SEGMENTS` of them; then
neighbours merge in pairs and a segment holds twice as many batches. Segments wholly before
the middle of the batches seen so far are dropped (the middle only moves later). The second
half is the segments whose middle lies at or after the middle batch: exactly the batches from
``n // 2`` on while every segment is one batch (up to ``4 * SEGMENTS`` held-out batches), else
from the segment boundary nearest to it, within ``1 / SEGMENTS`` of the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from sniper.data import StreamingAuc, log_loss

__all__ = ["SEGMENTS", "HeldOutScores"]

SEGMENTS = 64
"""Segments kept at least once they merge (at most twice as many): the second half's boundary
is exact up to ``4 * SEGMENTS`` held-out batches, and within ``1 / SEGMENTS`` of the run after."""


@dataclass(frozen=True)
class _Segment:
    """Consecutive held-out batches: their examples' counts in the bins they use."""

    bins: NDArray[np.int64]
    """The AUC bins used, increasing."""
    positives: NDArray[np.int64]
    negatives: NDArray[np.int64]
    loss: float
    """The sum of every example's logloss."""
    examples: int
    batches: int


def _merged(segments: Iterable[_Segment]) -> _Segment:
    parts = list(segments)
    bins, inverse = np.unique(np.concatenate([s.bins for s in parts]), return_inverse=True)

    def counts(arrays: list[NDArray[np.int64]]) -> NDArray[np.int64]:
        weights = np.concatenate(arrays).astype(np.float64)  # exact below 2**53
        return np.bincount(inverse, weights=weights, minlength=len(bins)).astype(np.int64)

    return _Segment(
        bins.astype(np.int64),
        counts([s.positives for s in parts]),
        counts([s.negatives for s in parts]),
        float(sum(s.loss for s in parts)),
        sum(s.examples for s in parts),
        sum(s.batches for s in parts),
    )


class HeldOutScores:
    """The held-out batches' scores (see the module doc); :meth:`state` and
    :meth:`from_state` carry them through a checkpoint."""

    def __init__(self) -> None:
        self.whole = StreamingAuc()
        """Every held-out example (read by the trainer's live view)."""
        self.batches = 0
        """Held-out batches seen."""
        self._segments: list[_Segment] = []
        self._first = 0  # the first kept segment's first batch
        self._size = 1  # batches a segment holds before the next begins

    def add(self, labels: NDArray[np.float32], probs: NDArray[np.float32]) -> None:
        """Add one held-out batch: its labels and the model's predictions."""
        self.whole.update(labels, probs)
        bins, positive = self.whole.binned(labels, probs)
        batch = _merged(
            [
                _Segment(
                    bins,
                    positive.astype(np.int64),
                    (~positive).astype(np.int64),
                    log_loss(labels, probs) * len(labels),
                    len(labels),
                    1,
                )
            ]
        )
        self.batches += 1
        last = self._segments[-1] if self._segments else None
        if last is not None and last.batches < self._size:
            self._segments[-1] = _merged([last, batch])
        else:
            self._segments.append(batch)
        while self._first + self._segments[0].batches <= self.batches // 2:
            self._first += self._segments.pop(0).batches
        if len(self._segments) > 2 * SEGMENTS:
            pairs = self._segments
            self._segments = [_merged(pairs[i : i + 2]) for i in range(0, len(pairs), 2)]
            self._size *= 2

    def late(self) -> tuple[float, float]:
        """AUC and logloss of the second half of the held-out batches (NaN, 0.0 before any)."""
        middle = self.batches // 2
        late, start = [], self._first
        for segment in self._segments:
            if start + segment.batches / 2 >= middle:
                late.append(segment)
            start += segment.batches
        if not late:
            return float("nan"), 0.0
        together = _merged(late)
        auc = StreamingAuc.from_state(
            {
                "positives": np.bincount(
                    together.bins, weights=together.positives, minlength=self.whole.bins
                ).astype(np.int64),
                "negatives": np.bincount(
                    together.bins, weights=together.negatives, minlength=self.whole.bins
                ).astype(np.int64),
            }
        )
        return auc.value(), together.loss / together.examples

    def state(self) -> dict[str, NDArray[np.generic]]:
        """Everything kept, as arrays (a checkpoint's)."""
        segments = self._segments
        whole = self.whole.state()

        def joined(field: str, dtype: type[np.generic]) -> NDArray[np.generic]:
            arrays = [getattr(s, field) for s in segments]
            return np.concatenate(arrays).astype(dtype) if arrays else np.zeros(0, dtype)

        return {
            "whole_positives": whole["positives"],
            "whole_negatives": whole["negatives"],
            "counters": np.array([self.batches, self._first, self._size], dtype=np.int64),
            "bins": joined("bins", np.int64),
            "positives": joined("positives", np.int64),
            "negatives": joined("negatives", np.int64),
            "lengths": np.array([len(s.bins) for s in segments], dtype=np.int64),
            "loss": np.array([s.loss for s in segments], dtype=np.float64),
            "examples": np.array([s.examples for s in segments], dtype=np.int64),
            "segment_batches": np.array([s.batches for s in segments], dtype=np.int64),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, NDArray[np.generic]]) -> HeldOutScores:
        """The scores :meth:`state` describes; ``ValueError`` if its arrays do not agree."""
        scores = cls()
        scores.whole = StreamingAuc.from_state(
            {"positives": state["whole_positives"], "negatives": state["whole_negatives"]}
        )
        scores.batches, scores._first, scores._size = (int(x) for x in state["counters"])
        lengths = [int(n) for n in state["lengths"]]
        ends = np.cumsum([0, *lengths])
        rows = zip(lengths, state["loss"], state["examples"], state["segment_batches"], strict=True)
        for index, (_, loss, examples, batches) in enumerate(rows):
            part = slice(int(ends[index]), int(ends[index + 1]))
            scores._segments.append(
                _Segment(
                    np.asarray(state["bins"][part], dtype=np.int64),
                    np.asarray(state["positives"][part], dtype=np.int64),
                    np.asarray(state["negatives"][part], dtype=np.int64),
                    float(loss),
                    int(examples),
                    int(batches),
                )
            )
        kept = sum(s.batches for s in scores._segments)
        if scores._first + kept != scores.batches or int(ends[-1]) != len(state["bins"]):
            raise ValueError(
                f"held-out scores of {scores.batches} batches keep {kept} from batch "
                f"{scores._first}: the state does not add up"
            )
        return scores
