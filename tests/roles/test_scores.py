"""Each label's scores: a binary label's AUC streams and a regression label's squared errors,
through a checkpoint's arrays and back."""

from __future__ import annotations

import numpy as np
import pytest

from sniper.data import log_loss
from sniper.roles._scores import Scores


def test_a_binary_and_a_regression_label_are_scored_apart_and_survive_a_checkpoint() -> None:
    rng = np.random.default_rng(0)
    scores = Scores(("click", "stars"), regression=("stars",))
    clicks = []
    for step in range(6):
        click = (rng.random(64) < 0.3).astype(np.float32)
        stars = rng.normal(3.0, 1.0, 64).astype(np.float32)
        labels = np.stack([click, stars], axis=1)
        guess = np.stack([0.2 + 0.6 * click, stars + 0.5], axis=1).astype(np.float32)
        scores.add_train(labels, guess)
        clicks.append((click, guess[:, 0]))
        if step % 2:
            scores.add_held_out(labels, guess)
    figures = scores.figures(trained=True)
    assert figures["click"]["train_auc"] == 1.0 and "train_rmse" not in figures["click"]
    assert figures["stars"]["train_rmse"] == pytest.approx(0.5, abs=1e-6)
    # The click's own logloss: the model's loss is the mean of both labels', stars' error too.
    truth, guess = (np.concatenate(parts) for parts in zip(*clicks, strict=True))
    assert figures["click"]["train_logloss"] == pytest.approx(log_loss(truth, guess))
    assert figures["stars"]["eval_rmse"] == pytest.approx(0.5, abs=1e-6)
    back = Scores.from_state(("click", "stars"), scores.state(), regression=("stars",))
    assert back.figures(trained=True) == figures
    with pytest.raises(ValueError, match="the checkpoint holds no scores of label 'buy'"):
        Scores.from_state(("click", "buy"), scores.state())


def test_a_job_of_regression_labels_only_has_no_live_auc() -> None:
    scores = Scores(("stars",), regression=("stars",))
    scores.add_held_out(np.ones(4, dtype=np.float32), np.full(4, 2.0, dtype=np.float32))
    assert scores.live_auc() == 0.0
    # Nothing trained: no training figure, where a 0.0 read as a perfect fit.
    assert scores.figures(trained=False) == {
        "stars": {"eval_rmse": 1.0, "eval_rmse_whole_run": 1.0}
    }
