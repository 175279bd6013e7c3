"""Parquet: batches round-trip exactly, read without copies, and bad files are named."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from numpy.typing import NDArray

from sniper.data import (
    CONVERT_KINDS,
    Batch,
    CriteoFormatError,
    CriteoTsv,
    DataSource,
    ParquetFormatError,
    ParquetReader,
    Reader,
    SyntheticCtr,
    convert,
    load_workload,
    open_reader,
    parquet_schema,
    write_parquet,
)
from sniper.data._parquet import WINDOW_BYTES, _Rows
from tests.cluster._sniper import sniper
from tests.data._helpers import (
    SMALL_BATCH,
    assert_batches_equal,
    criteo_line,
    small_generator,
)


@pytest.fixture(scope="module")
def synthetic_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("parquet") / "synthetic.parquet"
    rows = write_parquet(small_generator(), path)
    assert rows == small_generator().num_batches * SMALL_BATCH
    return path


def test_synthetic_batches_round_trip(synthetic_file: Path) -> None:
    reader = ParquetReader(synthetic_file)
    generator = small_generator()
    assert isinstance(reader, Reader)
    assert reader.variables == generator.variables
    assert reader.dense_features == generator.dense_features
    assert reader.batch_size == SMALL_BATCH
    assert reader.num_batches == generator.num_batches
    assert reader.source == repr(generator)
    assert reader.shape == (generator.signs_per_batch, generator.vocabulary)
    for got, want in zip(reader.batches(epoch=3), generator.batches(), strict=True):
        assert_batches_equal(got, want)


def test_the_schema_is_documented_columns_and_metadata(synthetic_file: Path) -> None:
    schema = pq.read_schema(synthetic_file)
    assert schema.field("label").type == pa.float32()
    assert schema.field("dense").type == pa.list_(pa.float32(), 13)
    assert schema.field("embedding_0").type == pa.large_list(pa.uint64())
    assert schema.names[2:] == list(small_generator().variables)
    assert json.loads(schema.metadata[b"sniper.variables"]) == schema.names[2:]
    assert schema.metadata[b"sniper.format"] == b"sniper.data/1"
    assert schema.metadata[b"sniper.dense_features"] == b"13"
    assert pq.ParquetFile(synthetic_file).metadata.num_row_groups == small_generator().num_batches


@pytest.mark.parametrize("batch_size", [SMALL_BATCH, SMALL_BATCH // 2])
def test_batches_are_views_of_arrow_buffers(synthetic_file: Path, batch_size: int) -> None:
    for batch in ParquetReader(synthetic_file, batch_size=batch_size).batches():
        arrays: list[NDArray[Any]] = [batch.labels, batch.dense]
        for signs, offsets in batch.sparse.values():
            arrays.append(signs)
            # A batch that starts inside the rows read needs offsets that start at 0: a copy.
            assert offsets[0] == 0
        for array in arrays:
            assert not array.flags.owndata and not array.flags.writeable


def test_a_batch_is_views_of_the_rows_read_with_its_offsets_from_zero() -> None:
    values = np.arange(10, dtype=np.uint64)
    labels = np.array([0, 1, 0, 1], dtype=np.float32)
    dense = np.arange(8, dtype=np.float32).reshape(4, 2)
    rows = _Rows(labels, dense, {"v": (values, np.array([0, 3, 3, 7, 10]))})
    batch = rows.batch(2, 4)
    signs, offsets = batch.sparse["v"]
    np.testing.assert_array_equal(signs, [3, 4, 5, 6, 7, 8, 9])
    np.testing.assert_array_equal(offsets, [0, 4, 7])
    np.testing.assert_array_equal(batch.labels, [0, 1])
    np.testing.assert_array_equal(batch.dense, [[4, 5], [6, 7]])
    for view, whole in ((signs, values), (batch.labels, labels), (batch.dense, dense)):
        assert np.shares_memory(view, whole)


def test_a_file_batch_shares_the_decoded_buffers(synthetic_file: Path) -> None:
    reader = ParquetReader(synthetic_file)
    batch = reader.batch(1)
    assert reader._cached is not None
    rows = reader._cached[1]
    for name, (signs, _) in batch.sparse.items():
        assert np.shares_memory(signs, rows.sparse[name][0])


def counted_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[int], str]]:
    """Every ``read_row_groups`` call from now on: its groups and the thread it ran on."""
    calls: list[tuple[list[int], str]] = []
    read = pq.ParquetFile.read_row_groups

    def counted(self: pq.ParquetFile, groups: list[int], **kwargs: Any) -> Any:
        calls.append((list(groups), threading.current_thread().name))
        return read(self, groups, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", counted)
    return calls


def test_several_batches_are_read_in_one_call_and_only_the_shards_groups(
    synthetic_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = ParquetReader(synthetic_file)
    calls = counted_reads(monkeypatch)
    monkeypatch.setattr("sniper.data._parquet.WINDOW_BYTES", 3 * reader._group_bytes[0])
    batches = list(reader.batches(shard=1, num_shards=2))
    wanted = list(range(1, reader.num_batches, 2))
    assert [group for groups, _ in calls for group in groups] == wanted
    assert max(len(groups) for groups, _ in calls) == 3
    for index, batch in zip(wanted, batches, strict=True):
        assert_batches_equal(batch, small_generator().batch(index))
    assert WINDOW_BYTES > 0


def test_the_next_window_is_decoded_on_a_thread_while_the_caller_holds_a_batch(
    synthetic_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = ParquetReader(synthetic_file)
    calls = counted_reads(monkeypatch)
    monkeypatch.setattr("sniper.data._parquet.WINDOW_BYTES", 1)  # a window a batch
    before = set(threading.enumerate())
    batches = reader.batches()
    assert isinstance(batches, Generator)
    assert_batches_equal(next(batches), small_generator().batch(0))
    deadline = time.monotonic() + 10
    while len(calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # batch 1 is read without the caller asking for it
    assert [groups for groups, _ in calls] == [[0], [1]]
    assert all(thread.startswith("sniper-parquet") for _, thread in calls)
    batches.close()  # stopping early ends the thread
    assert set(threading.enumerate()) <= before


def test_a_bad_row_group_raises_after_every_batch_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "late.parquet"
    schema = pa.schema(
        [
            ("label", pa.float32()),
            ("dense", pa.list_(pa.float32(), 2)),
            ("v", pa.large_list(pa.uint64())),
        ]
    )
    with pq.ParquetWriter(path, schema) as writer:
        for label in (1.0, 0.0, 3.0, 1.0):  # the third batch's click count is not a label
            columns = [pa.array([label], pa.float32()), dense_column(1), ragged_column([[7]])]
            writer.write_table(pa.table(columns, schema=schema))
    monkeypatch.setattr("sniper.data._parquet.WINDOW_BYTES", 1)
    before = set(threading.enumerate())
    read: list[float] = []
    with pytest.raises(ParquetFormatError, match=re.escape("labels must be 0.0 or 1.0")):
        for batch in ParquetReader(path, batch_size=1).batches():
            read += batch.labels.tolist()
    assert read == [1.0, 0.0]
    assert set(threading.enumerate()) <= before  # the decoding thread ended with the error


def test_a_file_replaced_after_its_reader_opened_it_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "replaced.parquet"
    write_parquet(small_generator(), path)
    reader = ParquetReader(path)
    pq.write_table(pq.read_table(path).slice(0, SMALL_BATCH), path)  # other row groups
    with pytest.raises(ParquetFormatError, match="changed since it was opened"):
        next(reader.batches())


def rows_of(batches: list[Batch]) -> tuple[list[float], list[list[int]]]:
    """Every example's label and its signs of one variable, across batches."""
    labels: list[float] = []
    signs: list[list[int]] = []
    for batch in batches:
        labels += batch.labels.tolist()
        values, offsets = batch.sparse["embedding_11"]
        signs += [values[a:b].tolist() for a, b in itertools.pairwise(offsets)]
    return labels, signs


