"""Where an output may go (``sniper.cluster._outputs``): apart from what the data's reader would
take as data, whatever the data's form; and an empty ``output`` (an experiment's points before
each has one) is no output."""

from __future__ import annotations

from pathlib import Path

import pytest

from sniper.cluster import load_train_config
from sniper.cluster._outputs import check_output


def _check(target: Path, data: str) -> None:
    check_output(target, f"--output {target.name}", "JSON", (data,), "the job", "the report")


def test_an_output_the_data_would_read_is_refused_and_others_are_not(tmp_path: Path) -> None:
    table = tmp_path / "tbl"
    (table / "2024-01").mkdir(parents=True)
    (table / "part-0.parquet").write_text("")
    days = tmp_path / "days"
    days.mkdir()
    refused = [
        (table / "part-0.parquet", f"parquet:{table / 'part-0.parquet'}", "the data file"),
        (table / "new.parquet", f"parquet:{table}", "in the data"),
        (table / "2024-01" / "x.parquet", f"parquet:{table}/*/*.parquet", "in the data"),
        (days / "report.json", f"criteo:{days}", "in the data"),
    ]
    for target, data, where in refused:
        with pytest.raises(ValueError, match=f"is {where} the job reads"):
            _check(target, data)
    # A Parquet table's directory reads .parquet files alone; a glob reads what it matches.
    _check(table / "report.json", f"parquet:{table}")
    _check(table / "2024-01" / "r.json", f"parquet:{table}/*/*.parquet")
    _check(tmp_path / "report.json", f"criteo:{days}")
    (days / "reports").mkdir()
    _check(days / "reports" / "r.json", f"criteo:{days}")  # not read: below the top level
    _check(tmp_path / "report.json", "synthetic")


def test_an_empty_output_is_none(tmp_path: Path) -> None:
    config = load_train_config(None, {"output": "", "progress": False})
    assert config.output == ""
