"""open_reader: one string names the data, as ``--data`` and config files do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sniper.data import (
    DATA_KINDS,
    CriteoTsv,
    ParquetReader,
    SyntheticCtr,
    open_reader,
    write_parquet,
)
from sniper.data._workload import load_workload
from tests.data._helpers import assert_batches_equal, criteo_line, small_generator


def test_synthetic() -> None:
    reader = open_reader("synthetic", scale=0.02, num_batches=8, batch_size=256)
    assert isinstance(reader, SyntheticCtr)
    assert_batches_equal(next(reader.batches()), small_generator().batch(0))
    workload = load_workload("seed_ctr")
    by_object = open_reader("synthetic", workload=workload, scale=0.02, num_batches=1, seed=3)
    assert isinstance(by_object, SyntheticCtr)
    assert by_object.seed == 3 and by_object.batch_size == workload.batch_size


def test_files_ignore_the_synthetic_settings(tmp_path: Path) -> None:
    tsv = tmp_path / "day.tsv"
    tsv.write_text(criteo_line("1", [""] * 13, ["a"] * 26) * 5)
    criteo = open_reader(f"criteo:{tsv}", scale=0.5, seed=9, num_batches=2, batch_size=2)
    assert isinstance(criteo, CriteoTsv)
    assert [b.batch_size for b in criteo.batches()] == [2, 2]
    assert repr(criteo) == f"CriteoTsv('{tsv}', batch_size=2, max_batches=2)"
    parquet = tmp_path / "day.parquet"
    write_parquet(CriteoTsv(tsv, batch_size=2), parquet)
    reader = open_reader(f"parquet:{parquet}", scale=0.5, workload="nope")
    assert isinstance(reader, ParquetReader)
    assert reader.batch_size == 2 and reader.num_batches == 3


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        ("synthetic", ValueError, "synthetic data is endless: say how many batches"),
        ("criteo:", ValueError, "criteo data needs a file: criteo:PATH"),
        (
            "parquet",
            LookupError,
            "unknown data 'parquet'; valid forms: synthetic, criteo:PATH, parquet:PATH, "
            "csv:PATH, tsv:PATH",
        ),
        ("tfrecord:x", LookupError, "unknown data 'tfrecord:x'; valid forms: "),
    ],
)
def test_bad_names_say_what_is_valid(data: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        open_reader(data)
    assert DATA_KINDS == ("synthetic", "criteo:PATH", "parquet:PATH", "csv:PATH", "tsv:PATH")


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "gone.parquet"
    with pytest.raises(FileNotFoundError, match=re.escape(f"Parquet file '{missing}' does not")):
        open_reader(f"parquet:{missing}")
