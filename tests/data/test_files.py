"""Inputs of several files: paths, directories and globs; hubs split them exactly once."""

from __future__ import annotations

import gzip
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from sniper.data import CriteoFormatError, CriteoTsv, FileSet, Reader, convert, open_reader
from sniper.data._files import expand_paths
from tests.data._helpers import assert_batches_equal, criteo_line, write_criteo


def numbered_criteo(path: Path, first: int, count: int) -> Path:
    """``count`` lines whose C1 is the line's global number, so each example is identifiable."""
    lines = [
        criteo_line(str(n % 2), [str(n)] + [""] * 12, [f"{n:x}"] + ["a"] * 25)
        for n in range(first, first + count)
    ]
    path.write_text("".join(lines))
    return path


def c1_signs(reader: Reader, shard: int, num_shards: int) -> list[int]:
    signs: list[int] = []
    for batch in reader.batches(shard=shard, num_shards=num_shards):
        signs.extend(int(s) for s in batch.sparse["C1"][0])
    return signs


def assert_exactly_once(reader: Reader, total: int, num_shards: int) -> None:
    seen: Counter[int] = Counter()
    for shard in range(num_shards):
        seen.update(c1_signs(reader, shard, num_shards))
    assert len(seen) == total and set(seen.values()) == {1}, (num_shards, seen.most_common(2))


@pytest.fixture
def three_days(tmp_path: Path) -> Path:
    """Three Criteo files of 23, 7 and 40 lines (uneven, and none a multiple of the batch)."""
    days = tmp_path / "days"
    days.mkdir()
    first = 0
    for i, count in enumerate((23, 7, 40)):
        numbered_criteo(days / f"day_{i}.tsv", first, count)
        first += count
    return days


@pytest.mark.parametrize("num_shards", [1, 2, 3, 4, 5])
def test_hubs_read_every_criteo_example_exactly_once(three_days: Path, num_shards: int) -> None:
    reader = open_reader(f"criteo:{three_days}", batch_size=4)
    assert isinstance(reader, FileSet) and len(reader.readers) == 3
    assert_exactly_once(reader, 70, num_shards)


@pytest.mark.parametrize("num_shards", [1, 2, 3, 4, 5])
def test_hubs_read_every_parquet_example_exactly_once(three_days: Path, num_shards: int) -> None:
    parts = three_days.parent / "parts"
    parts.mkdir()
    for day in sorted(three_days.iterdir()):
        convert("criteo", day, parts / f"{day.stem}.parquet", batch_size=4)
    (parts / "notes.txt").write_text("not data")  # a directory's other files are skipped
    reader = open_reader(f"parquet:{parts}")
    assert isinstance(reader, FileSet) and reader.batch_size == 4
    assert_exactly_once(reader, 70, num_shards)


def test_by_file_when_there_are_enough_files(three_days: Path) -> None:
    reader = open_reader(f"criteo:{three_days}", batch_size=4)
    # 3 files, 2 hubs: hub 0 reads day_0 and day_2 whole, hub 1 reads day_1.
    assert len(c1_signs(reader, 0, 2)) == 63
    assert len(c1_signs(reader, 1, 2)) == 7


def test_a_glob_and_a_single_file(three_days: Path) -> None:
    reader = open_reader(f"criteo:{three_days}/day_[02].tsv", batch_size=8)
    assert isinstance(reader, FileSet) and [r.path.name for r in reader.readers] == [  # type: ignore[attr-defined]
        "day_0.tsv",
        "day_2.tsv",
    ]
    single = open_reader(f"criteo:{three_days}/day_1.tsv", batch_size=8)
    assert isinstance(single, CriteoTsv)


def test_expand_paths_errors_name_the_input(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "x.parquet.partial").write_text("")
    (tmp_path / "half" / ".hidden.parquet").write_text("")
    cases = [
        (tmp_path / "nope.tsv", "", f"criteo file '{tmp_path}/nope.tsv' does not exist"),
        (tmp_path / "empty", "", f"criteo directory '{tmp_path}/empty' holds no files"),
        (
            tmp_path / "half",
            ".parquet",
            f"criteo directory '{tmp_path}/half' holds no .parquet files",
        ),
        (tmp_path / "*.tsv", "", f"criteo pattern '{tmp_path}/*.tsv' matches no file"),
    ]
    for pattern, suffix, message in cases:
        with pytest.raises(FileNotFoundError, match=re.escape(message)):
            expand_paths(pattern, "criteo", suffix)


