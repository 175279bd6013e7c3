"""Batches from Criteo-format TSV files (the Kaggle Display Advertising Challenge layout).

Each line is 40 tab-separated fields: ``label`` (0 or 1), 13 integer features ``I1..I13`` and
26 categorical features ``C1..C26`` (hex strings, 8 digits in the released data); any feature
may be empty (missing). A line becomes one example:

- dense feature ``j`` is ``log(1 + max(I_j, 0))`` as float32, 0 when missing: the usual
  transform, which tames the heavy-tailed counts;
- variable ``C_j`` gets one sign, ``splitmix64_mix((j << 56) ^ int(C_j, 16))``, or none when
  ``C_j`` is empty (so an example may own no signs of a variable). The hash is a bijection, so
  distinct (column, value) pairs of the released data never collide, and the finalizer spreads
  the values evenly over ps shards. :func:`criteo_sign` computes one, for ports and tests.

A file whose name ends in ``.gz`` is decompressed while it is read. Criteo files have no header
line; a first line that is not an example is reported as such.

Parsing is pyarrow's multithreaded CSV reader, streamed in blocks; hex parsing and hashing are
vectorized over the Arrow buffers. Only the batches of the caller's shard are converted, but
every shard still reads the whole file. Validation is vectorized too; when something is wrong,
the file is re-read line by line from the first suspect line so that the error names the exact
line (slow, but only on the way to an error).
"""

from __future__ import annotations

import gzip
import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
from numpy.typing import NDArray

from sniper._hashing import mix_u64, splitmix64_mix
from sniper.data._batch import Batch, Ragged
from sniper.data._checks import check_int
from sniper.data._reader import check_stream

__all__ = [
    "CRITEO_DENSE",
    "CRITEO_VARIABLES",
    "CriteoFormatError",
    "CriteoTsv",
    "criteo_sign",
]

CRITEO_DENSE = tuple(f"I{j}" for j in range(1, 14))
"""Names of the integer columns, in file order."""
CRITEO_VARIABLES = tuple(f"C{j}" for j in range(1, 27))
"""Names of the categorical columns, which are also the variable names."""
_COLUMNS = ("label", *CRITEO_DENSE, *CRITEO_VARIABLES)
# Column C<j> (1-based) is xor-ed into bits 56..63 of its values before the hash.
_COLUMN_KEYS = np.arange(1, len(CRITEO_VARIABLES) + 1, dtype=np.uint64) << np.uint64(56)
_MAX_HEX_DIGITS = 16
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_INTEGER = re.compile(rb"-?[0-9]+")
_HEX = re.compile(rb"[0-9a-fA-F]{1,16}")
# Value of each byte as a hex digit, or 255 for a byte that is not one.
_HEX_DIGITS = np.full(256, 255, dtype=np.uint8)
for _digit, _char in enumerate(b"0123456789abcdef"):
    _HEX_DIGITS[_char] = _digit
    _HEX_DIGITS[bytes([_char]).upper()[0]] = _digit


class CriteoFormatError(ValueError):
    """A line of a Criteo TSV file is malformed; the message starts with ``path:line:``."""


def criteo_sign(column: int, value: str) -> int:
    """The sign of hex value ``value`` in categorical column ``C<column>`` (1-based)."""
    if not 1 <= column <= len(CRITEO_VARIABLES):
        raise ValueError(f"column must be in [1, {len(CRITEO_VARIABLES)}], got {column}")
    if not _HEX.fullmatch(value.encode()):
        raise ValueError(f"value must be 1 to 16 hex digits, got {value!r}")
    return splitmix64_mix((column << 56) ^ int(value, 16))


