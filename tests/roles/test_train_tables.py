"""sniper train sizes tables from its data: the generator, or the shape a Parquet file records."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sniper._train import TrainConfig, _data_shape, _variables_spec
from sniper._workload import load_workload
from sniper.data import CriteoTsv, SyntheticCtr, write_parquet


def test_parquet_from_synthetic_gets_the_generators_tables(tmp_path: Path) -> None:
    workload = load_workload("seed_ctr")
    path = tmp_path / "synthetic.parquet"
    write_parquet(SyntheticCtr(workload, num_batches=2, scale=0.01, seed=3), path)
    from_file = _variables_spec(workload, TrainConfig(data=f"parquet:{path}", scale=1.0))
    from_generator = _variables_spec(workload, TrainConfig(scale=0.01, seed=3))
    assert from_file == from_generator
    # Without a recorded shape, the workload's own figures size the tables.
    assert from_file != _variables_spec(workload, TrainConfig(data="criteo:unused"))


def test_criteo_parquet_falls_back_to_the_workload(tmp_path: Path) -> None:
    workload = load_workload("seed_ctr")
    tsv = tmp_path / "day.tsv"
    tsv.write_text("1" + "\t1" * 13 + "\tab" * 26 + "\n")
    path = tmp_path / "day.parquet"
    write_parquet(CriteoTsv(tsv, batch_size=1), path)
    assert _variables_spec(workload, TrainConfig(data=f"parquet:{path}")) == _variables_spec(
        workload, TrainConfig(data="criteo:unused")
    )


def test_recorded_signs_follow_the_runs_batch_size(tmp_path: Path) -> None:
    workload = load_workload("seed_ctr")
    path = tmp_path / "synthetic.parquet"
    write_parquet(SyntheticCtr(workload, num_batches=2, scale=0.3, batch_size=512), path)
    half = _data_shape(workload, TrainConfig(data=f"parquet:{path}", batch_size=512))
    full = _data_shape(workload, TrainConfig(data=f"parquet:{path}", batch_size=1024))
    assert full[1] == half[1]  # vocabularies do not depend on the batch size
    for name, signs in half[0].items():
        assert full[0][name] == max(1, round(2 * signs))


def test_a_file_of_another_workload_is_named(tmp_path: Path) -> None:
    workload = load_workload("seed_ctr")
    path = tmp_path / "other.parquet"
    write_parquet(SyntheticCtr(workload, num_batches=1, scale=0.01), path)
    table = pq.read_table(path)
    shape = json.loads(table.schema.metadata[b"sniper.shape"])
    shape["signs_per_batch"].pop("embedding_0")
    metadata = dict(table.schema.metadata) | {b"sniper.shape": json.dumps(shape).encode()}
    pq.write_table(table.replace_schema_metadata(metadata), path)
    with pytest.raises(ValueError, match="records no shape for embedding_0"):
        _data_shape(workload, TrainConfig(data=f"parquet:{path}"))


def test_trainer_settings_are_checked_with_the_config() -> None:
    with pytest.raises(ValueError, match="blas_threads must be 0"):
        TrainConfig(blas_threads=-1)
