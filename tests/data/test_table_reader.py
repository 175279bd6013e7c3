"""``TableReader``: a user's Parquet, CSV or TSV table, streamed into batches through a spec."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from sniper.data import Batch, FeatureSpec, Reader, TableError, TableReader, open_reader
from sniper.data._table_reader import CSV_BLOCK_BYTES, TableFormat
from sniper.hashing import feature_sign
from tests.data._tables import (
    FEATURES,
    damage_column_chunk,
    user_table,
    write_csv_table,
    write_parquet_table,
)

CSV_FEATURES = FEATURES | {
    "columns": FEATURES["columns"] | {"genres": {"separator": "|"}},
}


def _all(reader: Reader, **kwargs: int) -> list[Batch]:
    return list(reader.batches(**kwargs))


def _rows(batches: list[Batch], variable: str) -> list[list[int]]:
    """Each example's signs of ``variable``, sorted, over the batches in order."""
    rows = []
    for batch in batches:
        signs, offsets = batch.sparse[variable]
        rows += [sorted(signs[a:b].tolist()) for a, b in itertools.pairwise(offsets.tolist())]
    return rows


@pytest.fixture
def parquet(tmp_path: Path) -> Path:
    return write_parquet_table(tmp_path / "events.parquet", user_table(500), row_group_size=120)


