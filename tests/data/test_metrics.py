"""AUC and log loss against naive references: pairwise counting and the textbook formula."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sniper.data import StreamingAuc, log_loss, roc_auc

SETTINGS = settings(max_examples=200, deadline=None)


def pairwise_auc(labels: list[int], scores: list[float]) -> float:
    """Every (positive, negative) pair: 1 if the positive scores higher, 1/2 on a tie."""
    positives = [s for y, s in zip(labels, scores, strict=True) if y == 1]
    negatives = [s for y, s in zip(labels, scores, strict=True) if y == 0]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


@st.composite
def labelled(draw: st.DrawFn, values: st.SearchStrategy[float]) -> tuple[list[int], list[float]]:
    """Labels with both classes, and scores drawn from a small pool so that ties are common."""
    n = draw(st.integers(2, 40))
    labels = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    negative, positive = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
    labels[negative], labels[positive] = 0, 1
    pool = draw(st.lists(values, min_size=1, max_size=8))
    scores = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    return labels, scores


probabilities = st.floats(0.0, 1.0)


@SETTINGS
@given(labelled(st.floats(-1e6, 1e6)))
def test_roc_auc_equals_pairwise_count(case: tuple[list[int], list[float]]) -> None:
    labels, scores = case
    assert roc_auc(labels, scores) == pytest.approx(pairwise_auc(labels, scores), abs=1e-12)


@SETTINGS
@given(labelled(probabilities), st.integers(1, 64))
def test_streaming_auc_is_within_its_bound(case: tuple[list[int], list[float]], bins: int) -> None:
    labels, probs = case
    auc = StreamingAuc(bins)
    half = len(labels) // 2  # two updates, to exercise accumulation
    auc.update(labels[:half], probs[:half])
    auc.update(labels[half:], probs[half:])
    assert abs(auc.value() - roc_auc(labels, probs)) <= auc.error_bound() + 1e-12
    assert auc.positives == sum(labels)
    assert auc.negatives == len(labels) - sum(labels)


def test_streaming_auc_is_close_on_spread_predictions() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=200_000)
    labels = rng.random(len(logits)) < 1 / (1 + np.exp(-logits))
    probs = 1 / (1 + np.exp(-logits))
    auc = StreamingAuc()
    for part in range(4):
        auc.update(labels[part::4], probs[part::4])
    assert auc.error_bound() < 1e-3
    assert abs(auc.value() - roc_auc(labels, probs)) <= auc.error_bound()


def test_streaming_auc_merge_equals_one_stream() -> None:
    rng = np.random.default_rng(1)
    labels, probs = rng.integers(0, 2, 1000), rng.random(1000)
    whole, first, second = StreamingAuc(100), StreamingAuc(100), StreamingAuc(100)
    whole.update(labels, probs)
    first.update(labels[:300], probs[:300])
    second.update(labels[300:], probs[300:])
    first.merge(second)
    assert first.value() == whole.value()
    assert first.error_bound() == whole.error_bound()
    with pytest.raises(ValueError, match="cannot merge a StreamingAuc of 10 bins into 100"):
        first.merge(StreamingAuc(10))


@SETTINGS
@given(
    st.lists(st.tuples(st.integers(0, 1), probabilities), min_size=1, max_size=30),
)
def test_log_loss_equals_the_formula(pairs: list[tuple[int, float]]) -> None:
    eps = 1e-7
    terms = []
    for y, p in pairs:
        q = min(max(p, eps), 1 - eps)
        terms.append(-(y * math.log(q) + (1 - y) * math.log(1 - q)))
    labels, probs = zip(*pairs, strict=True)
    assert log_loss(list(labels), list(probs)) == pytest.approx(sum(terms) / len(terms), rel=1e-9)


def test_auc_of_one_class_is_refused() -> None:
    message = "AUC needs both classes, got 0 positives and 3 negatives"
    with pytest.raises(ValueError, match=re.escape(message)):
        roc_auc([0, 0, 0], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="AUC needs both classes, got 0 positives and 0"):
        roc_auc([], [])


def test_streaming_auc_is_nan_until_both_classes_are_seen() -> None:
    auc = StreamingAuc()
    assert math.isnan(auc.value()) and math.isnan(auc.error_bound())
    auc.update([1, 1], [0.2, 0.4])
    assert math.isnan(auc.value())
    auc.update([0], [0.3])
    assert auc.value() == 0.5


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: roc_auc([0, 2], [0.1, 0.2]), "labels must be 0 or 1"),
        (lambda: roc_auc([0, 1], [0.1]), "scores must have the labels' shape (2,), got (1,)"),
        (lambda: roc_auc([0, 1], [0.1, math.nan]), "scores must be finite; got NaN or infinity"),
        (lambda: roc_auc([[0, 1]], [[0.1, 0.2]]), "labels must be 1-D, got shape (1, 2)"),
        (
            lambda: StreamingAuc().update([0, 1], [0.5, 1.5]),
            "probs must be probabilities in [0, 1] (apply a sigmoid to logits)",
        ),
        (lambda: log_loss([], []), "log loss of no examples is undefined; pass at least one"),
        (lambda: StreamingAuc(0), "bins must be at least 1, got 0"),
    ],
)
def test_bad_input_is_named(call: object, message: str) -> None:
    assert callable(call)
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_probability_one_lands_in_the_last_bin() -> None:
    auc = StreamingAuc(10)
    auc.update([0, 1], [0.95, 1.0])
    assert auc.value() == 0.5  # both in bin 9: a tie
    assert auc.error_bound() == 0.5


def test_streaming_auc_state_carries_everything_seen() -> None:
    rng = np.random.default_rng(5)
    labels, probs = rng.integers(0, 2, 500), rng.random(500)
    auc = StreamingAuc(bins=200)
    auc.update(labels[:300], probs[:300])
    resumed = StreamingAuc.from_state(auc.state())
    assert resumed.bins == 200
    resumed.update(labels[300:], probs[300:])
    whole = StreamingAuc(bins=200)
    whole.update(labels, probs)
    assert resumed.value() == whole.value()
    assert auc.state()["positives"] is not auc.state()["positives"]  # a copy, not the live counts


@pytest.mark.parametrize(
    "state",
    [
        {"positives": np.zeros(3, np.int64), "negatives": np.zeros(4, np.int64)},
        {"positives": np.zeros(3), "negatives": np.zeros(3)},
        {"positives": np.array([1, -1, 0]), "negatives": np.zeros(3, np.int64)},
    ],
)
def test_a_streaming_auc_state_that_counts_nothing_sensible_is_refused(
    state: dict[str, np.ndarray],
) -> None:
    with pytest.raises(ValueError, match="a StreamingAuc state needs positives and negatives"):
        StreamingAuc.from_state(state)
