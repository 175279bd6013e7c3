"""A figure that does not exist is ``null`` in the report, never 0.0 or NaN: a job of a
regression label alone has no AUC or logloss (its figures are RMSEs), and a job that held no
batch out has no held-out figures. The report file is strict JSON (a bare ``NaN`` is not),
prints such a figure as ``-``, and reads back through every reader of reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sniper.cluster import read_report
from sniper.experiment._run import report_metrics
from tests.cluster._sniper import sniper
from tests.data._tables import user_table, write_parquet_table

HEADLINE = (
    "train_auc",
    "train_logloss",
    "eval_auc",
    "eval_logloss",
    "eval_auc_whole_run",
    "eval_data_auc",
    "eval_data_logloss",
)

REGRESSION_JOB = """\
data = "parquet:t.parquet"
eval_data = "parquet:holdout.parquet"
batch_size = 128
eval_every = 4
hidden = [8]
progress = false
checkpoint_dir = "ck"

[features]
label = { column = "stars", regression = true }
sparse = ["user_id", "item_id", "gender"]
dense = ["age", "price"]
"""


def _refuse(constant: str) -> Any:
    raise ValueError(f"not strict JSON: {constant}")


def strict(path: Path) -> dict[str, Any]:
    """The JSON file at ``path``, refusing ``NaN`` and ``Infinity`` as strict parsers do."""
    loaded: dict[str, Any] = json.loads(path.read_text(), parse_constant=_refuse)
    return loaded


def _with_stars(rows: int, seed: int) -> Any:
    table = user_table(rows, seed=seed)
    items = pc.cast(pc.utf8_slice_codeunits(table["item_id"], 5), pa.int64())
    even = pc.cast(pc.equal(pc.bit_wise_and(items, 3), 0), pa.float64())
    return table.append_column("stars", pc.add(pc.multiply(even, 2.0), 2.5))


def test_a_regression_job_reports_no_auc_or_logloss_as_null(tmp_path: Path) -> None:
    write_parquet_table(tmp_path / "t.parquet", _with_stars(3000, 5), 500)
    write_parquet_table(tmp_path / "holdout.parquet", _with_stars(500, 9), 500)
    (tmp_path / "job.toml").write_text(REGRESSION_JOB)

    done = sniper(tmp_path, "train", "--config", "job.toml")
    assert done.returncode == 0, done.stderr[-3000:]
    report = strict(tmp_path / "train_report.json")
    assert {key: report[key] for key in HEADLINE} == dict.fromkeys(HEADLINE)
    stars = report["per_label"]["stars"]
    assert set(stars) == {"train_rmse", "eval_rmse", "eval_rmse_whole_run", "eval_data_rmse"}
    assert report["eval_data_history"][-1]["auc"] is None
    assert "nan" not in done.stdout.lower() and "0.0000" not in done.stdout
    assert "held-out, second half" not in done.stdout  # no binary label: no AUC table
    assert "stars  RMSE" in done.stdout
    job = strict(next((tmp_path / "ck").glob("step-*/job.json")))
    assert job["counters"]["eval_data_history"][-1]["logloss"] is None

    file = read_report(tmp_path / "train_report.json")
    assert file.report.train_auc is None and file.report.eval_data_auc is None
    metrics = report_metrics(file)
    assert metrics["eval_auc"] is None and metrics["train_logloss"] is None

    scored = sniper(tmp_path, "eval", "--checkpoint", "ck", "--data", "parquet:holdout.parquet")
    assert scored.returncode == 0, scored.stderr[-3000:]
    row = scored.stdout.strip().splitlines()
    assert "nan" not in scored.stdout.lower()
    assert any(line.split()[1:3] == ["-", "-"] for line in row if line.startswith("500 ")), row


def test_a_job_with_nothing_held_out_has_no_held_out_figures(tmp_path: Path) -> None:
    done = sniper(
        tmp_path,
        *("train", "--quiet", "--scale", "0.002", "--num-batches", "12", "--eval-every", "0"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = strict(tmp_path / "train_report.json")
    assert report["eval_batches"] == 0
    assert report["eval_auc"] is None and report["eval_logloss"] is None
    assert report["eval_auc_whole_run"] is None
    assert 0 < report["train_auc"] < 1 and report["train_logloss"] > 0
    assert "eval_auc" not in report["per_label"]["label"]