@pytest.mark.parametrize("suffix", [".parquet", ""])
def test_a_directory_with_data_in_subdirectories_is_refused_and_a_glob_reads_it(
    tmp_path: Path, suffix: str
) -> None:
    """A Hive layout's ``date=.../`` beside or below the top level's files: the directory is
    refused naming one nested file and the globs that say what to read (its files alone
    trained on part of the table without a word); ``**`` reads every level. Writers'
    ``_temporary`` and hidden directories are not data."""
    top = tmp_path / "events"
    (top / "date=2024-01-02" / "hour=1").mkdir(parents=True)
    (top / "_temporary" / "0").mkdir(parents=True)
    (top / ".cache").mkdir()
    for path in (
        top / "part-0.parquet",
        top / "date=2024-01-02" / "hour=1" / "part-9.parquet",
        top / "_temporary" / "0" / "part-5.parquet",
        top / ".cache" / "part-6.parquet",
    ):
        path.write_text("")
    nested = top / "date=2024-01-02" / "hour=1" / "part-9.parquet"
    message = (
        f"t directory '{top}' has .parquet files in subdirectories ({nested}), which its own "
        f"files leave out: name every one with a glob, '{top}/**/*.parquet', or the top "
        f"level's alone with '{top}/*.parquet'"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        expand_paths(top, "t", suffix)
    assert expand_paths(f"{top}/**/*{suffix}", "t", suffix) == [
        nested,
        top / "part-0.parquet",
    ]
    assert expand_paths(f"{top}/*{suffix}", "t", suffix) == [top / "part-0.parquet"]
    (nested).unlink()
    assert expand_paths(top, "t", suffix) == [top / "part-0.parquet"]


def test_a_checkpoint_kept_in_a_data_directory_is_not_nested_data(tmp_path: Path) -> None:
    """A directory that reads every file (Criteo's days, CSV) counts nested files of its own
    files' suffixes only: a job's checkpoint there (``latest``, ``job.json``, ``*.npz``) was
    refused as data, and every restart and resume of such a job failed."""
    (tmp_path / "day_0").write_text("")
    (tmp_path / "day_1").write_text("")
    step = tmp_path / "ck" / "step-00000010"
    (step / "ps-0").mkdir(parents=True)
    for file in (tmp_path / "ck" / "latest", step / "job.json", step / "ps-0" / "t.npz"):
        file.write_text("")
    assert expand_paths(tmp_path, "Criteo TSV") == [tmp_path / "day_0", tmp_path / "day_1"]
    (tmp_path / "part-0.csv").write_text("")
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "part-1.csv").write_text("")
    with pytest.raises(ValueError, match=r"has \.csv files in subdirectories .*more/part-1\.csv"):
        expand_paths(tmp_path, "CSV")


def test_a_directorys_markers_are_not_data(tmp_path: Path) -> None:
    """Spark writes ``_SUCCESS`` (empty) and ``_committed_*`` beside its part files: a CSV
    directory, which takes every file whatever its suffix, reads the part files alone."""
    (tmp_path / "part-00000.csv").write_text("a,label\n1,0\n")
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / "_committed_123").write_text('{"added": []}')
    assert expand_paths(tmp_path, "CSV") == [tmp_path / "part-00000.csv"]


def test_files_that_disagree_are_named(tmp_path: Path) -> None:
    tsv = numbered_criteo(tmp_path / "a.tsv", 0, 4)
    convert("criteo", tsv, tmp_path / "a.parquet", batch_size=2)
    convert("synthetic", None, tmp_path / "b.parquet", num_batches=1, scale=0.01, batch_size=2)
    with pytest.raises(ValueError, match=r"b.parquet.*holds variables embedding_0.*must agree"):
        open_reader(f"parquet:{tmp_path}")


def test_gzip_reads_as_the_plain_file(tmp_path: Path) -> None:
    plain = write_criteo(tmp_path / "day.tsv", 300, seed=5)
    packed = tmp_path / "day.tsv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    got = list(CriteoTsv(packed, batch_size=128).batches())
    want = list(CriteoTsv(plain, batch_size=128).batches())
    assert len(got) == len(want) == 3
    for g, w in zip(got, want, strict=True):
        assert_batches_equal(g, w)


def test_a_bad_line_in_a_gzip_is_named(tmp_path: Path) -> None:
    lines = numbered_criteo(tmp_path / "x.tsv", 0, 9).read_text().splitlines(keepends=True)
    lines[6] = "2" + lines[6][1:]
    packed = tmp_path / "day.gz"
    packed.write_bytes(gzip.compress("".join(lines).encode()))
    with pytest.raises(
        CriteoFormatError, match=re.escape(f"{packed}:7: label must be 0 or 1, got '2'")
    ):
        list(CriteoTsv(packed, batch_size=4).batches())


def test_empty_files_hold_no_examples(tmp_path: Path) -> None:
    (tmp_path / "empty.tsv").write_text("")
    (tmp_path / "empty.gz").write_bytes(gzip.compress(b""))
    for name in ("empty.tsv", "empty.gz"):
        assert list(CriteoTsv(tmp_path / name).batches()) == []


def test_a_header_line_is_called_one(tmp_path: Path) -> None:
    header = "\t".join(
        ["label", *(f"I{j}" for j in range(1, 14)), *(f"C{j}" for j in range(1, 27))]
    )
    path = tmp_path / "with_header.tsv"
    path.write_text(header + "\n" + numbered_criteo(tmp_path / "x.tsv", 0, 3).read_text())
    message = (
        f"{path}:1: label must be 0 or 1, got 'label' (Criteo files have no header line: remove it)"
    )
    with pytest.raises(CriteoFormatError, match=re.escape(message)):
        list(CriteoTsv(path).batches())


def test_all_missing_columns_and_negative_integers_are_examples(tmp_path: Path) -> None:
    line = criteo_line("1", ["-5", "-1"] + [""] * 11, [""] * 26)
    path = tmp_path / "sparse.tsv"
    path.write_text(line * 5)
    (batch,) = CriteoTsv(path).batches()
    assert batch.batch_size == 5
    np.testing.assert_array_equal(batch.dense, np.zeros((5, 13), np.float32))
    for signs, offsets in batch.sparse.values():
        assert len(signs) == 0 and list(offsets) == [0] * 6
