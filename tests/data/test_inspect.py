"""``inspect_table``'s suggested ``[features]``: which column is the label, and that no other
column named like a label is suggested as a feature."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from sniper.data import inspect_table

OTHERS = "# named like labels, so not features: "
FLAGS = "# dense columns of only 0 and 1 here: "


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
        (["clicked", "bought"], "clicked", ["bought"]),
        (["is_clicked", "ordered"], "is_clicked", ["ordered"]),
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
        "before the outcome: to dense)",
        f"{FLAGS}is_mobile (if one is an outcome, a second target, move it to labels: as a "
        "feature it hands the model its answer)",
    ]


def test_a_0_1_column_suggested_as_a_feature_is_pointed_out(tmp_path: Path) -> None:
    """A second target under a name no list holds (``made_purchase``) stays a dense
    feature, but the suggestion points out every column of only 0 and 1 beside the label;
    counts (``clicks``, a feature) and a table without a label are left alone."""
    columns = {
        "click": pa.array([0, 1, 1, 0]),
        "made_purchase": pa.array([0, 1, 0, None]),
        "clicks": pa.array([0, 3, 1, 0]),
        "weekend": pa.array([1.0, 0.0, 1.0, 1.0]),
        "one": pa.array([1, 1, 1, 1]),
    }
    features, comments = _suggested(tmp_path, columns)
    assert features["label"] == "click"
    assert features["dense"] == ["made_purchase", "clicks", "weekend", "one"]
    assert comments == [
        f"{FLAGS}made_purchase, weekend (if one is an outcome, a second target, move it to "
        "labels: as a feature it hands the model its answer)"
    ]
    no_label = {name: array for name, array in columns.items() if name != "click"}
    features, comments = _suggested(tmp_path, no_label)
    assert "made_purchase" in features["dense"] and comments == []


def _features(out: str) -> dict[str, Any]:
    """The ``[features]`` table of ``inspect_table``'s report ``out``."""
    features: dict[str, Any] = tomllib.loads(out[out.index("\n[features]") :])["features"]
    return features


def test_hashed_ids_beyond_2_53_are_suggested_sparse(tmp_path: Path) -> None:
    """An integer column with values beyond ``2**53`` holds ids (64-bit hashes), not numbers
    a model should take as floats: it was suggested dense. So is it in CSV, where pyarrow
    guesses a column of integers beyond ``2**63`` a double. A time in nanoseconds, as large,
    and small integers stay dense."""
    columns = {
        "click": pa.array([0, 1, 0]),
        "h": pa.array([2**64 - 5, 3, 2**63 + 95], pa.uint64()),
        "s": pa.array([-(2**62), 5, 2**53 + 1], pa.int64()),
        "event_time": pa.array([1_700_000_000_000_000_000 + i for i in range(3)], pa.int64()),
        "n": pa.array([2**53, -(2**53), 0], pa.int64()),
        "x": pa.array([1.5, 2.0, 3e20]),
    }
    parquet, csv = tmp_path / "t.parquet", tmp_path / "t.csv"
    pq.write_table(pa.table(columns), parquet)
    pacsv.write_csv(pa.table(columns), csv)
    for path in (parquet, csv):
        features = _features(inspect_table(path))
        assert features["sparse"] == ["h", "s"], path
        assert features["dense"] == ["event_time", "n", "x"], path


def _parts(directory: Path, frames: list[dict[str, Any]], suffix: str) -> list[Path]:
    """``frames`` as ``part-i`` files of ``directory``, beside a ``_SUCCESS`` marker."""
    directory.mkdir()
    (directory / "_SUCCESS").write_text("")
    paths = []
    for index, columns in enumerate(frames):
        path = directory / f"part-{index}{suffix}"
        if suffix == ".parquet":
            pq.write_table(pa.table(columns), path, row_group_size=40)
        else:
            pacsv.write_csv(pa.table(columns), path)
        paths.append(path)
    return paths


def test_a_directory_a_glob_or_training_data_form_is_inspected(tmp_path: Path) -> None:
    """``inspect_table`` takes what training reads, not a file alone (``'train' is not a
    file``): a directory (its ``*.parquet``, else ``*.csv`` files: not Spark's ``_SUCCESS``),
    a glob, or ``parquet:``/``csv:PATH``. The columns are the first file's; Parquet's rows
    and row groups count every file; a file of other columns is named."""
    frame = {"click": pa.array([0, 1] * 50), "user_id": pa.array(range(100))}
    first, second = _parts(tmp_path / "train", [frame, frame], ".parquet")
    for data in (tmp_path / "train", f"{tmp_path}/train/*.parquet", f"parquet:{tmp_path}/train"):
        out = inspect_table(data)
        assert out.splitlines()[:2] == [
            f"files: 2, first {first}",
            "format: parquet, 200 rows in 6 row groups",
        ], data
        assert _features(out) == {"label": "click", "sparse": ["user_id"], "dense": []}
    _parts(tmp_path / "csv", [frame, frame | {"price": pa.array([1.5] * 100)}], ".csv")
    for data in (tmp_path / "csv", f"csv:{tmp_path}/csv/part-*"):
        out = inspect_table(data)
        assert out.splitlines()[:3] == [
            f"files: 2, first {tmp_path}/csv/part-0.csv",
            "format: csv, 100 rows in the first file",
            f"differs: {tmp_path}/csv/part-1.csv has other columns or types than "
            f"{tmp_path}/csv/part-0.csv (training reads files of one schema; inspect it alone "
            "to see its own)",
        ], data
    pq.write_table(pa.table(frame | {"click": pa.array([0.0, 1.0] * 50)}), second)
    assert inspect_table(first.parent).splitlines()[2] == (
        f"differs: {second} has other columns or types than {first} (training reads files of "
        "one schema; inspect it alone to see its own)"
    )
    _parts(tmp_path / "empty", [frame], ".csv")
    (tmp_path / "empty" / "part-1.csv").write_text("")
    empty = f"{tmp_path}/empty/part-1.csv: not CSV with a header row: Empty CSV file"
    with pytest.raises(ValueError, match=re.escape(empty)):
        inspect_table(tmp_path / "empty")
    missing = f"table pattern '{tmp_path}/nope/*' matches no file"
    with pytest.raises(FileNotFoundError, match=re.escape(missing)):
        inspect_table(f"{tmp_path}/nope/*")