@pytest.mark.parametrize("window_bytes", [WINDOW_BYTES, 1])
@pytest.mark.parametrize("batch_size", [100, SMALL_BATCH, 600, 5000])
def test_another_batch_size_regroups_the_same_rows(
    synthetic_file: Path, batch_size: int, window_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches that span row groups, in one window or (``window_bytes=1``) with a group
    shared by two windows, each decoded ahead."""
    monkeypatch.setattr("sniper.data._parquet.WINDOW_BYTES", window_bytes)
    reader = ParquetReader(synthetic_file, batch_size=batch_size)
    batches = list(reader.batches())
    total = small_generator().num_batches * SMALL_BATCH
    assert [b.batch_size for b in batches[:-1]] == [batch_size] * (len(batches) - 1)
    assert sum(b.batch_size for b in batches) == total
    assert rows_of(batches) == rows_of(list(small_generator().batches()))


def test_shards_split_the_file(synthetic_file: Path) -> None:
    reader = ParquetReader(synthetic_file, batch_size=300)
    everything = list(reader.batches())
    for shard in range(3):
        mine = list(reader.batches(shard=shard, num_shards=3))
        assert len(mine) == len(everything[shard::3])
        for got, want in zip(mine, everything[shard::3], strict=True):
            assert_batches_equal(got, want)


def test_convert_synthetic(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    rows = convert("synthetic", None, out, num_batches=3, scale=0.02, seed=4, batch_size=64)
    assert rows == 3 * 64
    reader = ParquetReader(out)
    assert reader.source == "SyntheticCtr('seed_ctr', num_batches=3, scale=0.02, seed=4, " + (
        "batch_size=64)"
    )
    assert [b.batch_size for b in reader.batches()] == [64, 64, 64]
    assert CONVERT_KINDS == ("criteo", "synthetic")


def test_convert_synthetic_to_several_files_writes_other_examples_in_each(tmp_path: Path) -> None:
    """File ``i`` is the generator's epoch ``i``: each its own examples (every file held the
    same ones), the same files again on a second run, and the first file as one alone."""
    args = ("--num-batches", "2", "--batch-size", "16", "--scale", "0.01", "--seed", "3")
    for run in ("first", "again"):
        (tmp_path / run).mkdir()
        done = sniper(
            tmp_path / run, "data", "convert", "synthetic", "a.parquet", "b.parquet", *args
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == "wrote 64 examples to a.parquet, b.parquet\n"
    done = sniper(tmp_path, "data", "convert", "synthetic", "alone.parquet", *args)
    assert done.returncode == 0, done.stderr
    tables = {
        p.relative_to(tmp_path).as_posix(): pq.read_table(p) for p in tmp_path.rglob("*.parquet")
    }
    first, second = tables["first/a.parquet"], tables["first/b.parquet"]
    assert [name for name in first.column_names if first[name].equals(second[name])] == []
    assert tables["again/a.parquet"].equals(tables["first/a.parquet"])
    assert tables["again/b.parquet"].equals(tables["first/b.parquet"])
    assert tables["alone.parquet"].equals(tables["first/a.parquet"])


def test_convert_writes_each_file_once_and_criteo_to_one(tmp_path: Path) -> None:
    twice = f"{tmp_path / 'a.parquet'} is named twice: each file to write must be named once"
    with pytest.raises(ValueError, match=f"^{re.escape(twice)}$"):
        convert("synthetic", None, [tmp_path / "a.parquet", tmp_path / "a.parquet"], num_batches=1)
    with pytest.raises(ValueError, match=r"^criteo conversion writes one file, not 2$"):
        convert("criteo", "day.tsv", [tmp_path / "a.parquet", tmp_path / "b.parquet"])
    assert list(tmp_path.iterdir()) == []


def test_convert_criteo_round_trips(tmp_path: Path) -> None:
    integers = [str(j) for j in range(13)]
    categories = [f"{j:x}" for j in range(26)]
    lines = [
        criteo_line(str(i % 2), [*integers[: i % 13], "", *integers[i % 13 + 1 :]], categories)
        for i in range(11)
    ]
    source = tmp_path / "day.tsv"
    source.write_text("".join(lines))
    out = tmp_path / "day.parquet"
    assert convert("criteo", str(source), out, batch_size=4) == 11
    want = list(CriteoTsv(source, batch_size=4).batches())
    for got, expected in zip(ParquetReader(out).batches(), want, strict=True):
        assert_batches_equal(got, expected)
    assert convert("criteo", str(source), out, batch_size=4, num_batches=2) == 8
    assert ParquetReader(out).shape is None  # a TSV does not know its vocabularies


def test_unreadable_shape_metadata_is_named(synthetic_file: Path, tmp_path: Path) -> None:
    table = pq.read_table(synthetic_file)
    metadata = dict(table.schema.metadata) | {b"sniper.shape": b'{"signs_per_batch": 3}'}
    broken = tmp_path / "broken.parquet"
    pq.write_table(table.replace_schema_metadata(metadata), broken)
    with pytest.raises(ValueError, match=r"unreadable sniper\.shape metadata"):
        _ = ParquetReader(broken).shape


def test_a_failed_conversion_leaves_no_file(tmp_path: Path) -> None:
    source = tmp_path / "day.tsv"
    source.write_text(criteo_line("1", [""] * 13, [""] * 26) + "1\t2\n")
    out = tmp_path / "day.parquet"
    with pytest.raises(CriteoFormatError, match=":2: expected 40 tab-separated fields"):
        convert("criteo", str(source), out, batch_size=1)
    assert list(tmp_path.iterdir()) == [source]


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (
            {"kind": "synthetic", "source": None},
            ValueError,
            "synthetic data is endless: say how many batches (num_batches)",
        ),
        (
            {"kind": "criteo", "source": None},
            ValueError,
            "criteo conversion needs the TSV file to read as its source",
        ),
        (
            {"kind": "criteo", "source": "x.tsv", "scale": 0.5},
            ValueError,
            "scale and seed apply to synthetic data only, not to criteo",
        ),
        (
            {"kind": "avro", "source": None},
            LookupError,
            "unknown source kind 'avro'; valid kinds: criteo, synthetic",
        ),
    ],
)
def test_convert_names_what_is_missing(
    tmp_path: Path, arguments: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        convert(out=tmp_path / "out.parquet", **arguments)  # type: ignore[arg-type]


def write_table(path: Path, columns: dict[str, object]) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def ragged_column(rows: list[list[int] | None]) -> object:
    return pa.array(rows, type=pa.large_list(pa.uint64()))


def dense_column(rows: int) -> object:
    return pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(rows * 2, np.float32)), 2)


def test_a_foreign_file_with_the_schema_reads(tmp_path: Path) -> None:
    path = write_table(
        tmp_path / "f.parquet",
        {
            "label": pa.array([1.0, 0.0], pa.float32()),
            "dense": dense_column(2),
            "v": pa.array([[1, 2], []], type=pa.list_(pa.uint64())),  # int32 offsets
        },
    )
    message = "no sniper.batch_size in its metadata; pass batch_size"
    with pytest.raises(ValueError, match=re.escape(message)):
        ParquetReader(path)
    (batch,) = ParquetReader(path, batch_size=2).batches()
    assert ParquetReader(path, batch_size=2).variables == ("v",)
    np.testing.assert_array_equal(batch.sparse["v"][1], [0, 2, 2])


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"dense": dense_column(1)}, "no 'label' column"),
        (
            {"label": pa.array([1.0], pa.float32()), "dense": pa.array([[0.0]])},
            "column 'dense' must be fixed_size_list<float32>, got list<element: double>",
        ),
        (
            {
                "label": pa.array([1.0], pa.float32()),
                "dense": dense_column(1),
                "v": pa.array([[1]]),
            },
            "variable 'v' must be a large_list<uint64> column, got list<element: int64>",
        ),
    ],
)
def test_a_file_of_another_schema_is_refused(
    tmp_path: Path, columns: dict[str, object], message: str
) -> None:
    path = write_table(tmp_path / "bad.parquet", columns)
    with pytest.raises(ParquetFormatError, match=re.escape(f"{path}: {message}")):
        ParquetReader(path, batch_size=1)


def test_nulls_in_a_sign_column_are_refused(tmp_path: Path) -> None:
    path = write_table(
        tmp_path / "nulls.parquet",
        {
            "label": pa.array([1.0, 0.0], pa.float32()),
            "dense": dense_column(2),
            "v": ragged_column([[1], None]),
        },
    )
    message = "column 'v' has nulls; write an empty list for an example without signs"
    with pytest.raises(ParquetFormatError, match=re.escape(message)):
        list(ParquetReader(path, batch_size=2).batches())


def nonfinite_file(path: Path, groups: int = 3) -> Path:
    """Row groups of 2 examples, 2 dense features; row 5, feature 1 is NaN, row 3's is Inf."""
    dense = np.arange(groups * 4, dtype=np.float32).reshape(groups * 2, 2)
    dense[5, 1] = np.nan
    dense[3, 0] = np.inf
    schema = parquet_schema(("v",), 2, {b"sniper.batch_size": b"2"})
    with pq.ParquetWriter(path, schema) as writer:
        for group in range(groups):
            rows = dense[2 * group : 2 * group + 2]
            columns = [
                pa.array([1.0, 0.0], pa.float32()),
                pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), 2),
                ragged_column([[1], [2]]),
            ]
            writer.write_table(pa.table(columns, schema=schema))
    return path


