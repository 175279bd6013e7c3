"""``inspect_table``'s suggested ``[features]``: which column is the label, and that no other
column named like a label is suggested as a feature."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sniper.data import inspect_table

OTHERS = "# named like labels, so not features: "


def _suggested(tmp_path: Path, columns: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The suggested ``[features]`` table of a Parquet file of ``columns``, and its comments."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(columns), path)
    out = inspect_table(path)
    suggestion = out[out.index("\n[features]") :]
    comments = [line for line in suggestion.splitlines() if line.startswith("#")]
    return tomllib.loads(suggestion)["features"], comments


@pytest.mark.parametrize(
    ("names", "label", "others"),
    [
        (["click", "rating"], "click", ["rating"]),
        (["rating", "click"], "click", ["rating"]),
        (["label_click", "label_buy"], "label_click", ["label_buy"]),
        (["ctr_target", "converted"], "converted", ["ctr_target"]),
        (["y", "Buy"], "y", ["Buy"]),
    ],
)
def test_a_second_target_is_named_as_a_label_not_suggested_as_a_feature(
    tmp_path: Path, names: list[str], label: str, others: list[str]
) -> None:
    """Of the columns ``names``, ``label`` is the label and ``others`` are named as possible
    labels; an id named like a target (``target_item_id``) and a flag stay features."""
    columns = {
        "user_id": pa.array([1, 2]),
        "target_item_id": pa.array([3, 4]),
        "price": pa.array([1.5, 2.0]),
        "is_mobile": pa.array([True, False]),
    }
    columns |= {name: pa.array([0, 1]) for name in names}
    features, comments = _suggested(tmp_path, columns)
    assert features["label"] == label
    assert features["sparse"] == ["user_id", "target_item_id"]
    assert features["dense"] == ["price", "is_mobile"]
    assert comments == [
        f"{OTHERS}{', '.join(others)} (a second target: add it to labels; a value known "
        "before the outcome: to dense)"
    ]
