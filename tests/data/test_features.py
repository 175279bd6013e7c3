"""``[features]``: the spec's own checks, each error naming its key."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sniper.data import DataSource, FeatureSpec, TableReader
from tests.data._tables import FEATURES, readme_table, readme_table_toml


def test_a_spec_round_trips_through_its_table() -> None:
    spec = FeatureSpec.from_table(FEATURES)
    assert spec.variables == ("user_id", "item_id", "gender", "genres")
    assert spec.label_names == ("rating",)
    assert FeatureSpec.from_table(spec.to_table()) == spec
    assert spec.pooling_of("genres") == "sum"


def test_shared_tables_pooling_and_labels() -> None:
    spec = FeatureSpec.from_table(
        {
            "labels": ["click", {"column": "rating", "positive": ">= 4"}],
            "sparse": ["item_id", "genres"],
            "columns": {
                "history": {"table": "item_id", "pooling": "mean"},
                "item_id": {"pooling": "mean"},
                "genres": {"pooling": "none", "separator": "|"},
            },
        }
    )
    assert spec.sparse == ("item_id", "genres", "history")
    assert spec.variables == ("item_id", "genres")
    assert spec.variable_of("history") == "item_id"
    assert spec.pooling_of("item_id") == "mean"
    assert spec.pooling_of("genres") == "none"
    assert spec.labels[1].rule() == (">=", 4.0)
    assert spec.label_names == ("click", "rating")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"sparse": ["a"]}, 'features: give label = "COLUMN" (or labels = [...])'),
        ({"label": "y"}, "features: name at least one sparse or dense column"),
        ({"label": "y", "labels": ["y"], "dense": ["a"]}, "features: give label or labels"),
        ({"label": "y", "dense": ["a"], "spars": []}, "features: unknown key 'spars'; known"),
        ({"label": "y", "sparse": ["a"], "dense": ["a"]}, "features: column 'a' is both"),
        ({"label": "y", "sparse": ["y"]}, "features: column 'y' is the label and a feature"),
        ({"label": "y", "sparse": "a"}, "features.sparse must be a list of column names"),
        (
            {"label": {"column": "y", "positive": "about 4"}, "dense": ["a"]},
            "features.label.positive must be a comparison such as",
        ),
        (
            {"label": {"column": "y", "positive": '>= "x"'}, "dense": ["a"]},
            "features.label.positive compares strings with == or != only",
        ),
        (
            {"label": "y", "dense": ["a"], "columns": {"a": {"transform": "log"}}},
            "features.columns.a.transform must be one of 'none', 'log1p', 'standardize', 'clip'",
        ),
        (
            {"label": "y", "dense": ["a"], "columns": {"a": {"transform": "clip"}}},
            "features.columns.a.bounds must be [low, high] with low <= high for clip, got []",
        ),
        (
            {"label": "y", "dense": ["a"], "columns": {"a": {"pooling": "mean"}}},
            "features.columns.a: 'a' is dense; table, separator, pooling and weights are for",
        ),
        (
            {"label": "y", "sparse": ["a"], "columns": {"a": {"fill": 1.0}}},
            "features.columns.a: 'a' is sparse; transform, fill, bounds and stats are for",
        ),
        (
            {"label": "y", "sparse": ["a"], "columns": {"b": {"table": "c"}}},
            "features.columns.b.table: 'c' must be a sparse column with a variable of its own",
        ),
        (
            {"label": "y", "sparse": ["a"], "columns": {"a": {"pooling": "max"}}},
            "features.columns.a.pooling must be one of sum, mean, sqrtn, none, got 'max'",
        ),
        (
            {
                "label": "y",
                "sparse": ["a"],
                "columns": {"b": {"table": "a", "pooling": "mean"}},
            },
            "features: the columns of variable 'a' disagree on pooling (mean, sum)",
        ),
        (
            {"label": "y", "sparse": ["a"], "columns": {"a": {"weights": "w", "pooling": "none"}}},
            'features.columns.a.weights: an unpooled column (pooling = "none") takes no weights',
        ),
        (
            {"label": "y", "dense": ["a"], "columns": {"c": {}}},
            "features.columns.c: 'c' is neither in features.sparse nor in features.dense",
        ),
    ],
)
def test_a_bad_spec_names_its_key(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        FeatureSpec.from_table(table)


def test_the_data_source_takes_a_features_table_for_tables_only() -> None:
    source = DataSource(data="csv:x.csv", features=FEATURES)
    assert source.feature_spec() == FeatureSpec.from_table(FEATURES)
    with pytest.raises(ValueError, match=re.escape("data = 'tsv:x' needs a [features] table")):
        DataSource(data="tsv:x")
    with pytest.raises(ValueError, match=re.escape("[features] maps a table's columns: it")):
        DataSource(data="synthetic", features=FEATURES)
    assert DataSource().feature_spec() is None


def _readme_table() -> dict[str, Any]:
    block = readme_table_toml()
    assert len(block.strip().splitlines()) < 30  # a newcomer's first look
    return tomllib.loads(block)


def test_the_readmes_table_parses() -> None:
    """README's "Your table" block is a valid job config and spec: two labels, a list column,
    a weighted bag, a sequence and a shared table."""
    values = _readme_table()
    spec = FeatureSpec.from_table(values["features"])
    assert spec.label_names == ("click", "buy")
    assert spec.variables == ("user_id", "item_id", "gender", "genres", "tags", "history")
    assert spec.variable_of("last_item") == "item_id"
    assert spec.pooling_of("genres") == "mean"
    assert spec.column("tags").weights == "tag_weights"
    assert spec.pooling_of("history") == "none"
    DataSource(data=values["data"], features=values["features"])


def test_the_readmes_table_reads_a_table_of_that_shape(tmp_path: Path) -> None:
    """A Parquet file with the README's columns reads through its spec into two-label
    batches, the weighted bag's weights beside its signs."""
    path = tmp_path / "events.parquet"
    table = readme_table(3).to_pydict()
    table |= {
        "genres": [["Comedy", "Drama"], [], None],
        "tags": [["x", "y"], ["z"], []],
        "tag_weights": [[0.5, 2.0], [1.0], []],
        "history": [[1, 2, 3], [4], []],
        "click": [1, 0, 1],
        "buy": [0, 0, 1],
        "last_item": ["b", None, "a"],
    }
    pq.write_table(pa.table(table, schema=readme_table(3).schema), path)
    spec = FeatureSpec.from_table(_readme_table()["features"])
    (batch,) = TableReader([path], spec, format="parquet", batch_size=3).batches()
    assert batch.labels.tolist() == [[1, 0], [0, 0], [1, 1]]
    assert set(batch.sparse) == set(spec.variables)
    assert batch.sparse["history"][1].tolist() == [0, 3, 4, 4]
    assert batch.sparse["item_id"][1].tolist() == [0, 2, 3, 5]  # item_id and last_item
    assert batch.weights["tags"].tolist() == [0.5, 2.0, 1.0]
