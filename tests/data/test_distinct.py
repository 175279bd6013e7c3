"""The distinct-sign count that sizes a ``capacity = 0`` table: accurate at every size, the same
over a user's table read by its sign columns alone as over its batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sniper.data import DistinctSigns, FeatureSpec, TableReader, count_distinct_signs
from sniper.hashing import feature_signs


@pytest.mark.parametrize("distinct", [0, 1, 10, 1000, 30_000, 45_000, 100_000, 1_500_000])
def test_the_estimate_is_within_three_percent_at_every_size(distinct: int) -> None:
    sketch = DistinctSigns()
    ids = np.arange(distinct, dtype=np.uint64)  # raw ids: their top bits are all zero
    for part in np.array_split(np.concatenate([ids, ids[::3]]), 7):  # each seen again
        sketch.add(part)
    assert abs(sketch.estimate() - distinct) <= max(0.03 * distinct, 1)


def test_merged_sketches_count_the_union() -> None:
    strings = np.array([f"user-{i}" for i in range(60_000)])
    data = np.frombuffer("".join(strings).encode(), np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in strings])]).astype(np.int64)
    signs = feature_signs("user", data, offsets)
    left, right, whole = DistinctSigns(), DistinctSigns(), DistinctSigns()
    left.add(signs[:40_000])
    right.add(signs[20_000:])
    whole.add(signs)
    left.merge(right)
    assert left.estimate() == whole.estimate()
    assert abs(whole.estimate() - 60_000) <= 0.03 * 60_000


def test_a_users_table_counts_the_signs_its_batches_carry(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    rows = 20_000
    users = rng.integers(0, 9_000, rows)
    tags = [[f"t{t}" for t in rng.integers(0, 500, rng.integers(0, 4))] for _ in range(rows)]
    table = pa.table(
        {
            "user": pa.array([f"u{u}" for u in users]),
            "item": pa.array(rng.integers(0, 2_000, rows), pa.int64()),
            "tags": pa.array(tags, pa.list_(pa.string())),
            "clicked": pa.array(rng.integers(0, 2, rows), pa.int64()),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=3_000)
    # Two columns share one variable: its ids are both columns' together.
    spec = FeatureSpec.from_table(
        {
            "label": "clicked",
            "sparse": ["user", "item", "tags"],
            "columns": {"tags": {"table": "item"}},
        }
    )
    reader = TableReader([tmp_path / "t.parquet"], spec, batch_size=512)
    counted = count_distinct_signs(reader, ["user", "item"])
    exact = {name: set[int]() for name in ("user", "item")}
    for batch in reader.batches():
        for name, values in exact.items():
            values.update(batch.sparse[name][0].tolist())
    assert set(counted) == {"user", "item"}
    for name, values in exact.items():
        assert abs(counted[name] - len(values)) <= 0.03 * len(values)
    # The items and the tags are one variable: its ids are both columns'.
    assert len(exact["item"]) > len(set(table["item"].to_pylist())) + 400
