"""CriteoTsv on small files written here: values, missing fields, batching, and bad lines."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from sniper.data import (
    CRITEO_VARIABLES,
    CriteoFormatError,
    CriteoTsv,
    Reader,
    criteo_sign,
)
from tests.data._helpers import assert_batches_equal, criteo_line

INTEGERS = [str(10**j) for j in range(13)]
CATEGORIES = [f"{0x1000 * j + 7:08x}" for j in range(26)]
GOOD = criteo_line("1", INTEGERS, CATEGORIES)


def missing_some(j: int) -> str:
    """A line with I<j+1> and C<j+1> empty and a negative I2."""
    integers = list(INTEGERS)
    integers[1] = "-3"
    integers[j] = ""
    categories = list(CATEGORIES)
    categories[j] = ""
    return criteo_line("0", integers, categories)


def write(tmp_path: Path, lines: list[str], name: str = "day.tsv") -> Path:
    path = tmp_path / name
    path.write_text("".join(lines))
    return path


def test_values_missing_fields_and_signs(tmp_path: Path) -> None:
    path = write(tmp_path, [GOOD, missing_some(0), missing_some(5)])
    reader = CriteoTsv(path, batch_size=8)
    assert isinstance(reader, Reader)
    assert reader.variables == CRITEO_VARIABLES == tuple(f"C{j}" for j in range(1, 27))
    assert reader.dense_features == 13
    (batch,) = reader.batches()
    np.testing.assert_array_equal(batch.labels, [1, 0, 0])
    expected_dense = [math.log1p(10**j) for j in range(13)]
    np.testing.assert_allclose(batch.dense[0], expected_dense, rtol=1e-6)
    assert batch.dense[1, 0] == 0  # missing
    assert batch.dense[1, 1] == 0  # negative, clipped
    assert batch.dense[2, 5] == 0
    for j, name in enumerate(CRITEO_VARIABLES, start=1):
        signs, offsets = batch.sparse[name]
        present = [row for row in range(3) if not ((row == 1 and j == 1) or (row == 2 and j == 6))]
        np.testing.assert_array_equal(np.diff(offsets), [int(r in present) for r in range(3)])
        np.testing.assert_array_equal(signs, [criteo_sign(j, CATEGORIES[j - 1])] * len(present))


def test_sign_definition_and_case() -> None:
    assert criteo_sign(3, "0000abcd") == criteo_sign(3, "ABCD")
    assert criteo_sign(3, "abcd") != criteo_sign(4, "abcd")
    with pytest.raises(ValueError, match=re.escape("value must be 1 to 16 hex digits, got 'xy'")):
        criteo_sign(1, "xy")
    with pytest.raises(ValueError, match=re.escape("column must be in [1, 26], got 0")):
        criteo_sign(0, "ab")


def test_upper_case_hex_in_a_file_hashes_like_lower_case(tmp_path: Path) -> None:
    upper = criteo_line("1", INTEGERS, [c.upper() for c in CATEGORIES])
    (batch,) = CriteoTsv(write(tmp_path, [upper, GOOD]), batch_size=2).batches()
    for signs, _ in batch.sparse.values():
        assert signs[0] == signs[1]


def test_batches_are_consecutive_lines_and_the_last_is_short(tmp_path: Path) -> None:
    lines = [missing_some(j % 13) if j % 3 else GOOD for j in range(10)]
    reader = CriteoTsv(write(tmp_path, lines), batch_size=4)
    assert [b.batch_size for b in reader.batches()] == [4, 4, 2]
    # However pyarrow's blocks fall, the batches are the same.
    small_blocks = CriteoTsv(reader.path, batch_size=4, block_bytes=1000)
    for got, want in zip(small_blocks.batches(), reader.batches(), strict=True):
        assert_batches_equal(got, want)


def test_shards_split_the_file_and_epochs_repeat_it(tmp_path: Path) -> None:
    lines = [missing_some(j % 13) for j in range(7)]
    reader = CriteoTsv(write(tmp_path, lines), batch_size=2)
    everything = list(reader.batches())
    assert len(everything) == 4
    for shard in range(3):
        mine = list(reader.batches(shard=shard, num_shards=3, epoch=5))
        for got, want in zip(mine, everything[shard::3], strict=True):
            assert_batches_equal(got, want)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (criteo_line("2", INTEGERS, CATEGORIES), "label must be 0 or 1, got '2'"),
        (criteo_line("", INTEGERS, CATEGORIES), "label must be 0 or 1, got ''"),
        (criteo_line("1.0", INTEGERS, CATEGORIES), "label must be 0 or 1, got '1.0'"),
        (
            "1\t2\t3\n",
            "expected 40 tab-separated fields (label, I1..I13, C1..C26), got 3",
        ),
        (
            GOOD.replace("\n", "\textra\n"),
            "expected 40 tab-separated fields (label, I1..I13, C1..C26), got 41",
        ),
        ("\n", "empty line; every line must be an example"),
        (
            criteo_line("0", [*INTEGERS[:2], "1.5", *INTEGERS[3:]], CATEGORIES),
            "I3 must be a 64-bit integer or empty, got '1.5'",
        ),
        (
            criteo_line("0", [*INTEGERS[:12], "99999999999999999999"], CATEGORIES),
            "I13 must be a 64-bit integer or empty, got '99999999999999999999'",
        ),
        (  # dense features are integers: a NaN or Inf never reaches the trainer
            criteo_line("0", [*INTEGERS[:4], "nan", *INTEGERS[5:]], CATEGORIES),
            "I5 must be a 64-bit integer or empty, got 'nan'",
        ),
        (
            criteo_line("0", [*INTEGERS[:12], "-inf"], CATEGORIES),
            "I13 must be a 64-bit integer or empty, got '-inf'",
        ),
        (
            criteo_line("0", INTEGERS, [*CATEGORIES[:5], "xyz", *CATEGORIES[6:]]),
            "C6 must be 1 to 16 hex digits or empty, got 'xyz'",
        ),
        (
            criteo_line("0", INTEGERS, [*CATEGORIES[:25], "1" * 17]),
            "C26 must be 1 to 16 hex digits or empty, got '11111111111111111'",
        ),
    ],
)
@pytest.mark.parametrize("block_bytes", [16 << 20, 1000])
def test_a_bad_line_is_named_with_file_and_line(
    tmp_path: Path, line: str, message: str, block_bytes: int
) -> None:
    path = write(tmp_path, [GOOD] * 6 + [line] + [GOOD] * 3)
    reader = CriteoTsv(path, batch_size=4, block_bytes=block_bytes)
    with pytest.raises(CriteoFormatError, match=f"^{re.escape(f'{path}:7: {message}')}$"):
        list(reader.batches())


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.tsv"
    with pytest.raises(FileNotFoundError, match=re.escape(f"Criteo TSV file '{missing}' does")):
        CriteoTsv(missing)


def test_each_shard_validates_the_values_of_its_own_batches(tmp_path: Path) -> None:
    """Values are checked where batches are converted; a shard skips the others' batches."""
    bad = criteo_line("2", INTEGERS, CATEGORIES)
    reader = CriteoTsv(write(tmp_path, [GOOD, GOOD, bad, GOOD]), batch_size=2)
    assert len(list(reader.batches(shard=0, num_shards=2))) == 1
    with pytest.raises(CriteoFormatError, match=re.escape(":3: label must be 0 or 1, got '2'")):
        list(reader.batches(shard=1, num_shards=2))


def test_hex_values_of_any_length_up_to_16_digits(tmp_path: Path) -> None:
    values = ["7", "ffffffffffffffff", "0", "00000000000000001", "abc"]
    categories = list(CATEGORIES)
    lines = []
    for value in values[:3] + values[4:]:
        categories[0] = value
        lines.append(criteo_line("1", INTEGERS, categories))
    (batch,) = CriteoTsv(write(tmp_path, lines), batch_size=8).batches()
    want = [criteo_sign(1, v) for v in values[:3] + values[4:]]
    np.testing.assert_array_equal(batch.sparse["C1"][0], want)


def test_an_empty_file_has_no_batches(tmp_path: Path) -> None:
    assert list(CriteoTsv(write(tmp_path, []), batch_size=8).batches()) == []