@pytest.mark.parametrize("window_bytes", [WINDOW_BYTES, 1])
def test_a_nonfinite_dense_feature_is_refused_naming_file_row_and_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window_bytes: int
) -> None:
    monkeypatch.setattr("sniper.data._parquet.WINDOW_BYTES", window_bytes)
    path = nonfinite_file(tmp_path / "nan.parquet")
    message = (
        f"{path}: row 3 (from 0), column 'dense', feature 0: inf; dense features must be "
        'finite (nonfinite_dense = "fill" reads NaN and Inf as 0)'
    )
    with pytest.raises(ParquetFormatError, match=re.escape(message)):
        list(ParquetReader(path).batches())
    with pytest.raises(ParquetFormatError, match=re.escape(message)):
        ParquetReader(path).batch(1)
    shard = f"{path}: row 5 (from 0), column 'dense', feature 1: nan; "
    with pytest.raises(ParquetFormatError, match=re.escape(shard)):
        list(ParquetReader(path).batches(shard=0, num_shards=2))  # batches 0 and 2 only


def test_nonfinite_dense_fill_reads_nan_and_inf_as_zero(tmp_path: Path) -> None:
    path = nonfinite_file(tmp_path / "nan.parquet")
    reader = open_reader(f"parquet:{path}", nonfinite_dense="fill")
    dense = np.concatenate([batch.dense for batch in reader.batches()])
    want = np.arange(12, dtype=np.float32).reshape(6, 2)
    want[5, 1] = want[3, 0] = 0
    np.testing.assert_array_equal(dense, want)
    source = DataSource(data=f"parquet:{path}", nonfinite_dense="fill")
    assert np.isfinite(np.concatenate([b.dense for b in source.open().batches()])).all()
    with pytest.raises(ParquetFormatError, match="row 3"):
        list(DataSource(data=f"parquet:{path}").open().batches())


