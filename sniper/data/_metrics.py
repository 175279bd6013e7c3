"""Quality metrics of a CTR model: exact and streaming AUC, and log loss.

Both AUCs are one computation: sort examples into groups by score (each distinct score, or each
probability bin), count positives and negatives per group, and credit every positive with the
negatives of lower groups plus half of those in its own group (a tie counts one half, the
Mann-Whitney convention). The exact AUC's groups are distinct scores, so it has no error; the
streaming AUC's groups are fixed bins, so pairs that share a bin are all counted as ties.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sniper.data._checks import check_int

__all__ = ["LOG_LOSS_EPSILON", "StreamingAuc", "log_loss", "roc_auc"]

LOG_LOSS_EPSILON = 1e-7
""":func:`log_loss` clips probabilities to ``[eps, 1 - eps]`` so a confident miss is finite."""


def roc_auc(labels: ArrayLike, scores: ArrayLike) -> float:
    """Exact area under the ROC curve of ``scores`` (any monotone score: logits, probabilities).

    The probability that a random positive scores above a random negative, ties counting one
    half. ``O(n log n)``: one sort, then per-group counts.
    """
    y = _labels(labels)
    s = _values("scores", scores, len(y))
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite; got NaN or infinity")
    order = np.argsort(s)
    sorted_scores = s[order]
    starts_group = np.empty(len(s), dtype=bool)
    starts_group[:1] = True
    np.not_equal(sorted_scores[1:], sorted_scores[:-1], out=starts_group[1:])
    group = np.cumsum(starts_group) - 1
    groups = int(np.count_nonzero(starts_group))
    positives = np.bincount(group, weights=y[order], minlength=groups)
    totals = np.bincount(group, minlength=groups)
    return _auc_of_groups(positives, totals - positives)


def log_loss(labels: ArrayLike, probs: ArrayLike) -> float:
    """Mean binary cross-entropy ``-(y log p + (1 - y) log(1 - p))``, in nats per example.

    Probabilities are clipped to ``[LOG_LOSS_EPSILON, 1 - LOG_LOSS_EPSILON]``.
    """
    y = _labels(labels)
    p = _probabilities(probs, len(y))
    if len(y) == 0:
        raise ValueError("log loss of no examples is undefined; pass at least one")
    p = np.clip(p, LOG_LOSS_EPSILON, 1.0 - LOG_LOSS_EPSILON)
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


class StreamingAuc:
    """AUC over a stream of predictions, in constant memory: two histograms of ``bins`` bins.

    A probability ``p`` falls in bin ``min(floor(p * bins), bins - 1)``. Pairs of a positive and
    a negative in different bins are ordered exactly; pairs in the same bin count one half, as
    a tie. So :meth:`value` is within :meth:`error_bound` of the exact :func:`roc_auc` of
    everything seen, and that bound is at most half the largest share of negatives in one bin:
    with 10,000 bins and predictions spread over a few hundred bins, typically below 1e-3.

    Not thread-safe: give each thread its own and :meth:`merge` them.
    """

    def __init__(self, bins: int = 10_000) -> None:
        check_int("bins", bins)
        self.bins = bins
        self._positives = np.zeros(bins, dtype=np.int64)
        self._negatives = np.zeros(bins, dtype=np.int64)

    @property
    def positives(self) -> int:
        """Positive examples seen."""
        return int(self._positives.sum())

    @property
    def negatives(self) -> int:
        """Negative examples seen."""
        return int(self._negatives.sum())

    def update(self, labels: ArrayLike, probs: ArrayLike) -> None:
        """Add examples: ``labels`` 0/1, ``probs`` predicted probabilities in ``[0, 1]``."""
        bin_of, positive = self.binned(labels, probs)
        self._positives += np.bincount(bin_of[positive], minlength=self.bins)
        self._negatives += np.bincount(bin_of[~positive], minlength=self.bins)

    def binned(
        self, labels: ArrayLike, probs: ArrayLike
    ) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
        """Each example's bin and whether it is a positive: what :meth:`update` counts, for a
        caller that keeps the counts of parts of a stream apart (and adds them up with
        :meth:`from_state`)."""
        y = _labels(labels)
        p = _probabilities(probs, len(y))
        return np.minimum((p * self.bins).astype(np.int64), self.bins - 1), y == 1

    def state(self) -> dict[str, NDArray[np.int64]]:
        """Everything seen, as arrays (a checkpoint's): the positives and negatives per bin."""
        return {"positives": self._positives.copy(), "negatives": self._negatives.copy()}

    @classmethod
    def from_state(cls, state: Mapping[str, ArrayLike]) -> StreamingAuc:
        """The AUC that had seen what :meth:`state` describes (as many bins as it has)."""
        positives = np.asarray(state["positives"])
        negatives = np.asarray(state["negatives"])
        if (
            positives.ndim != 1
            or positives.shape != negatives.shape
            or not all(np.issubdtype(a.dtype, np.integer) for a in (positives, negatives))
            or (positives < 0).any()
            or (negatives < 0).any()
        ):
            raise ValueError(
                "a StreamingAuc state needs positives and negatives: two 1-D arrays of counts "
                f"of one length, got {positives.dtype} {positives.shape} and "
                f"{negatives.dtype} {negatives.shape}"
            )
        auc = cls(len(positives))
        auc._positives += positives
        auc._negatives += negatives
        return auc

    def merge(self, other: StreamingAuc) -> None:
        """Add everything ``other`` has seen (it must have the same number of bins)."""
        if other.bins != self.bins:
            raise ValueError(f"cannot merge a StreamingAuc of {other.bins} bins into {self.bins}")
        self._positives += other._positives
        self._negatives += other._negatives

    def value(self) -> float:
        """AUC of everything seen so far, within :meth:`error_bound` of the exact one.

        NaN until both a positive and a negative have been seen (a stream's first reports
        should not raise), unlike :func:`roc_auc`, which refuses such input.
        """
        if self.positives == 0 or self.negatives == 0:
            return math.nan
        return _auc_of_groups(self._positives, self._negatives)

    def error_bound(self) -> float:
        """Largest possible ``|value() - exact AUC|``: half the share of pairs that tie in a bin
        (NaN while :meth:`value` is)."""
        pairs = self.positives * self.negatives
        if pairs == 0:
            return math.nan
        return 0.5 * float(self._positives @ self._negatives) / pairs


def _auc_of_groups(positives: NDArray[np.generic], negatives: NDArray[np.generic]) -> float:
    """AUC from per-group counts, groups in increasing score order."""
    p = np.asarray(positives, dtype=np.float64)
    n = np.asarray(negatives, dtype=np.float64)
    total_positive, total_negative = float(p.sum()), float(n.sum())
    if total_positive == 0 or total_negative == 0:
        raise ValueError(
            f"AUC needs both classes, got {total_positive:.0f} positives and "
            f"{total_negative:.0f} negatives"
        )
    below = np.cumsum(n) - n
    return float(p @ (below + 0.5 * n)) / (total_positive * total_negative)


def _labels(labels: ArrayLike) -> NDArray[np.float64]:
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {y.shape}")
    y = y.astype(np.float64)
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("labels must be 0 or 1")
    return y


def _values(name: str, values: ArrayLike, length: int) -> NDArray[np.float64]:
    v = np.asarray(values, dtype=np.float64)
    if v.shape != (length,):
        raise ValueError(f"{name} must have the labels' shape ({length},), got {v.shape}")
    return v


def _probabilities(probs: ArrayLike, length: int) -> NDArray[np.float64]:
    p = _values("probs", probs, length)
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError("probs must be probabilities in [0, 1] (apply a sigmoid to logits)")
    return p
