"""A hub's read rate of a user's table: rows/s of ``TableReader`` over a Parquet file of string
columns, from the file to hashed batches (what a hub does before it feeds the ps).

Writes ROWS rows of COLUMNS string columns (values drawn from a vocabulary of 100k per
column, as ``item-123456``), a 0/1 label and two numbers, in row groups of 128k rows, to a
temporary file, then times one pass of ``TableReader.batches()`` (batch 1024) over it, after
a warm-up pass over the first batches (the hash kernel compiles once).

Usage: ``python benchmarks/table_read_rate.py [--rows 1000000] [--columns 10] [--csv]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from sniper.data import FeatureSpec, TableReader


def write_table(path: Path, rows: int, columns: int, csv: bool) -> list[str]:
    """The file, and the names of its string columns."""
    rng = np.random.default_rng(0)
    names = [f"s{i}" for i in range(columns)]
    data = {
        name: pa.array(np.char.add("item-", rng.integers(0, 100_000, rows).astype(str)))
        for name in names
    }
    data |= {"y": pa.array(rng.integers(0, 2, rows)), "a": pa.array(rng.random(rows))}
    data["b"] = pa.array(rng.random(rows))
    table = pa.table(data)
    if csv:
        pacsv.write_csv(table, path)
    else:
        pq.write_table(table, path, row_group_size=128 * 1024)
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--columns", type=int, default=10)
    parser.add_argument("--csv", action="store_true", help="time a CSV file instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / ("t.csv" if args.csv else "t.parquet")
        names = write_table(path, args.rows, args.columns, args.csv)
        spec = FeatureSpec.from_table({"label": "y", "sparse": names, "dense": ["a", "b"]})
        reader = TableReader([path], spec, format="csv" if args.csv else "parquet", batch_size=1024)
        for _, _ in zip(range(3), reader.batches(), strict=False):
            pass  # compile the hash kernel
        start = time.perf_counter()
        rows = signs = 0
        for batch in reader.batches():
            rows += batch.batch_size
            signs += batch.num_signs
        seconds = time.perf_counter() - start
    kind = "CSV" if args.csv else "Parquet"
    print(
        f"{kind}, {rows:,} rows x {args.columns} string columns: {seconds:.2f} s, "
        f"{rows / seconds:,.0f} rows/s, {signs / seconds:,.0f} signs/s (one thread)"
    )


if __name__ == "__main__":
    main()
