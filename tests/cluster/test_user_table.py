"""A user's own table trains end to end: ``sniper train`` with a ``[features]`` table, two hubs
over gRPC, a checkpoint that records the spec, ``sniper eval`` of the same table as CSV through
it, and ``sniper data inspect``'s suggestion."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from sniper.cluster import load_train_config, plan_training
from sniper.data import load_workload
from tests.cluster._sniper import sniper
from tests.data._tables import (
    damage_column_chunk,
    readme_table,
    readme_table_toml,
    user_table,
    write_csv_table,
    write_parquet_table,
)

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


def test_a_bad_row_late_in_the_eval_data_keeps_what_was_trained(tmp_path: Path) -> None:
    """The evaluation data is read at the end; a bad row there still fails the run in one
    line saying it is the eval_data's, and the trained steps are checkpointed first (they were
    lost with the end's checkpoint)."""
    write_parquet_table(tmp_path / "t.parquet", user_table(1200), 400)
    holdout = user_table(600, seed=9)
    prices = holdout.column("price").to_pylist()
    prices[450] = float("nan")
    holdout = holdout.set_column(holdout.column_names.index("price"), "price", pa.array(prices))
    write_parquet_table(tmp_path / "holdout.parquet", holdout, 100)  # row 450: a late group
    (tmp_path / "job.toml").write_text(
        JOB.replace("events/*.parquet", "t.parquet").replace("epochs = 2", "epochs = 1")
    )
    done = sniper(tmp_path, "train", "--config", "job.toml", "--quiet")
    assert done.returncode == 1, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    ended = re.fullmatch(
        re.escape(
            "sniper: error: eval_data: holdout.parquet: row 450: column 'price' is nan: dense "
            "values must be finite (a missing value is a null, which takes fill) (training "
            "ended at step "
        )
        + r"(\d+)"
        + re.escape("; its checkpoint keeps it: sniper eval scores that once the data is fixed)"),
        line,
    )
    assert ended, line
    saved = (tmp_path / "ck" / "latest").read_text().strip()
    assert saved == f"step-{int(ended[1]):08d}" and int(ended[1]) % 10 != 0  # the end's own


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


def test_inspect_suggests_no_other_label_as_a_feature(tmp_path: Path) -> None:
    """The README's table has a click, a buy and a rating: click is the label, and the other
    two, which would hand the model its answer as dense or sparse features, are named in one
    comment as possible labels."""
    write_parquet_table(tmp_path / "t.parquet", readme_table(100), 50)
    done = sniper(tmp_path, "data", "inspect", "t.parquet")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    table = tomllib.loads(out[out.index("\n[features]") :])["features"]
    assert table["label"] == "click"
    sparse = ["user_id", "item_id", "gender", "genres", "last_item", "tags", "history"]
    assert table["sparse"] == sparse
    assert table["dense"] == ["age", "price", "timestamp"]
    assert (
        "# named like labels, so not features: rating, buy (a second target: add it to labels; "
        "a value known before the outcome: to dense)"
    ) in out.splitlines()


TWO_LABELS = """\
data = "parquet:t.parquet"
eval_every = 4
batch_size = 128
launcher = "inprocess"
hidden = [16]
epochs = 2
checkpoint_dir = "ck"
checkpoint_every = 20

[features]
labels = ["click", "buy"]
sparse = ["user_id", "item_id", "gender", "genres"]
dense = ["age", "price"]

[features.columns.genres]
pooling = "mean"
weights = "genre_weights"

[features.columns.item_id]
pooling = "sqrtn"
"""


