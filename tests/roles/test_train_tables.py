"""sniper train sizes tables from its data: the generator, or the shape a Parquet file records."""

from __future__ import annotations

from pathlib import Path

from sniper._train import TrainConfig, _variables_spec
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
