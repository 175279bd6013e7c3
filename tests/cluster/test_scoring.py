"""``sniper predict`` and ``sniper eval`` of a user's table, through the command line: predict
scores new events without their labels (and keeps the truth columns of data that has them),
eval needs the labels and prints every label's figures, and an output predict cannot write is
refused in one line before any work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from sniper.data import StreamingAuc
from tests.cluster._sniper import sniper
from tests.data._tables import readme_table, write_csv_table, write_parquet_table

LABELS = ["click", "buy", "stars"]
JOB = """\
data = "parquet:train.parquet"
batch_size = 200
launcher = "inprocess"
hidden = [8]
checkpoint_dir = "ck"
checkpoint_every = 3
progress = false

[features]
labels = ["click", "buy", { column = "stars", regression = true }]
sparse = ["user_id", "item_id", "gender"]
dense = ["price"]

[features.columns.price]
transform = "log1p"
"""


def _events(rows: int, seed: int) -> pa.Table:
    """The README's table's columns that :data:`JOB` reads (and ``genres``, which CSV
    writes), with a regression label beside its click and buy."""
    table = readme_table(rows, seed).select(
        ["user_id", "item_id", "gender", "genres", "price", "click", "buy"]
    )
    click = table["click"].to_numpy()
    return table.append_column("stars", pa.array(2.5 + 2.0 * click))


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of three labels, the data it scores (``new.parquet``), and that data
    without its label columns, as Parquet and CSV (``unlabeled.*``)."""
    root = tmp_path_factory.mktemp("scoring")
    write_parquet_table(root / "train.parquet", _events(1200, 0), 400)
    new = _events(500, 7)
    write_parquet_table(root / "new.parquet", new, 200)
    unlabeled = new.drop_columns(LABELS)
    write_parquet_table(root / "unlabeled.parquet", unlabeled, 200)
    write_csv_table(root / "unlabeled.csv", unlabeled)
    (root / "job.toml").write_text(JOB)
    done = sniper(root, "train", "--config", "job.toml", "--output", "report.json")
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def _predict(root: Path, data: str, output: str, *more: str) -> pa.Table:
    done = sniper(root, "predict", "--checkpoint", "ck", "--data", data, "--output", output, *more)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wrote 500 scores" in done.stdout
    return pq.read_table(root / output)


def test_predict_scores_data_without_its_labels(job: Path) -> None:
    """New events whose outcome is not known yet: the scores, numbered by row, without truth
    columns, the same as those of the same events with their labels (which keep theirs)."""
    scores = ["click_score", "buy_score", "stars_score"]
    labeled = _predict(job, "parquet:new.parquet", "labeled.parquet")
    assert labeled.column_names == ["row", *LABELS, *scores]
    for data, output in (("parquet:unlabeled.parquet", "a.parquet"), ("csv:unlabeled.csv", "b.pq")):
        table = _predict(job, data, output)
        assert table.column_names == ["row", *scores]
        assert table.column("row").to_pylist() == list(range(500))
        assert table.select(scores).equals(labeled.select(scores))


def test_predict_keeps_the_truth_of_the_labels_the_data_has(job: Path) -> None:
    """Data that records some outcomes and not others (its clicks and ratings, no purchases
    yet): the truth columns it has beside every label's scores, the same scores as with all
    of them. A label column that some files have and others lack is refused in one line."""
    scores = ["click_score", "buy_score", "stars_score"]
    new = pq.read_table(job / "new.parquet")
    write_parquet_table(job / "some.parquet", new.drop_columns(["buy"]), 200)
    labeled = _predict(job, "parquet:new.parquet", "all.parquet")
    some = _predict(job, "parquet:some.parquet", "some_out.parquet")
    assert some.column_names == ["row", "click", "stars", *scores]
    assert some.select(["click", "stars", *scores]).equals(
        labeled.select(["click", "stars", *scores])
    )
    mixed = job / "mixed"
    mixed.mkdir()
    write_parquet_table(mixed / "a.parquet", new, 200)
    write_parquet_table(mixed / "b.parquet", new.drop_columns(["buy"]), 200)
    done = sniper(
        job, "predict", "--checkpoint", "ck", "--data", "parquet:mixed", "--output", "m.parquet"
    )
    assert done.returncode == 2, done.stderr[-3000:]
    said = "mixed/b.parquet: lacks a label column (buy) that mixed/a.parquet has"
    assert done.stderr.startswith("sniper: error: ") and said in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert not (job / "m.parquet").exists()