def test_a_two_label_table_with_weighted_and_mean_bags_trains_each_label(tmp_path: Path) -> None:
    """``labels = [...]`` trains one output per label and scores each; a column's pooling and
    weights reach its variable on the ps (recorded in the checkpoint)."""
    table = user_table(3000, seed=4)
    click = pc.equal(table["rating"], "like")
    buy = pc.and_(click, pc.greater(table["price"].fill_null(0.0), 12.0))
    weights = [[1.0 + i for i in range(len(g))] for g in table["genres"].to_pylist()]
    table = table.append_column("click", pc.cast(click, pa.int64()))
    table = table.append_column("buy", pc.cast(buy, pa.int64()))
    table = table.append_column("genre_weights", pa.array(weights, pa.list_(pa.float32())))
    write_parquet_table(tmp_path / "t.parquet", table, 500)
    (tmp_path / "job.toml").write_text(TWO_LABELS)

    done = sniper(tmp_path, "train", "--config", "job.toml", "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "train_report.json").read_text())
    assert set(report["per_label"]) == {"click", "buy"}
    assert report["per_label"]["click"]["eval_auc"] > 0.7  # it depends on item_id and gender
    assert report["per_label"]["buy"]["eval_auc"] > 0.6
    job = json.loads(sorted((tmp_path / "ck").glob("step-*/job.json"))[-1].read_text())
    pooling = {name: v["pooling"] for name, v in job["config"]["variables"].items()}
    assert pooling == {"user_id": "sum", "item_id": "sqrtn", "gender": "sum", "genres": "mean"}
    assert job["config"]["labels"] == ["click", "buy"]


def test_a_regression_label_trains_beside_a_binary_one_and_reports_rmse(tmp_path: Path) -> None:
    """``regression = true``: the model fits the column's values with squared error, and the
    report gives that label's RMSE (below the target's own spread: it learned) beside the
    binary label's AUC."""
    table = user_table(6000, seed=5)
    liked = pc.equal(table["rating"], "like")
    items = pc.cast(pc.utf8_slice_codeunits(table["item_id"], 5), pa.int64())
    stars = pc.add(
        pc.multiply(pc.cast(pc.equal(pc.bit_wise_and(items, 3), 0), pa.float64()), 2.0), 2.5
    )
    table = table.append_column("click", pc.cast(liked, pa.int64()))
    table = table.append_column("stars", stars)
    write_parquet_table(tmp_path / "t.parquet", table, 500)
    job = TWO_LABELS.replace(
        'labels = ["click", "buy"]', 'labels = ["click", { column = "stars", regression = true }]'
    )
    job = job.replace('weights = "genre_weights"\n', "")
    scaled = (
        '[features.columns.age]\ntransform = "standardize"\n'
        '[features.columns.price]\ntransform = "log1p"\n'
    )
    (tmp_path / "job.toml").write_text("lr = 0.01\n" + job + scaled)

    done = sniper(tmp_path, "train", "--config", "job.toml", "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "train_report.json").read_text())
    click, stars_figures = report["per_label"]["click"], report["per_label"]["stars"]
    assert click["eval_auc"] > 0.65 and report["eval_auc"] == click["eval_auc"]
    spread = float(np.std(stars.to_numpy()))
    assert 0 < stars_figures["eval_rmse"] < 0.8 * spread, (stars_figures, spread)
    assert "eval_auc" not in stars_figures
    job_json = json.loads(sorted((tmp_path / "ck").glob("step-*/job.json"))[-1].read_text())
    assert job_json["config"]["regression"] == ["stars"]


def test_the_readmes_table_trains_as_written(tmp_path: Path) -> None:
    """README's "Your table" block, as it stands, over a table of its columns: two labels, a
    weighted bag, a sequence (which the mmoe it names takes as its mean) and a shared table,
    read by two hubs."""
    (tmp_path / "events").mkdir()
    for part in range(2):
        write_parquet_table(
            tmp_path / "events" / f"part-{part}.parquet", readme_table(1000, part), 250
        )
    write_parquet_table(tmp_path / "holdout.parquet", readme_table(400, seed=9), 400)
    (tmp_path / "job.toml").write_text("batch_size = 128\n" + readme_table_toml())

    done = sniper(tmp_path, "train", "--config", "job.toml", "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "train_report.json").read_text())
    assert set(report["per_label"]) == {"click", "buy"}
    assert report["eval_data_examples"] == 400


SMALL_JOB = """\
data = "parquet:t.parquet"
batch_size = 64
hidden = [8]

[features]
label = { column = "rating", positive = '== "like"' }
sparse = ["user_id", "item_id", "gender", "genres"]
dense = ["age", "price"]
"""


def test_a_written_sum_that_disagrees_with_the_features_pooling_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pooling = "sum"`` written under ``[variables]`` is the user's word, not the default
    a ``[features]`` column overrides: it trained as mean, silently."""
    write_parquet_table(tmp_path / "t.parquet", user_table(300), 100)
    for entry in ("genres", "default"):
        (tmp_path / "job.toml").write_text(
            f'{SMALL_JOB}\n[features.columns.genres]\npooling = "mean"\n'
            f'\n[variables.{entry}]\npooling = "sum"\n'
        )
        done = sniper(tmp_path, "train", "--config", "job.toml", "--quiet")
        if entry == "genres":
            assert done.returncode == 2, done.stderr[-3000:]
            assert done.stderr == (
                "sniper: error: variables.genres.pooling is 'sum' but the [features] column of "
                "genres says pooling = 'mean': say it in one place\n"
            )
        else:  # the column names genres: it is more specific than every variable's default
            assert done.returncode == 0, done.stderr[-3000:]
            monkeypatch.chdir(tmp_path)  # the data's path is the config's, relative
            job = load_train_config(tmp_path / "job.toml", {})
            tables = plan_training(job, load_workload(job.workload)).tables
            assert (tables["genres"].pooling, tables["item_id"].pooling) == ("mean", "sum")


def test_a_column_that_writes_sum_is_the_variables_word_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mirror of the test above: a column's ``pooling = "sum"`` is written, not a
    default. Against ``variables.genres.pooling = "mean"`` it trained as mean, silently, and
    ``variables.default.pooling = "mean"`` won over it."""
    write_parquet_table(tmp_path / "t.parquet", user_table(300), 100)
    monkeypatch.chdir(tmp_path)  # the data's path is the config's, relative
    for entry, column in (
        ("genres", 'pooling = "sum"'),
        ("default", 'pooling = "sum"'),
        ("genres", ""),
    ):
        (tmp_path / "job.toml").write_text(
            f"{SMALL_JOB}\n[features.columns.genres]\n{column}\n"
            f'\n[variables.{entry}]\npooling = "mean"\n'
        )
        job = load_train_config(tmp_path / "job.toml", {})
        if (entry, column) == ("genres", 'pooling = "sum"'):
            with pytest.raises(ValueError, match="says pooling = 'sum': say it in one place"):
                plan_training(job, load_workload(job.workload))
            continue
        tables = plan_training(job, load_workload(job.workload)).tables
        # the column's sum over the default's mean; a column that says nothing, the variable's
        expected = "sum" if column else "mean"
        other = "mean" if entry == "default" else "sum"
        assert (tables["genres"].pooling, tables["item_id"].pooling) == (expected, other)


def test_a_bad_row_in_a_one_process_job_is_told_once(tmp_path: Path) -> None:
    """The hub shares the trainer's process: the trainer's ``sniper: error:`` line says why the
    hub stopped, and the hub's own log of it, which repeated it on the same stderr, is not
    shown there (a hub of its own process still logs it: tests/roles/test_hub_health.py)."""
    table = user_table(600)
    prices = table.column("price").to_pylist()
    prices[300] = 1e40
    table = table.set_column(table.column_names.index("price"), "price", pa.array(prices))
    write_parquet_table(tmp_path / "t.parquet", table, 100)
    (tmp_path / "job.toml").write_text(SMALL_JOB)
    done = sniper(tmp_path, "train", "--config", "job.toml", "--quiet")
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.count("row 300: column 'price' is 1e+40") == 1, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1].startswith("sniper: error: ")


def test_a_damaged_page_is_one_line_naming_the_file_and_row_group(tmp_path: Path) -> None:
    """Read by the hub (the label column: exit 1, as a bad row) or by the standardize pass
    before any process starts (``age``: exit 2, as a bad table); pyarrow's own error named
    neither the file nor the group."""
    standardized = f'{SMALL_JOB}\n[features.columns.age]\ntransform = "standardize"\n'
    for column, job, status in (("rating", SMALL_JOB, 1), ("age", standardized, 2)):
        path = tmp_path / "t.parquet"
        pq.write_table(user_table(600), path, row_group_size=200, use_dictionary=False)
        damage_column_chunk(path, column, 1)
        (tmp_path / "job.toml").write_text(job)
        done = sniper(tmp_path, "train", "--config", "job.toml", "--quiet")
        assert done.returncode == status, done.stderr[-3000:]
        said = "t.parquet: row group 1 cannot be read: Corrupt snappy compressed data.\n"
        assert done.stderr.count(said) == 1, done.stderr[-3000:]
        assert done.stderr.splitlines()[-1].startswith("sniper: error: ")