def test_huge_finite_dense_features_are_not_taken_for_nonfinite(tmp_path: Path) -> None:
    path = write_table(
        tmp_path / "huge.parquet",
        {
            "label": pa.array([1.0, 0.0], pa.float32()),
            "dense": pa.FixedSizeListArray.from_arrays(pa.array(np.full(4, 3e38, np.float32)), 2),
            "v": ragged_column([[1], [2]]),
        },
    )
    (batch,) = ParquetReader(path, batch_size=2).batches()
    assert (batch.dense == np.float32(3e38)).all()


@pytest.mark.parametrize("keep", [0.5, 0.97])
def test_a_truncated_file_is_refused_naming_it(
    synthetic_file: Path, tmp_path: Path, keep: float
) -> None:
    content = synthetic_file.read_bytes()
    path = tmp_path / "cut.parquet"
    path.write_bytes(content[: int(len(content) * keep)])
    with pytest.raises(ParquetFormatError, match=re.escape(f"{path}: not a readable Parquet")):
        ParquetReader(path)


def test_a_damaged_row_group_is_refused_naming_the_file(
    synthetic_file: Path, tmp_path: Path
) -> None:
    content = bytearray(synthetic_file.read_bytes())
    content[4:4000] = bytes(3996)  # the first row group's pages, the footer intact
    path = tmp_path / "damaged.parquet"
    path.write_bytes(bytes(content))
    for read in (lambda r: list(r.batches()), lambda r: r.batch(0)):
        with pytest.raises(ParquetFormatError, match=re.escape(f"{path}: row groups 0..")):
            read(ParquetReader(path))