class CriteoTsv:
    """A Criteo TSV file as a :class:`~sniper.data.Reader`: the same batches every epoch.

    Batches hold ``batch_size`` consecutive lines; the last one may be shorter. Variables are
    ``C1..C26``; dense features ``I1..I13``.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        batch_size: int = 1024,
        max_batches: int | None = None,
        block_bytes: int = 16 << 20,
    ) -> None:
        """``max_batches`` stops each epoch early (a sample of a large day); ``block_bytes`` is
        how much of the file pyarrow parses per step, and must exceed the longest line."""
        check_int("batch_size", batch_size)
        if max_batches is not None:
            check_int("max_batches", max_batches)
        check_int("block_bytes", block_bytes)
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"Criteo TSV file {str(self.path)!r} does not exist")
        self._batch_size = batch_size
        self._max_batches = max_batches
        self._block_bytes = block_bytes

    @property
    def variables(self) -> tuple[str, ...]:
        return CRITEO_VARIABLES

    @property
    def dense_features(self) -> int:
        return len(CRITEO_DENSE)

    @property
    def label_names(self) -> tuple[str, ...]:
        return ("label",)

    @property
    def batch_size(self) -> int:
        return self._batch_size

    def batches(self, *, epoch: int = 0, shard: int = 0, num_shards: int = 1) -> Iterator[Batch]:
        """Batches ``shard, shard + num_shards, ...`` of the file (every epoch the same)."""
        check_stream(epoch, shard, num_shards)
        for index, table in enumerate(self._tables()):
            if index == self._max_batches:
                return
            if index % num_shards == shard:
                yield self._convert(table, first_line=index * self._batch_size + 1)

    def __repr__(self) -> str:
        limit = f", max_batches={self._max_batches}" if self._max_batches is not None else ""
        return f"CriteoTsv({str(self.path)!r}, batch_size={self._batch_size}{limit})"

    def _tables(self) -> Iterator[Any]:
        """The file as Arrow tables of ``batch_size`` rows (the last one may be shorter)."""
        if self.path.stat().st_size == 0:
            return  # pyarrow refuses an empty file; it is simply no examples
        pending: list[Any] = []
        pending_rows = 0
        lines_done = 0
        try:
            blocks = self._open()
        except pa.ArrowInvalid as exc:
            if "Empty CSV file" in str(exc):
                return  # an empty .gz: no examples either
            raise _locate_error(self.path, 1, reason=str(exc)) from None
        try:
            for block in blocks:
                pending.append(block)
                pending_rows += block.num_rows
                if pending_rows < self._batch_size:
                    continue
                table = pa.Table.from_batches(pending)
                full = pending_rows - pending_rows % self._batch_size
                for start in range(0, full, self._batch_size):
                    yield table.slice(start, self._batch_size)
                lines_done += full
                pending = table.slice(full).to_batches()
                pending_rows -= full
        except pa.ArrowInvalid as exc:
            # pyarrow parsed every line before the block that failed, so the bad line is at or
            # after the first line it has not handed over.
            first_suspect = lines_done + pending_rows + 1
            raise _locate_error(self.path, first_suspect, reason=str(exc)) from None
        if pending_rows:
            yield pa.Table.from_batches(pending)

    def _open(self) -> Any:
        """pyarrow's streaming CSV reader over the file (it parses the first block at once)."""
        return pa_csv.open_csv(
            self.path,
            read_options=pa_csv.ReadOptions(
                column_names=list(_COLUMNS), block_size=self._block_bytes
            ),
            # No quoting in Criteo files; an empty line is a malformed example, not nothing.
            parse_options=pa_csv.ParseOptions(
                delimiter="\t", quote_char=False, ignore_empty_lines=False
            ),
            convert_options=pa_csv.ConvertOptions(
                column_types={
                    name: pa.binary() if name in CRITEO_VARIABLES else pa.int64()
                    for name in _COLUMNS
                },
                # Only an empty field is missing ("NA" is an error), and an empty categorical
                # field stays an empty string rather than a null.
                null_values=[""],
                strings_can_be_null=False,
            ),
        )

    def _convert(self, table: Any, first_line: int) -> Batch:
        size = table.num_rows
        labels = table.column("label").combine_chunks()
        label_values = labels.fill_null(-1).to_numpy()
        bad = np.flatnonzero((label_values != 0) & (label_values != 1))
        if len(bad):
            raise _locate_error(self.path, first_line + int(bad[0]))
        dense = np.empty((size, len(CRITEO_DENSE)), dtype=np.float32)
        for j, name in enumerate(CRITEO_DENSE):
            values = table.column(name).combine_chunks().fill_null(0).to_numpy()
            dense[:, j] = np.log1p(np.maximum(values, 0))
        sparse: dict[str, Ragged] = {}
        for j, name in enumerate(CRITEO_VARIABLES):
            values, present, bad_row = _parse_hex(table.column(name).combine_chunks())
            if bad_row is not None:
                raise _locate_error(self.path, first_line + bad_row)
            offsets = np.zeros(size + 1, dtype=np.int64)
            np.cumsum(present, out=offsets[1:])
            keys = values[present]
            keys ^= _COLUMN_KEYS[j]
            sparse[name] = (mix_u64(keys), offsets)
        return Batch(labels=label_values.astype(np.float32), dense=dense, sparse=sparse)


