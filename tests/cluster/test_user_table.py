"""A user's own table trains end to end: ``sniper train`` with a ``[features]`` table, two hubs
over gRPC, a checkpoint that records the spec, ``sniper eval`` of the same table as CSV through
it, and ``sniper data inspect``'s suggestion."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pyarrow.parquet as pq

from tests.cluster._sniper import sniper
from tests.data._tables import user_table, write_csv_table, write_parquet_table

JOB = """\
data = "parquet:events/*.parquet"
eval_data = "parquet:holdout.parquet"
batch_size = 128
num_hubs = 2
hidden = [16]
epochs = 2
checkpoint_dir = "ck"
checkpoint_every = 10

[features]
label = { column = "rating", positive = '== "like"' }
sparse = ["user_id", "item_id", "gender", "genres"]
dense = ["age", "price"]

[features.columns.genres]
separator = "|"

[features.columns.price]
transform = "log1p"
fill = 1.0

[features.columns.age]
transform = "standardize"
fill = 30.0
"""


def test_a_users_parquet_table_trains_and_evaluates_as_csv(tmp_path: Path) -> None:
    (tmp_path / "events").mkdir()
    for part in range(2):
        table = user_table(1500, seed=part)
        write_parquet_table(tmp_path / "events" / f"part-{part}.parquet", table, 400)
    holdout = user_table(600, seed=9)
    write_parquet_table(tmp_path / "holdout.parquet", holdout, 1000)
    write_csv_table(tmp_path / "holdout.csv", holdout)
    (tmp_path / "job.toml").write_text(JOB)

    done = sniper(tmp_path, "train", "--config", "job.toml", "--launcher", "local", "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "train_report.json").read_text())
    assert report["examples"] + 128 * report["eval_batches"] == 2 * 3000
    assert report["eval_data_examples"] == 600
    assert report["eval_data_auc"] > 0.7  # the label depends on item_id and gender

    job = json.loads(sorted((tmp_path / "ck").glob("step-*/job.json"))[-1].read_text())
    recorded = job["config"]["features"]
    assert recorded["sparse"] == ["user_id", "item_id", "gender", "genres"]
    assert len(recorded["columns"]["age"]["stats"]) == 2  # measured, then shared

    # The checkpoint's spec reads the same table as CSV: the same signs, the same scores.
    scores = {}
    for data in ("parquet:holdout.parquet", "csv:holdout.csv"):
        done = sniper(tmp_path, "eval", "--checkpoint", "ck", "--data", data)
        assert done.returncode == 0, done.stderr[-3000:]
        scores[data] = done.stdout.strip().splitlines()[-1]
    assert scores["parquet:holdout.parquet"].split()[:3] == scores["csv:holdout.csv"].split()[:3]

    # A resume with another spec is one clear error, before any process starts.
    (tmp_path / "other.toml").write_text(
        JOB.replace('"gender", "genres"', '"genres"').replace('checkpoint_dir = "ck"\n', "")
    )
    done = sniper(tmp_path, "train", "--config", "other.toml", "--resume", "ck", "--quiet")
    assert done.returncode == 2
    assert "the [features] table (features.sparse)" in done.stderr
    assert done.stderr.startswith("sniper: error: resume: this config changes what")


def test_bad_tables_are_one_line_errors(tmp_path: Path) -> None:
    write_parquet_table(tmp_path / "t.parquet", user_table(50), 50)
    (tmp_path / "job.toml").write_text(
        JOB.replace("events/*.parquet", "t.parquet").replace('"genres"]', '"genres", "zip"]')
    )
    done = sniper(tmp_path, "train", "--config", "job.toml", "--quiet")
    assert done.returncode == 2
    assert done.stderr.startswith("sniper: error: t.parquet: no column 'zip', which [features]")
    assert len(done.stderr.strip().splitlines()) == 1

    unlabelled = JOB.replace("events/*.parquet", "t.parquet")
    (tmp_path / "job.toml").write_text(
        unlabelled.replace("positive = '== \"like\"'", 'positive = ""')
    )
    done = sniper(tmp_path, "train", "--config", "job.toml", "--quiet")
    assert done.returncode == 2
    assert "label column 'rating' holds strings; say which are positive" in done.stderr


def test_inspect_suggests_a_features_table_that_parses(tmp_path: Path) -> None:
    write_parquet_table(tmp_path / "t.parquet", user_table(100), 30)
    done = sniper(tmp_path, "data", "inspect", "t.parquet")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "format: parquet, 100 rows in 4 row groups" in out
    assert "genres     list<element: string>" in out
    table = tomllib.loads(out[out.index("\n[features]") :])["features"]
    assert table["label"]["column"] == "rating"
    assert table["sparse"] == ["user_id", "item_id", "gender", "genres"]
    assert table["dense"] == ["age", "price", "timestamp"]
    assert pq.read_metadata(tmp_path / "t.parquet").num_rows == 100
