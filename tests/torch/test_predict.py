"""``sniper predict --checkpoint --data --output`` writes one row per example of the data, its
label and the model's score, for a numpy and a torch model, through the command line; the
scores give the AUC ``sniper eval`` reports for the same checkpoint and data (one path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from sniper.data import StreamingAuc, roc_auc
from tests.data._helpers import write_criteo
from tests.torch.test_train import sniper, train_command


@pytest.mark.parametrize(
    "model",
    [
        {"factory": "mlp", "params": {"hidden": [16]}},
        {"factory": "torch_mlp", "params": {"hidden": [16]}, "optimizer": "adam", "lr": 0.003},
    ],
    ids=["numpy", "torch"],
)
def test_predict_writes_the_scores_sniper_eval_scores(
    tmp_path: Path, model: dict[str, Any]
) -> None:
    write_criteo(tmp_path / "day.tsv", 3_000, seed=3)
    write_criteo(tmp_path / "eval.tsv", 1_500, seed=4)
    data = f"criteo:{tmp_path / 'eval.tsv'}"
    train_command(
        tmp_path,
        model,
        data=f"criteo:{tmp_path / 'day.tsv'}",
        checkpoint_dir="ck",
        checkpoint_every=5,
    )
    done = sniper(tmp_path, "predict", "--checkpoint", "ck", "--data", data, "--output", "s.pq")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wrote 1,500 scores" in done.stdout
    table = pq.read_table(tmp_path / "s.pq")
    assert table.column_names == ["row", "label", "label_score"]
    assert table.num_rows == 1_500
    assert table.column("row").to_pylist() == list(range(1_500))
    labels = table.column("label").to_numpy()
    scores = table.column("label_score").to_numpy()
    assert scores.dtype == np.float32 and np.all((scores > 0) & (scores < 1))
    assert not (tmp_path / "s.pq.partial").exists()

    evaluated = sniper(tmp_path, "eval", "--checkpoint", "ck", "--data", data)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    row = evaluated.stdout.strip().splitlines()[-1].split()
    assert row[0] == "1,500"
    auc = StreamingAuc()
    auc.update(labels, scores)
    assert f"{auc.value():.4f}" == row[1]
    assert abs(roc_auc(labels, scores) - float(row[1])) < 2e-3
    assert roc_auc(labels, scores) > 0.6