def test_reserved_variable_names_are_refused() -> None:
    with pytest.raises(ValueError, match="a variable cannot be named 'label'"):
        parquet_schema(("a", "label"), 2)
    with pytest.raises(ValueError, match="variable names must be unique"):
        parquet_schema(("a", "a"), 2)


def test_max_batches_stops_an_epoch_early(synthetic_file: Path) -> None:
    reader = ParquetReader(synthetic_file, max_batches=3)
    assert reader.num_batches == 3
    assert len(list(reader.batches())) == 3
    assert [len(list(reader.batches(shard=s, num_shards=2))) for s in (0, 1)] == [2, 1]


def test_writing_refuses_two_labels_and_a_missing_directory_by_name(tmp_path: Path) -> None:
    """The format has one label column: a reader of two (criteo_two_labels) is refused naming
    them, where pyarrow's 'only handle 1-dimensional arrays' came from inside the writer; a
    file in a directory that does not exist names the directory, not a ``.partial`` file."""
    two = SyntheticCtr(
        load_workload("criteo_two_labels"), num_batches=1, scale=0.01, seed=0, batch_size=8
    )
    with pytest.raises(ValueError, match=r"holds one label column, and .* has 2 \(click, buy\)"):
        write_parquet(two, tmp_path / "two.parquet")
    assert not list(tmp_path.iterdir())
    with pytest.raises(
        FileNotFoundError,
        match=re.escape(f"{tmp_path / 'nope'} is not a directory to write x.parquet in"),
    ):
        write_parquet(small_generator(), tmp_path / "nope" / "x.parquet")
