"""A user's table, as the feature-spec tests write it: MovieLens-like columns in Parquet and
CSV (ints, strings, a list of strings, numbers with nulls, a string label), and the README's
"Your table" block with a table of its columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

README = Path(__file__).resolve().parents[2] / "README.md"
GENRES = ["Comedy", "Drama", "Action", "Horror", "Romance", "Sci-Fi"]

FEATURES: dict[str, Any] = {
    "label": {"column": "rating", "positive": '== "like"'},
    "sparse": ["user_id", "item_id", "gender", "genres"],
    "dense": ["age", "price"],
    "columns": {
        "price": {"transform": "log1p", "fill": 1.0},
        "age": {"transform": "standardize", "fill": 30.0},
    },
}
"""The ``[features]`` table of :func:`user_table`."""


def user_table(rows: int, seed: int = 0) -> Any:
    """A table whose label depends on its columns (a model can learn it)."""
    rng = np.random.default_rng(seed)
    users = rng.integers(-50, 200, rows)
    items = rng.integers(0, 300, rows)
    gender = np.array(["M", "F"])[rng.integers(0, 2, rows)]
    genres = [list(rng.choice(GENRES, rng.integers(0, 3), replace=False)) for _ in range(rows)]
    age = rng.integers(18, 70, rows).astype(float)
    price = rng.exponential(10.0, rows)
    score = (items % 3 == 0) * 1.5 + (gender == "F") * 0.5 - 0.7 + rng.normal(0, 0.5, rows)
    liked = np.where(score > 0, "like", "meh")
    age_column = pa.array(age, mask=rng.random(rows) < 0.1)
    price_column = pa.array(price, mask=rng.random(rows) < 0.1)
    gender_column = pa.array(gender.tolist(), mask=rng.random(rows) < 0.05)
    return pa.table(
        {
            "user_id": pa.array(users, pa.int64()),
            "item_id": pa.array([f"item-{i}" for i in items]),
            "gender": gender_column,
            "genres": pa.array(genres, pa.list_(pa.string())),
            "age": age_column,
            "price": price_column,
            "timestamp": pa.array(np.arange(rows) * 60, pa.int64()),
            "rating": pa.array(liked.tolist()),
        }
    )


def write_parquet_table(path: Path, table: Any, row_group_size: int) -> Path:
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def write_csv_table(path: Path, table: Any, separator: str = "|", delimiter: str = ",") -> Path:
    """``table`` as CSV (or TSV with ``delimiter="\\t"``): its list column as delimited text."""
    joined = [separator.join(v) if v is not None else None for v in table["genres"].to_pylist()]
    flat = table.set_column(table.schema.get_field_index("genres"), "genres", pa.array(joined))
    pacsv.write_csv(flat, path, pacsv.WriteOptions(delimiter=delimiter))
    return path


def readme_table_toml() -> str:
    """The README's "Your table" TOML block, as written there."""
    section = README.read_text()[README.read_text().index("## Your table") :]
    return section[section.index("```toml") + len("```toml\n") : section.index("```\n\n")]


def readme_table(rows: int, seed: int = 0) -> Any:
    """:func:`user_table` with the README's other columns: a click and a buy label, a
    ``last_item``, weighted ``tags`` and a ``history`` sequence of item ids."""
    rng = np.random.default_rng(seed + 100)
    table = user_table(rows, seed)
    liked = np.array(table["rating"].to_pylist()) == "like"
    price = np.nan_to_num(table["price"].to_numpy(zero_copy_only=False))
    tags = [[f"t{t}" for t in rng.integers(0, 20, rng.integers(0, 4))] for _ in range(rows)]
    weights = [rng.random(len(row)).astype(np.float32).tolist() for row in tags]
    history = [rng.integers(0, 300, rng.integers(0, 6)).tolist() for _ in range(rows)]
    columns = {
        "click": pa.array(liked.astype(np.int64)),
        "buy": pa.array((liked & (price > 12.0)).astype(np.int64)),
        "last_item": pa.array([f"item-{i}" for i in rng.integers(0, 300, rows)]),
        "tags": pa.array(tags, pa.list_(pa.string())),
        "tag_weights": pa.array(weights, pa.list_(pa.float32())),
        "history": pa.array(history, pa.list_(pa.int64())),
    }
    for name, column in columns.items():
        table = table.append_column(name, column)
    return table


def damage_column_chunk(path: Path, column: str, group: int) -> Path:
    """Flip 8 bytes in the middle of ``column``'s chunk in row group ``group`` of the Parquet
    file ``path``: a damaged data page behind an intact footer. Written without a dictionary,
    a snappy page then fails to decompress, and an uncompressed string page to decode."""
    chunks = pq.read_metadata(path).row_group(group)
    chunk = next(
        chunks.column(i)
        for i in range(chunks.num_columns)
        if chunks.column(i).path_in_schema == column
    )
    data = bytearray(path.read_bytes())
    middle = chunk.data_page_offset + chunk.total_compressed_size // 2
    data[middle : middle + 8] = bytes(b ^ 0xFF for b in data[middle : middle + 8])
    path.write_bytes(bytes(data))
    return path
