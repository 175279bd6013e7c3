"""``sniper predict --checkpoint --data --output`` writes one row per example of the data, its
label and the model's score, for a numpy and a torch model, through the command line; the
scores give the AUC ``sniper eval`` reports for the same checkpoint and data (one path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
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


def test_predict_scores_every_row_of_null_labels_and_refuses_an_output_over_its_data(
    tmp_path: Path,
) -> None:
    """A spec with ``skip_null_labels`` drops a row whose label is null in training; predict
    scores it all the same, its truth null, so that every score stays on its example's row.
    An output that is the data file would replace what it reads: one line and no file."""
    rng = np.random.default_rng(0)
    size = 1_200
    ages = rng.normal(35, 10, size)

    def table(click: list[Any]) -> pa.Table:
        return pa.table(
            {
                "user": pa.array([f"u{i % 97}" for i in range(size)]),
                "age": pa.array(ages),
                "click": pa.array(click, pa.int8()),
            }
        )

    clicks = rng.integers(0, 2, size).tolist()
    pq.write_table(table(clicks), tmp_path / "train.parquet")
    holes = [None if i % 4 == 0 else c for i, c in enumerate(clicks)]
    pq.write_table(table(holes), tmp_path / "holes.parquet")
    (tmp_path / "job.toml").write_text(
        'data = "parquet:train.parquet"\nbatch_size = 200\nnum_batches = 6\nhidden = [8]\n'
        'checkpoint_dir = "ck"\ncheckpoint_every = 3\nprogress = false\n'
        '[features]\nlabel = "click"\nsparse = ["user"]\ndense = ["age"]\n'
        "skip_null_labels = true\n"
    )
    trained = sniper(tmp_path, "train", "--config", "job.toml", "--output", "report.json")
    assert trained.returncode == 0, trained.stderr[-3000:]

    def refused(data: str, output: str) -> str:
        """The last line of a predict that must exit 2."""
        done = sniper(tmp_path, "predict", "--checkpoint", "ck", "--data", data, "--output", output)
        assert done.returncode == 2, done.stderr[-3000:]
        last: str = done.stderr.strip().splitlines()[-1]
        return last

    def scored(data: str, output: str) -> pa.Table:
        """The scores a predict wrote, one row per example of ``data``, in its order."""
        done = sniper(tmp_path, "predict", "--checkpoint", "ck", "--data", data, "--output", output)
        assert done.returncode == 0, done.stderr[-3000:]
        table = pq.read_table(tmp_path / output)
        assert table.column("row").to_pylist() == list(range(size))
        return table

    holed = scored("parquet:holes.parquet", "h.parquet")
    assert holed.column("click").to_pylist() == [None if c is None else float(c) for c in holes]

    before = (tmp_path / "train.parquet").read_bytes()
    assert refused("parquet:train.parquet", "train.parquet") == (
        "sniper: error: --output train.parquet is the data file predict reads "
        "(parquet:train.parquet): write the scores elsewhere"
    )
    assert (tmp_path / "train.parquet").read_bytes() == before
    assert refused("parquet:*.parquet", "s.parquet") == (
        "sniper: error: --output s.parquet is in the data predict reads (parquet:*.parquet): "
        "write the scores elsewhere"
    )

    whole = scored("parquet:train.parquet", "s.parquet")
    assert whole.column("click").to_pylist() == [float(c) for c in clicks]
    assert whole.column("click_score").equals(holed.column("click_score"))  # the same rows
