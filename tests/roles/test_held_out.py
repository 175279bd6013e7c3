"""The held-out scores: the second half's AUC and logloss and the whole run's AUC, as the
trainer computed them from every held-out batch kept in a list, in bounded memory, and the same
after a pass through a checkpoint's arrays."""

from __future__ import annotations

import numpy as np
import pytest

from sniper.data import StreamingAuc, log_loss
from sniper.roles._held_out import SEGMENTS, HeldOutScores

Batch = tuple[np.ndarray, np.ndarray]


def batches(count: int, seed: int = 0) -> list[Batch]:
    """Held-out batches of a model that gets better as it trains (the AUC moves)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        labels = rng.integers(0, 2, 64).astype(np.float32)
        signal = min(1.0, i / max(1, count)) * (labels - 0.5)
        out.append(
            (labels, (1 / (1 + np.exp(-(signal + rng.normal(0, 1, 64))))).astype(np.float32))
        )
    return out


def reference(kept: list[Batch]) -> tuple[float, float, float]:
    """The list's figures: the second half's AUC and logloss, and the whole run's AUC."""

    def auc(part: list[Batch]) -> float:
        stream = StreamingAuc()
        for labels, probs in part:
            stream.update(labels, probs)
        return stream.value()

    late = kept[len(kept) // 2 :]
    labels = np.concatenate([labels for labels, _ in late])
    return auc(late), log_loss(labels, np.concatenate([p for _, p in late])), auc(kept)


@pytest.mark.parametrize("count", [1, 2, 7, 2 * SEGMENTS, 2 * SEGMENTS + 1, 4 * SEGMENTS])
def test_the_figures_are_the_lists_while_every_segment_is_one_batch(count: int) -> None:
    held = batches(count)
    scores = HeldOutScores()
    for labels, probs in held:
        scores.add(labels, probs)
    late_auc, late_logloss, whole = reference(held)
    assert scores.whole.value() == whole
    auc, logloss = scores.late()
    # 4 * SEGMENTS batches: 2 * SEGMENTS in the second half, each still a segment of its own.
    assert auc == late_auc
    assert logloss == pytest.approx(late_logloss, rel=1e-9)


def test_memory_stays_bounded_and_the_second_half_starts_within_a_segment_of_the_middle() -> None:
    held = batches(20 * SEGMENTS, seed=1)
    scores = HeldOutScores()
    for labels, probs in held:
        scores.add(labels, probs)
    assert len(scores._segments) <= 2 * SEGMENTS
    size = scores._size
    assert 1 < size <= len(held) // SEGMENTS
    middle = len(held) // 2
    starts = {}
    for start in range(middle - size, middle + size + 1):
        stream = StreamingAuc()
        for labels, probs in held[start:]:
            stream.update(labels, probs)
        starts[stream.value()] = start
    auc, _ = scores.late()
    assert auc in starts
    assert scores.whole.value() == reference(held)[2]


@pytest.mark.parametrize("cut", [0, 1, 5, 3 * SEGMENTS])
def test_a_checkpoint_in_between_changes_no_figure(cut: int) -> None:
    held = batches(3 * SEGMENTS + 7, seed=2)
    whole = HeldOutScores()
    for labels, probs in held:
        whole.add(labels, probs)
    first = HeldOutScores()
    for labels, probs in held[:cut]:
        first.add(labels, probs)
    resumed = HeldOutScores.from_state(first.state())
    for labels, probs in held[cut:]:
        resumed.add(labels, probs)
    assert resumed.late() == whole.late()
    assert resumed.whole.value() == whole.whole.value()
    assert resumed.batches == whole.batches


def test_a_state_that_does_not_add_up_is_refused() -> None:
    scores = HeldOutScores()
    for labels, probs in batches(5):
        scores.add(labels, probs)
    state = scores.state()
    state["counters"] = state["counters"] + np.array([1, 0, 0])
    with pytest.raises(ValueError, match="the state does not add up"):
        HeldOutScores.from_state(state)
