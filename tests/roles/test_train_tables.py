"""sniper train sizes tables from its data: the generator's vocabulary, or a file's ids, counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from sniper.cluster import TrainConfig, plan_training
from sniper.data import CriteoTsv, SyntheticCtr, write_parquet
from sniper.data._workload import load_workload
from sniper.placement import COUNT_HEADROOM

WORKLOAD = load_workload("seed_ctr")


def sizes(config: TrainConfig) -> dict[str, tuple[int, int, int]]:
    """(dim, capacity, shards) of every table the run would create."""
    plan = plan_training(config, WORKLOAD)
    return {name: (t.dim, t.capacity, t.shards) for name, t in plan.tables.items()}


def test_parquet_from_synthetic_gets_the_generators_shards_and_rows_for_its_ids(
    tmp_path: Path,
) -> None:
    """A converted file's tables are the generator's in width and shards (its first batch has
    the generator's signs), and hold the ids the file holds, counted, fewer than the
    generator's vocabulary that sizes the generator's (tests/cluster/test_table_sizing.py)."""
    path = tmp_path / "synthetic.parquet"
    write_parquet(SyntheticCtr(WORKLOAD, num_batches=2, scale=0.3, seed=3), path)
    from_file = sizes(TrainConfig(data=f"parquet:{path}", scale=1.0))
    from_generator = sizes(TrainConfig(scale=0.3, seed=3))
    assert len(from_file) == 76
    assert {name: (dim, shards) for name, (dim, _, shards) in from_file.items()} == {
        name: (dim, shards) for name, (dim, _, shards) in from_generator.items()
    }
    assert from_file["embedding_11"][2] > 1  # the huge variable is sharded
    assert all(from_file[name][1] <= from_generator[name][1] for name in from_file)
    assert from_file["embedding_11"][1] < from_generator["embedding_11"][1] / 10


def test_a_file_without_a_recorded_shape_is_sized_from_its_counted_ids(tmp_path: Path) -> None:
    tsv = tmp_path / "day.tsv"
    tsv.write_text("".join("1" + "\t1" * 13 + f"\t{row:x}" * 26 + "\n" for row in range(3000)))
    path = tmp_path / "day.parquet"
    write_parquet(CriteoTsv(tsv, batch_size=100), path)
    for data in (f"parquet:{path}", f"criteo:{tsv}"):
        tables = sizes(TrainConfig(data=data, batch_size=100))
        assert list(tables) == [f"C{j}" for j in range(1, 27)]
        # 3,000 ids a variable, with the headroom an estimate gets.
        assert {dim for dim, _, _ in tables.values()} == {16}
        for _, capacity, shards in tables.values():
            assert abs(capacity - 3000 * COUNT_HEADROOM) <= 0.03 * 3000 and shards == 1


def test_the_spec_overrides_sizes_and_the_workload_sets_the_width(tmp_path: Path) -> None:
    # 40,000 rows hold the ids of the batches in flight of every variable (at most ~20,500).
    config = TrainConfig(
        variables={"default": {"capacity": 40_000}, "embedding_3": {"dim": 8, "shards": 4}}
    )
    tables = sizes(config)
    assert tables["embedding_3"] == (8, 40_000, 4)
    assert tables["embedding_0"] == (WORKLOAD.embedding_dim, 40_000, 1)


def test_trainer_settings_are_checked_with_the_config() -> None:
    with pytest.raises(ValueError, match="blas_threads must be at least 0"):
        TrainConfig(blas_threads=-1)