def test_parquet_batches_are_exact_and_cross_row_groups(parquet: Path) -> None:
    reader = TableReader([parquet], FeatureSpec.from_table(FEATURES), batch_size=100)
    assert isinstance(reader, Reader)
    batches = _all(reader)
    assert [b.batch_size for b in batches] == [100] * 5
    assert reader.variables == ("user_id", "item_id", "gender", "genres")
    assert reader.label_names == ("rating",)
    assert reader.dense_features == 2
    table = pq.read_table(parquet)
    users = table["user_id"].to_pylist()
    assert _rows(batches, "user_id") == [[feature_sign("user_id", u)] for u in users]
    genres = table["genres"].to_pylist()
    assert _rows(batches, "genres") == [
        sorted(feature_sign("genres", g) for g in v) for v in genres
    ]
    gender = table["gender"].to_pylist()
    assert _rows(batches, "gender") == [
        [] if g is None else [feature_sign("gender", g)] for g in gender
    ]
    labels = np.concatenate([b.labels for b in batches])
    assert labels.tolist() == [float(r == "like") for r in table["rating"].to_pylist()]
    price = np.array([p if p is not None else 1.0 for p in table["price"].to_pylist()])
    dense = np.concatenate([b.dense for b in batches])
    np.testing.assert_allclose(dense[:, 1], np.log1p(price), rtol=1e-6)
    age = np.array([a if a is not None else 30.0 for a in table["age"].to_pylist()])
    mean, std = reader.features.column("age").stats
    assert mean == pytest.approx(age.mean()) and std == pytest.approx(age.std())
    np.testing.assert_allclose(dense[:, 0], (age - mean) / std, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_shards", [2, 3, 7])
@pytest.mark.parametrize("groups", [120, 1000])
def test_shards_read_every_row_once(tmp_path: Path, num_shards: int, groups: int) -> None:
    """Row groups split between hubs, or (fewer groups than hubs) row ranges of them."""
    path = write_parquet_table(tmp_path / "t.parquet", user_table(500), row_group_size=groups)
    reader = TableReader([path, path], FeatureSpec.from_table(FEATURES), batch_size=64)
    whole = _rows(_all(reader), "user_id")
    parts = [
        _rows(_all(reader, shard=k, num_shards=num_shards), "user_id") for k in range(num_shards)
    ]
    assert sum(len(p) for p in parts) == len(whole) == 1000
    assert sorted(row for part in parts for row in part) == sorted(whole)
    assert all(parts)  # every hub has rows to read


def test_hubs_get_as_many_rows_where_row_groups_differ_in_size(tmp_path: Path) -> None:
    """Groups of 256, 256, 256 and 32 rows in each of four files: dealt round-robin, one of
    two hubs read 512 rows a file and the other 288 (2,048 against 1,152), and the trainer rank
    fed by the second stepped without data. Each group now goes to the hub with the fewest rows
    so far; groups of one size still go round-robin."""
    files = []
    for index in range(4):
        path = tmp_path / f"part-{index}.parquet"
        writer = pq.ParquetWriter(path, user_table(8).schema)
        for size in (256, 256, 256, 32):
            writer.write_table(user_table(size, seed=index * 10 + size), row_group_size=size)
        writer.close()
        files.append(path)
    reader = TableReader(files, FeatureSpec.from_table(FEATURES), batch_size=64)
    counts = [sum(b.batch_size for b in _all(reader, shard=k, num_shards=2)) for k in range(2)]
    assert counts == [1600, 1600]
    even = TableReader(
        [write_parquet_table(tmp_path / "even.parquet", user_table(1000), 100)],
        FeatureSpec.from_table(FEATURES),
        batch_size=100,
    )
    firsts = [_rows(_all(even, shard=k, num_shards=3), "user_id")[::100] for k in range(3)]
    whole = _rows(_all(even), "user_id")[::100]
    assert firsts == [whole[0::3], whole[1::3], whole[2::3]]


def test_csv_and_tsv_give_parquet_signs(tmp_path: Path, parquet: Path) -> None:
    table = pq.read_table(parquet)
    csv = write_csv_table(tmp_path / "events.csv", table)
    tsv = write_csv_table(tmp_path / "events.tsv", table, delimiter="\t")
    spec = FeatureSpec.from_table(CSV_FEATURES)
    want = _all(TableReader([parquet], spec, batch_size=128))
    for path, kind in ((csv, "csv"), (tsv, "tsv")):
        got = _all(open_reader(f"{kind}:{path}", batch_size=128, features=CSV_FEATURES))
        for variable in spec.variables:
            assert _rows(got, variable) == _rows(want, variable), (kind, variable)
        np.testing.assert_allclose(
            np.concatenate([b.dense for b in got]), np.concatenate([b.dense for b in want])
        )
        assert (
            np.concatenate([b.labels for b in got]).tolist()
            == np.concatenate([b.labels for b in want]).tolist()
        )


def test_csv_shards_split_blocks_or_files(tmp_path: Path, parquet: Path) -> None:
    csv = write_csv_table(tmp_path / "events.csv", pq.read_table(parquet))
    spec = FeatureSpec.from_table(CSV_FEATURES)
    for files in ([csv], [csv, csv, csv]):
        reader = TableReader(files, spec, format="csv", batch_size=50)
        whole = _rows(_all(reader), "item_id")
        parts = [_rows(_all(reader, shard=k, num_shards=2), "item_id") for k in range(2)]
        assert sorted(parts[0] + parts[1]) == sorted(whole)


HASHED = [2**64 - 5, 2**63 + 95, 2**53 + 1, 7, None]
"""Hashed 64-bit ids: beyond ``2**63`` (CSV's guess of their type is a double) and ``2**53``."""


FORMATS: tuple[TableFormat, TableFormat] = ("parquet", "csv")
"""The formats of :func:`_both_formats`' files, in its order."""


def _both_formats(tmp_path: Path, columns: dict[str, Any]) -> tuple[Path, Path]:
    """``columns`` as Parquet and as the CSV pyarrow writes (a string quoted, a null empty)."""
    parquet = _write(tmp_path, "t.parquet", columns)
    csv = tmp_path / "t.csv"
    pacsv.write_csv(pa.table(columns), csv)
    return parquet, csv


def test_csv_gives_parquet_signs_for_empty_strings_na_and_hashed_ids(tmp_path: Path) -> None:
    """The same rows as Parquet and CSV give the same signs in every sparse column. A quoted
    ``""`` was null in CSV (an empty bag) where Parquet's ``""`` has a sign, and so were
    ``NA`` and ``null``, quoted or not; a column of ids beyond ``2**63`` was refused as a
    double. Only an unquoted empty field (a null) is an empty bag."""
    parquet, csv = _both_formats(
        tmp_path,
        {
            "y": pa.array([0, 1, 0, 1, 0]),
            "s": pa.array(["", "NA", None, "null", "a"]),
            "n": pa.array([3, None, -1, 0, 12], pa.int64()),
            "h": pa.array(HASHED, pa.uint64()),
            "tags": pa.array(['""', "NA|", "|x", None, "a|b"]),
        },
    )
    assert csv.read_text().splitlines()[1:3] == [
        '0,"",3,18446744073709551611,""""""',
        '1,"NA",,9223372036854775903,"NA|"',
    ]
    table = {
        "label": "y",
        "sparse": ["s", "n", "h", "tags"],
        "columns": {"tags": {"separator": "|"}},
    }
    spec = FeatureSpec.from_table(table)
    want = _all(TableReader([parquet], spec))
    got = _all(TableReader([csv], spec, format="csv"))
    for variable in spec.variables:
        assert _rows(got, variable) == _rows(want, variable), variable
    sign = functools.partial(feature_sign, "s")
    assert _rows(got, "s") == [[sign("")], [sign("NA")], [], [sign("null")], [sign("a")]]
    # A sparse column is text whatever CSV guesses of a file: ints in one, words in another.
    words = tmp_path / "words.csv"
    words.write_text('y,s,n,h,tags\n1,b,x7,8,""\n')
    (*_, last) = _all(TableReader([csv, words], spec, format="csv"))
    assert _rows([last], "n")[-1] == [feature_sign("n", "x7")]
    assert _rows(got, "h")[:2] == [[feature_sign("h", 2**64 - 5)], [feature_sign("h", 2**63 + 95)]]


def test_a_dense_integer_beyond_2_53_is_its_nearest_float(tmp_path: Path) -> None:
    """A dense column of int64 or uint64 values beyond ``2**53`` failed with pyarrow's words
    alone (``Integer value ... not in range``), naming no file, row or column; it is a number
    for the model, which takes float32: each value becomes the nearest float, in Parquet and
    CSV alike, and in ``standardize``'s pass over the data."""
    unsigned = [2**64 - 5, 2**63 + 95, 2**53 + 1, 7]
    signed = [1, 2**62 + 1, -(2**60) - 1, 2**53 + 1]
    parquet, csv = _both_formats(
        tmp_path,
        {
            "y": pa.array([0, 1, 0, 1]),
            "u": pa.array(unsigned, pa.uint64()),
            "i": pa.array(signed, pa.int64()),
        },
    )
    want = np.array([unsigned, signed], np.float32).T
    for path, kind in zip((parquet, csv), FORMATS, strict=True):
        for transform in ("none", "standardize"):
            columns = {"i": {"transform": transform}}
            reader = TableReader([path], _spec(dense=["u", "i"], columns=columns), format=kind)
            (batch,) = _all(reader)
            if transform == "none":
                np.testing.assert_array_equal(batch.dense, want)
            assert np.isfinite(batch.dense).all()


def test_a_csv_column_of_true_and_false_reads_as_parquet_booleans(tmp_path: Path) -> None:
    """A dense or label column of ``true``/``false``, which ``sniper data inspect`` calls bool,
    is 1 and 0 from CSV as from Parquet: CSV failed (``CSV conversion error to double:
    invalid value 'true'``)."""
    parquet, csv = _both_formats(
        tmp_path,
        {
            "click": pa.array([True, False, True]),
            "mobile": pa.array([False, None, True]),
            "x": pa.array([1.5, None, 2.0]),
        },
    )
    assert csv.read_text().splitlines()[1:] == ["true,false,1.5", "false,,", "true,true,2"]
    spec = FeatureSpec.from_table({"label": "click", "dense": ["mobile", "x"]})
    for path, kind in zip((parquet, csv), FORMATS, strict=True):
        (batch,) = _all(TableReader([path], spec, format=kind))
        assert batch.labels.tolist() == [1.0, 0.0, 1.0], kind
        assert batch.dense.tolist() == [[0.0, 1.5], [0.0, 0.0], [1.0, 2.0]], kind
    # Another file's guess of a column, 0/1 where the first has true/false, agrees.
    ints = tmp_path / "ints.csv"
    ints.write_text("click,mobile,x\n0,1,3\n")
    (batch,) = _all(TableReader([csv, ints], spec, format="csv"))
    assert batch.labels.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert batch.dense.tolist() == [[0.0, 1.5], [0.0, 0.0], [1.0, 2.0], [1.0, 3.0]]


def test_csv_dense_text_nulls_spaces_and_a_word_named_by_its_row(tmp_path: Path) -> None:
    """A dense or label value of CSV is null when empty (quoted or not) or a word for null
    (``NA``, ``NaN``...), a number with spaces around it is the number, and a word that is
    no number is refused naming the file, row and column, past the first block too (whose
    types the reader checks as it opens)."""
    csv = tmp_path / "t.csv"
    good = 'y,f\n"1","2.5"\n0,""\n1,NA\n0," 4 "\n1,NaN\n"0","null"\n'
    csv.write_text(good)
    spec = _spec(dense=["f"], columns={"f": {"fill": -1.0}})
    (batch,) = _all(TableReader([csv], spec, format="csv"))
    assert batch.dense[:, 0].tolist() == [2.5, -1.0, -1.0, 4.0, -1.0, -1.0]
    assert batch.labels.tolist() == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    lines = CSV_BLOCK_BYTES // len("0,1.5\n") + 10
    with csv.open("w") as out:
        out.write("y,f\n" + "0,1.5\n" * lines + "1,abc\n")
    with pytest.raises(
        TableError,
        match=re.escape(f"{csv}: row {lines}: column 'f' is 'abc': a number was expected"),
    ):
        _all(TableReader([csv], spec, format="csv"))


def _write(tmp_path: Path, name: str, columns: dict[str, Any]) -> Path:
    path = tmp_path / name
    pq.write_table(pa.table(columns), path)
    return path


def test_shared_tables_weights_multi_labels_and_nulls(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "t.parquet",
        {
            "item": pa.array([1, 2, None, 4], pa.int32()),
            "history": pa.array([["1", "7"], [], None, ["2"]]),
            "w": pa.array([[0.5, 2.0], [], None, [3.0]]),
            "click": pa.array([1, 0, None, 1], pa.int8()),
            "buy": pa.array([True, False, True, False]),
            "x": pa.array([1.0, None, 2.0, 3.0]),
        },
    )
    table = {
        "labels": ["click", "buy"],
        "sparse": ["item"],
        "dense": ["x"],
        "skip_null_labels": True,
        "columns": {"history": {"table": "item", "weights": "w"}, "x": {"fill": -1.0}},
    }
    reader = TableReader([path], FeatureSpec.from_table(table), batch_size=10)
    (batch,) = _all(reader)
    assert reader.variables == ("item",)
    assert batch.labels.tolist() == [[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]]
    assert batch.dense[:, 0].tolist() == [1.0, -1.0, 3.0]
    signs, offsets = batch.sparse["item"]
    sign = {v: feature_sign("item", v) for v in (1, 2, 4, 7)}
    assert offsets.tolist() == [0, 3, 4, 6]
    assert signs.tolist() == [sign[1], sign[1], sign[7], sign[2], sign[4], sign[2]]
    assert batch.weights["item"].tolist() == [1.0, 0.5, 2.0, 1.0, 1.0, 3.0]
    with pytest.raises(TableError, match=re.escape(f"{path}: row 2: label column 'click' is null")):
        _all(TableReader([path], FeatureSpec.from_table(table | {"skip_null_labels": False})))


def test_optional_labels_keeps_every_row_of_a_null_label_as_nan(tmp_path: Path) -> None:
    """``optional_labels`` (``sniper predict``) reads a row whose label is null as any other,
    its label NaN, whether or not the spec's ``skip_null_labels`` would drop it in training;
    Parquet and CSV alike, for a 0/1, a ``positive`` and a regression label."""
    columns = {
        "item": pa.array(["a", "b", "c", "d", "e"]),
        "click": pa.array([1, None, 0, 1, None], pa.int8()),
        "rating": pa.array(["like", "meh", None, None, "like"]),
        "stars": pa.array([4.5, None, 1.0, 2.0, 3.0]),
    }
    parquet = _write(tmp_path, "t.parquet", columns)
    csv = tmp_path / "t.csv"
    csv.write_text("item,click,rating,stars\na,1,like,4.5\nb,,meh,\nc,0,,1\nd,1,,2\ne,,like,3\n")
    nan = float("nan")
    expected = [[1, 1, 4.5], [nan, 0, nan], [0, nan, 1], [1, nan, 2], [nan, 1, 3]]
    labels = [
        "click",
        {"column": "rating", "positive": '== "like"'},
        {"column": "stars", "regression": True},
    ]
    for skip in (False, True):
        spec = FeatureSpec.from_table(
            {"labels": labels, "sparse": ["item"], "skip_null_labels": skip}
        )
        for reader in (
            TableReader([parquet], spec, batch_size=2, optional_labels=True),
            TableReader([csv], spec, format="csv", batch_size=2, optional_labels=True),
        ):
            batches = _all(reader)
            assert [b.batch_size for b in batches] == [2, 2, 1]
            read = np.concatenate([b.labels for b in batches])
            np.testing.assert_array_equal(read, np.array(expected, np.float32))
            assert _rows(batches, "item") == [[feature_sign("item", v)] for v in "abcde"]
    # Without it, as training and evaluation read: refused at the row, or the rows dropped.
    spec = FeatureSpec.from_table({"labels": labels, "sparse": ["item"]})
    with pytest.raises(TableError, match=re.escape(f"{parquet}: row 1: label column 'click' is")):
        _all(TableReader([parquet], spec))
    skipping = dataclasses.replace(spec, skip_null_labels=True)
    (batch,) = _all(TableReader([parquet], skipping, batch_size=2))
    assert batch.labels.tolist() == [[1, 1, 4.5]]


def _spec(**table: Any) -> FeatureSpec:
    return FeatureSpec.from_table({"label": "y"} | table)


def test_bad_tables_name_file_row_and_column(tmp_path: Path) -> None:
    good = {"y": pa.array([0, 1]), "s": pa.array(["a", "b"]), "f": pa.array([1.5, 2.0])}
    path = _write(tmp_path, "a.parquet", good)
    cases = [
        (
            _spec(sparse=["s", "nope"]),
            [path],
            f"{path}: no column 'nope', which [features] names; the file has y, s, f",
        ),
        (
            _spec(sparse=["f"]),
            [path],
            f"{path}: column 'f' is double, which cannot be a sign: a sparse column holds "
            "integers or strings",
        ),
        (
            _spec(dense=["s"]),
            [path],
            f"{path}: dense column 's' is string: dense features are numbers",
        ),
        (
            FeatureSpec.from_table({"label": "s", "dense": ["f"]}),
            [path],
            f"{path}: label column 's' holds strings; say which are positive: label = "
            '{ column = "s", positive = \'== "yes"\' }',
        ),
    ]
    struct = _write(tmp_path, "st.parquet", good | {"st": pa.array([{"a": 1}, {"a": 2}])})
    cases.append(
        (
            _spec(sparse=["st"]),
            [struct],
            f"{struct}: column 'st' is struct<a: int64>, which cannot be a sign",
        )
    )
    other = _write(tmp_path, "b.parquet", good | {"s": pa.array([1, 2])})
    cases.append(
        (
            _spec(sparse=["s"]),
            [path, other],
            f"{other}: column 's' is int64, but {path} has it as string: every file of an "
            "input must have one schema",
        )
    )
    for spec, files, message in cases:
        with pytest.raises(TableError, match=re.escape(message)):
            TableReader(files, spec)


def test_bad_values_name_file_row_and_column(tmp_path: Path) -> None:
    nan = _write(
        tmp_path, "nan.parquet", {"y": pa.array([0, 1, 1]), "f": pa.array([1.0, 2.0, np.inf])}
    )
    with pytest.raises(
        TableError, match=re.escape(f"{nan}: row 2: column 'f' is inf: dense values must be finite")
    ):
        _all(TableReader([nan], _spec(dense=["f"])))
    for name, labels, suggested in (
        ("r.parquet", [0, 4], ">= 4"),  # a rating
        ("pm.parquet", [1, -1], "> 0"),  # labels of -1 and 1
        ("p.parquet", [0.0, 0.75], ">= 0.5"),  # a probability
    ):
        rating = _write(tmp_path, name, {"y": pa.array(labels), "f": pa.array([1.0, 2.0])})
        message = (
            f"{rating}: row 1: label column 'y' is {float(labels[1])}: labels are 0 or 1; say "
            f'which are positive: label = {{ column = "y", positive = "{suggested}" }}'
        )
        with pytest.raises(TableError, match=re.escape(message)):
            _all(TableReader([rating], _spec(dense=["f"])))
    low = _write(tmp_path, "l.parquet", {"y": pa.array([0, 1]), "f": pa.array([1.0, -2.0])})
    with pytest.raises(
        TableError,
        match=re.escape(f"{low}: row 1: column 'f' is -2.0: log1p takes values above -1"),
    ):
        _all(TableReader([low], _spec(dense=["f"], columns={"f": {"transform": "log1p"}})))
    csv = tmp_path / "bad.csv"
    csv.write_text("y,f\n0,1.5\n1,abc\n")
    with pytest.raises(TableError, match=re.escape(f"{csv}: dense column 'f' is string: dense")):
        _all(TableReader([csv], _spec(dense=["f"]), format="csv"))


def test_csv_needs_features(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape("csv data needs a [features] table")):
        open_reader(f"csv:{tmp_path}/x.csv")


def test_a_label_compared_with_a_number_refuses_nan_inf_and_words(tmp_path: Path) -> None:
    """``positive = ">= 4"`` makes a 0 or a 1 of every number; NaN or Inf would silently be a 0
    (or an Inf a 1), and a word cannot be compared at all: each names its file, row and
    column."""
    spec = FeatureSpec.from_table({"label": {"column": "r", "positive": ">= 4"}, "dense": ["f"]})
    good = _write(tmp_path, "ok.parquet", {"r": pa.array([5.0, 1.0]), "f": pa.array([1.0, 2.0])})
    (batch,) = _all(TableReader([good], spec))
    assert batch.labels.tolist() == [1.0, 0.0]
    for name, values, message in [
        (
            "nan.parquet",
            pa.array([5.0, np.nan]),
            "row 1: label column 'r' is nan: a label compared",
        ),
        (
            "inf.parquet",
            pa.array([np.inf, 1.0]),
            "row 0: label column 'r' is inf: a label compared",
        ),
        (
            "word.parquet",
            pa.array(["5", "five"]),
            "row 1: label column 'r' is 'five', which positive = '>= 4' cannot compare",
        ),
        (  # float() takes it; Arrow's parser does not
            "space.parquet",
            pa.array(["5", " 5"]),
            "row 1: label column 'r' is ' 5', which positive = '>= 4' cannot compare",
        ),
    ]:
        path = _write(tmp_path, name, {"r": values, "f": pa.array([1.0, 2.0])})
        with pytest.raises(TableError, match=re.escape(f"{path}: {message}")):
            _all(TableReader([path], spec))


def test_a_dense_value_beyond_float32_is_refused_not_made_an_infinity(tmp_path: Path) -> None:
    path = _write(tmp_path, "big.parquet", {"y": pa.array([0, 1]), "f": pa.array([1.0, 1e300])})
    with pytest.raises(
        TableError,
        match=re.escape(
            f"{path}: row 1: column 'f' is 1e+300 after its fill and transform, beyond"
        ),
    ):
        _all(TableReader([path], _spec(dense=["f"])))
    # The same value brought into range by its transform is fine.
    (batch,) = _all(TableReader([path], _spec(dense=["f"], columns={"f": {"transform": "log1p"}})))
    assert np.isfinite(batch.dense).all()


def test_standardize_measures_a_small_spread_about_a_large_mean(tmp_path: Path) -> None:
    """The stats are merged chunk by chunk from each chunk's own mean: a sum of squares less
    the squared mean loses a spread of 1 about 1e9 to rounding (it measured 11)."""
    values = 1e9 + np.random.default_rng(0).standard_normal(5000)
    path = tmp_path / "wide.parquet"
    table = pa.table({"y": pa.array(np.zeros(5000, np.int8)), "f": pa.array(values)})
    pq.write_table(table, path, row_group_size=700)
    reader = TableReader([path], _spec(dense=["f"], columns={"f": {"transform": "standardize"}}))
    mean, std = reader.features.column("f").stats
    assert mean == pytest.approx(values.mean(), rel=1e-12)
    assert std == pytest.approx(values.std(), rel=1e-6)


def test_row_groups_are_read_without_reading_the_footer_again_and_rows_keep_their_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each row group opened its file anew, reading the whole footer and summing the groups
    before it: 3,000 groups of one row took 35 s to read. The footer is read once a reading
    thread, and a row's number (in errors) is still the file's."""
    n = 600
    values = np.arange(n, dtype=np.float64)
    values[n - 7] = np.nan
    path = tmp_path / "groups.parquet"
    table = pa.table({"y": pa.array(np.arange(n) % 2), "f": pa.array(values)})
    pq.write_table(table, path, row_group_size=1)
    reader = TableReader([path], _spec(dense=["f"]), batch_size=64)
    footers = []
    real = pq.ParquetFile.__init__

    def counted(self: Any, source: Any, *args: Any, metadata: Any = None, **kwargs: Any) -> None:
        footers.append(metadata is None)
        real(self, source, *args, metadata=metadata, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "__init__", counted)
    with pytest.raises(TableError, match=re.escape(f"{path}: row {n - 7}: column 'f' is nan")):
        _all(reader)
    assert len(footers) >= n - 7 and sum(footers) <= 2  # once a reading thread, not a group


def test_a_column_too_wide_to_standardize_is_refused(tmp_path: Path) -> None:
    """Values around 1e200 overflow their squares: the std would be inf and every value
    standardized to 0, silently."""
    path = _write(tmp_path, "w.parquet", {"y": pa.array([0, 1]), "f": pa.array([-1e200, 1e200])})
    with pytest.raises(TableError, match="column 'f' cannot be standardized: the spread"):
        TableReader([path], _spec(dense=["f"], columns={"f": {"transform": "standardize"}}))


def _damaged(path: Path, column: str, compression: str = "snappy") -> Path:
    """A table of three row groups whose ``column`` has a damaged page in group 1."""
    table = user_table(600)
    pq.write_table(table, path, row_group_size=200, compression=compression, use_dictionary=False)
    return damage_column_chunk(path, column, 1)


@pytest.mark.parametrize(
    ("compression", "column", "reason"),
    [
        ("snappy", "rating", "Corrupt snappy compressed data."),
        ("none", "item_id", "Invalid or truncated PLAIN-encoded BYTE_ARRAY data"),
    ],
)
def test_a_damaged_page_names_the_file_and_its_row_group(
    tmp_path: Path, compression: str, column: str, reason: str
) -> None:
    """pyarrow's error names neither the file nor the group; reading says both."""
    read = _damaged(tmp_path / "t.parquet", column, compression)
    reader = TableReader([read], FeatureSpec.from_table(FEATURES), batch_size=100)
    message = f"{read}: row group 1 cannot be read: {reason}"
    with pytest.raises(TableError, match=f"^{re.escape(message)}$"):
        _all(reader)


def test_a_damaged_page_is_named_by_the_standardize_pass(tmp_path: Path) -> None:
    """Opening measures ``age`` (``standardize`` without stats) in a pass of its own."""
    measured = _damaged(tmp_path / "t.parquet", "age")
    message = f"{measured}: row group 1 cannot be read: Corrupt snappy compressed data."
    with pytest.raises(TableError, match=f"^{re.escape(message)}$"):
        TableReader([measured], FeatureSpec.from_table(FEATURES))


def test_optional_labels_reads_a_table_without_them_and_keeps_those_it_has(
    tmp_path: Path, parquet: Path
) -> None:
    """``optional_labels`` (what ``sniper predict`` reads with): a table lacking the label
    column gives batches of no label columns and the same features; one that has it is read as
    without the option. Without it, the missing label is refused as any missing column."""
    unlabeled = user_table(500).drop_columns(["rating"])
    write_parquet_table(tmp_path / "new.parquet", unlabeled, row_group_size=120)
    write_csv_table(tmp_path / "new.csv", unlabeled)
    spec = FeatureSpec.from_table(CSV_FEATURES)
    labeled = _all(TableReader([parquet], spec, batch_size=200))
    for reader in (
        TableReader([tmp_path / "new.parquet"], spec, batch_size=200, optional_labels=True),
        TableReader(
            [tmp_path / "new.csv"], spec, format="csv", batch_size=200, optional_labels=True
        ),
    ):
        assert reader.label_names == ()
        batches = _all(reader)
        assert [b.labels.shape for b in batches] == [(200, 0), (200, 0), (100, 0)]
        assert _rows(batches, "item_id") == _rows(labeled, "item_id")
        dense = np.concatenate([b.dense for b in batches])
        assert np.array_equal(dense, np.concatenate([b.dense for b in labeled]))
    kept = TableReader([parquet], spec, batch_size=200, optional_labels=True)
    assert kept.label_names == ("rating",)
    assert [b.labels.tolist() for b in _all(kept)] == [b.labels.tolist() for b in labeled]
    with pytest.raises(TableError, match=re.escape("new.parquet: no column 'rating', which")):
        TableReader([tmp_path / "new.parquet"], spec)
    # Labelled and unlabelled files together: neither the labels of some nor none of them.
    for files in ([tmp_path / "new.parquet", parquet], [parquet, tmp_path / "new.parquet"]):
        lacking = f"{tmp_path / 'new.parquet'}: lacks a label column (rating) that {parquet} has"
        with pytest.raises(TableError, match=f"^{re.escape(lacking)}"):
            TableReader(files, spec, optional_labels=True)