def _parse_hex(column: Any) -> tuple[NDArray[np.uint64], NDArray[np.bool_], int | None]:
    """Parse an Arrow binary array of hex strings: ``(values, present, first bad row)``.

    An empty string is absent (value 0). Each digit is weighted by its distance from the end of
    its string (``digit << 4 * k``) and the strings are summed with one prefix sum; the nibbles
    do not overlap, so the sums are exact in wrapping uint64 arithmetic. (One column at a time:
    all 26 at once makes arrays too big for the cache, which costs more than numpy's per-call
    overhead saves.)
    """
    rows = len(column)
    _, offsets_buffer, data_buffer = column.buffers()
    raw = np.frombuffer(offsets_buffer, dtype=np.int32, count=rows + 1, offset=column.offset * 4)
    start, total = int(raw[0]), int(raw[-1] - raw[0])
    offsets = raw.astype(np.int64) - start
    lengths = np.diff(offsets)
    present = lengths > 0
    data = np.frombuffer(data_buffer, dtype=np.uint8) if total else np.zeros(0, np.uint8)
    digits = _HEX_DIGITS[data[start : start + total]]
    bad = np.flatnonzero(lengths > _MAX_HEX_DIGITS)
    not_hex = np.flatnonzero(digits == 255)
    if len(bad) or len(not_hex):
        first_bad = [int(bad[0])] if len(bad) else []
        if len(not_hex):
            first_bad.append(int(np.searchsorted(offsets, not_hex[0], side="right")) - 1)
        return np.zeros(0, np.uint64), present, min(first_bad)
    ends = np.repeat(offsets[1:], lengths)
    shifts = ((ends - 1 - np.arange(total)) * 4).astype(np.uint64)
    prefix = np.zeros(total + 1, dtype=np.uint64)
    np.cumsum(digits.astype(np.uint64) << shifts, out=prefix[1:])
    return prefix[offsets[1:]] - prefix[offsets[:-1]], present, None


def _locate_error(path: Path, first_line: int, reason: str | None = None) -> CriteoFormatError:
    """Scan ``path`` from line ``first_line`` for the first malformed line and describe it."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as lines:
        numbered = enumerate(itertools.islice(lines, first_line - 1, None), start=first_line)
        for number, line in numbered:
            problem = _line_problem(line.rstrip(b"\r\n").split(b"\t"))
            if problem is not None:
                if number == 1 and line.startswith(b"label"):
                    problem += " (Criteo files have no header line: remove it)"
                return CriteoFormatError(f"{path}:{number}: {problem}")
    # pyarrow refused something that the line checker accepts; pass its reason on.
    return CriteoFormatError(f"{path}: unreadable after line {first_line - 1}: {reason}")


def _line_problem(fields: list[bytes]) -> str | None:
    """What is wrong with one line's fields, or None when it is a valid example."""
    if fields == [b""]:
        return "empty line; every line must be an example"
    if len(fields) != len(_COLUMNS):
        return (
            f"expected {len(_COLUMNS)} tab-separated fields (label, I1..I13, C1..C26), "
            f"got {len(fields)}"
        )
    if fields[0] not in (b"0", b"1"):
        return f"label must be 0 or 1, got {_text(fields[0])}"
    for name, field in zip(_COLUMNS[1:], fields[1:], strict=True):
        if not field:
            continue
        if name in CRITEO_VARIABLES:
            if not _HEX.fullmatch(field):
                return f"{name} must be 1 to 16 hex digits or empty, got {_text(field)}"
        elif not (_INTEGER.fullmatch(field) and _INT64_MIN <= int(field) <= _INT64_MAX):
            return f"{name} must be a 64-bit integer or empty, got {_text(field)}"
    return None


def _text(field: bytes) -> str:
    return repr(field.decode("utf-8", errors="replace"))