def test_predict_keeps_the_columns_it_is_told_beside_each_rows_scores(job: Path) -> None:
    """``--keep user_id,item_id``: each row's ids beside its scores, in Parquet (row groups of
    170 rows, batches of 200: cut at other rows) and CSV (the ids as pyarrow reads them), so
    the scores join to the ids without counting rows. A column the output has already, or one
    the data lacks, is refused in one line."""
    scores = ["click_score", "buy_score", "stars_score"]
    new = pq.read_table(job / "new.parquet")
    write_parquet_table(job / "odd.parquet", new.drop_columns(LABELS), 170)
    plain = _predict(job, "parquet:unlabeled.parquet", "plain.parquet")
    for data, output in (("parquet:odd.parquet", "k.parquet"), ("csv:unlabeled.csv", "k2.pq")):
        kept = _predict(job, data, output, "--keep", "user_id,item_id")
        assert kept.column_names == ["row", "user_id", "item_id", *scores]
        assert kept.column("user_id").to_pylist() == new.column("user_id").to_pylist()
        assert kept.column("item_id").to_pylist() == new.column("item_id").to_pylist()
        assert kept.select(scores).equals(plain.select(scores))
    for data, keep, said in (
        ("parquet:new.parquet", "user_id,click", "--keep click: the output has a column "
         "'click' already (row, click, buy, stars, click_score, buy_score, stars_score)"),
        ("parquet:unlabeled.parquet", "user_id,age", "unlabeled.parquet: no column 'age' to "
         "keep; the file has user_id, item_id, gender, genres, price"),
    ):  # fmt: skip
        done = sniper(
            job, "predict", "--checkpoint", "ck", "--data", data, "--output", "bad.parquet",
            "--keep", keep,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr[-3000:]
        assert done.stderr.startswith("sniper: error: ") and said in done.stderr, done.stderr
        assert len(done.stderr.splitlines()) == 1
    assert not (job / "bad.parquet").exists()


def test_predict_writes_csv_or_tsv_for_an_output_so_named(job: Path) -> None:
    """``--output scores.csv`` is CSV, ``.tsv`` TSV: the same rows and scores as the Parquet
    (scores as text, to float32's precision). It held Parquet before, under a name that says
    text. A kept list column has no text form: one line, and no file."""
    plain = _predict(job, "parquet:new.parquet", "plain-all.parquet", "--keep", "user_id")
    for output, delimiter in (("scores.csv", ","), ("scores.tsv", "\t")):
        done = sniper(
            job, "predict", "--checkpoint", "ck", "--data", "parquet:new.parquet",
            "--output", output, "--keep", "user_id",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert (job / output).read_bytes()[:4] != b"PAR1"
        text = pacsv.read_csv(job / output, parse_options=pacsv.ParseOptions(delimiter=delimiter))
        assert text.column_names == plain.column_names
        assert text.column("row").to_pylist() == plain.column("row").to_pylist()
        assert text.column("user_id").to_pylist() == plain.column("user_id").to_pylist()
        for name in ("click", "click_score", "stars_score"):
            np.testing.assert_allclose(
                text.column(name).to_numpy(), plain.column(name).to_numpy(), rtol=1e-6
            )
    done = sniper(
        job, "predict", "--checkpoint", "ck", "--data", "parquet:new.parquet",
        "--output", "lists.csv", "--keep", "genres",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines() == [
        "sniper: error: --keep genres: a list<element: string> column has no CSV form; "
        "write Parquet (--output NAME.parquet) or keep it out"
    ]
    assert not (job / "lists.csv").exists() and not (job / "lists.csv.partial").exists()


def test_predict_scores_every_row_of_null_labels_and_eval_refuses_them(job: Path) -> None:
    """Rows whose labels are null (some of them: outcomes not known yet) are scored as any
    other, their truth null, the scores those of the same events with their labels; eval,
    which scores against the labels, refuses the first such row in one line."""
    new = pq.read_table(job / "new.parquet")
    holes = {"click": [3, 250, 499], "buy": [250, 400], "stars": [0, 3]}
    for name, rows in holes.items():
        mask = np.isin(np.arange(new.num_rows), rows)
        column = pa.array(new[name].to_numpy(), mask=mask)
        new = new.set_column(new.schema.get_field_index(name), name, column)
    write_parquet_table(job / "holes.parquet", new, 200)
    labeled = _predict(job, "parquet:new.parquet", "whole.parquet")
    scored = _predict(job, "parquet:holes.parquet", "holes-scores.parquet")
    assert scored.column_names == labeled.column_names
    assert scored.column("row").to_pylist() == list(range(500))
    for name, rows in holes.items():
        truth = scored.column(name).to_pylist()
        assert [row for row, value in enumerate(truth) if value is None] == rows
        whole = labeled.column(name).to_pylist()
        kept = [value for row, value in enumerate(whole) if row not in rows]
        assert [value for value in truth if value is not None] == kept
    scores = [f"{name}_score" for name in LABELS]
    assert scored.select(scores).equals(labeled.select(scores))

    done = sniper(job, "eval", "--checkpoint", "ck", "--data", "parquet:holes.parquet")
    assert done.returncode == 2
    assert done.stderr == (
        "sniper: error: holes.parquet: row 0: label column 'stars' is null "
        "(skip_null_labels = true in [features] drops such rows)\n"
    )


def test_eval_refuses_data_without_its_labels_in_one_line(job: Path) -> None:
    done = sniper(job, "eval", "--checkpoint", "ck", "--data", "parquet:unlabeled.parquet")
    assert done.returncode == 2
    assert done.stderr.startswith("sniper: error: unlabeled.parquet: no column 'click', which")
    assert len(done.stderr.strip().splitlines()) == 1


def test_eval_prints_every_labels_figures(job: Path) -> None:
    """Each label's AUC and logloss, a regression label's RMSE, as ``sniper train`` prints
    them: the figures of predict's scores of the same data."""
    done = sniper(job, "eval", "--checkpoint", "ck", "--data", "parquet:new.parquet")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert "each label (the figures above are click's)" in lines
    rows = {line.split()[0]: line.split()[1:] for line in lines[-3:]}
    assert list(rows) == LABELS
    scored = _predict(job, "parquet:new.parquet", "scores.parquet")
    for name in ("click", "buy"):
        auc = StreamingAuc()
        auc.update(scored.column(name).to_numpy(), scored.column(f"{name}_score").to_numpy())
        assert rows[name][:2] == ["AUC", f"{auc.value():.4f}"]
    error = scored.column("stars_score").to_numpy() - scored.column("stars").to_numpy()
    rmse = float(np.sqrt(np.mean(error.astype(np.float64) ** 2)))
    assert rows["stars"][0] == "RMSE" and rows["stars"][2] == "-"
    assert abs(float(rows["stars"][1]) - rmse) < 2e-4


def test_predict_refuses_an_output_it_cannot_write_in_one_line(job: Path) -> None:
    """A missing directory or a directory named as the file: one line, exit 2, before any
    ps starts (the checkpoint is not even read: this one does not exist)."""
    (job / "scores").mkdir()
    for output, said in (
        ("missing/x.parquet", "--output missing/x.parquet: directory missing does not exist: "
         "create it first"),
        ("scores", "--output scores is a directory: name the Parquet file to write"),
        ("new.parquet/x.parquet", "--output new.parquet/x.parquet: new.parquet is a file, not "
         "a directory"),
    ):  # fmt: skip
        done = sniper(
            job, "predict", "--checkpoint", "nock", "--data", "parquet:new.parquet",
            "--output", output,
        )  # fmt: skip
        assert done.returncode == 2
        assert done.stderr == f"sniper: error: {said}\n"
    assert not (job / "missing").exists() and not list((job / "scores").iterdir())


def test_eval_and_predict_refuse_synthetic_data_in_one_line(job: Path) -> None:
    """Scoring reads a file: ``synthetic`` is refused before the checkpoint is read (this
    one does not exist), as ``eval_data`` refuses it."""
    said = (
        "sniper: error: --data must be criteo:PATH, parquet:PATH, csv:PATH or tsv:PATH, "
        "got 'synthetic'\n"
    )
    for command in ("eval", "predict"):
        more = ("--output", "s.parquet") if command == "predict" else ()
        done = sniper(job, command, "--checkpoint", "nock", "--data", "synthetic", *more)
        assert (done.returncode, done.stderr) == (2, said)
