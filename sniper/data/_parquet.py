"""Batches stored as Parquet, read back column by column straight into numpy.

Schema (one row per example; one row group per batch as :func:`write_parquet` writes it)::

    label      float32                          0.0 or 1.0
    dense      fixed_size_list<float32>[d]      the d dense features
    <variable> large_list<uint64>               one column per sparse variable: its signs

A ``large_list`` column is exactly the ragged layout the ps takes: its int64 offsets are the
batch's offsets and its values are the signs, so a batch read from a row group hands both to
numpy without a copy (``list<uint64>``, as other writers produce, also reads, with its int32
offsets widened). The schema metadata records the variables in order, the number of dense
features, the batch size written and a description of the source, under ``sniper.*`` keys.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from sniper.data._batch import Batch, Ragged, checked_batch
from sniper.data._checks import check_int
from sniper.data._reader import Reader, check_stream

__all__ = [
    "FORMAT",
    "NonfiniteDense",
    "ParquetFormatError",
    "ParquetReader",
    "parquet_schema",
    "write_parquet",
]

FORMAT = "sniper.data/1"
"""Value of the ``sniper.format`` metadata key; bumped when the schema changes."""
WINDOW_BYTES = 4 << 20
"""Decoded bytes of row groups that :meth:`ParquetReader.batches` reads in one call: enough to
pay pyarrow's per-call cost once for several batches of a small workload, while a large one
(seed_ctr at scale 1.0: 6 MB a batch) still reads one batch at a time."""
_LABEL = "label"
_DENSE = "dense"
_KEY_FORMAT = b"sniper.format"
_KEY_VARIABLES = b"sniper.variables"
_KEY_DENSE = b"sniper.dense_features"
_KEY_BATCH = b"sniper.batch_size"
_KEY_SOURCE = b"sniper.source"
_KEY_SHAPE = b"sniper.shape"

NonfiniteDense = Literal["error", "fill"]
"""What a reader does with a NaN or Inf dense feature: refuse the file naming the row and
column, or read it as 0 (``DataSource.nonfinite_dense``)."""


class ParquetFormatError(ValueError):
    """A Parquet file does not hold sniper batches; the message names the file and column."""


def parquet_schema(
    variables: tuple[str, ...], dense_features: int, metadata: dict[bytes, bytes] | None = None
) -> Any:
    """The Arrow schema of batches with these variables and dense features."""
    clash = {_LABEL, _DENSE} & set(variables)
    if clash:
        raise ValueError(f"a variable cannot be named {sorted(clash)[0]!r}: that column is taken")
    if len(set(variables)) != len(variables):
        raise ValueError("variable names must be unique")
    fields = [
        pa.field(_LABEL, pa.float32(), nullable=False),
        pa.field(_DENSE, pa.list_(pa.float32(), dense_features), nullable=False),
        *(pa.field(name, pa.large_list(pa.uint64()), nullable=False) for name in variables),
    ]
    return pa.schema(fields, metadata=metadata)


def write_parquet(
    reader: Reader, path: str | Path, *, epoch: int = 0, compression: str = "snappy"
) -> int:
    """Write every batch of ``reader``'s epoch ``epoch`` to ``path``; return the rows written.

    Each batch becomes one row group, so a :class:`ParquetReader` with the same batch size
    reads batches back without a copy, and ``num_shards`` hubs read only their row groups. The
    file appears at ``path`` only when complete: it is written next to it and renamed.
    """
    target = Path(path)
    labels = tuple(reader.label_names)
    if len(labels) != 1:
        raise ValueError(
            f"sniper's Parquet format holds one label column, and {reader!r} has "
            f"{len(labels)} ({', '.join(labels)}): write a table with a column per label and "
            "read it through [features] instead"
        )
    if not target.parent.is_dir():
        raise FileNotFoundError(f"{target.parent} is not a directory to write {target.name} in")
    partial = target.with_name(target.name + ".partial")
    metadata = {
        _KEY_FORMAT: FORMAT.encode(),
        _KEY_VARIABLES: json.dumps(list(reader.variables)).encode(),
        _KEY_DENSE: str(reader.dense_features).encode(),
        _KEY_BATCH: str(reader.batch_size).encode(),
        _KEY_SOURCE: repr(reader).encode(),
    }
    shape = _reader_shape(reader)
    if shape is not None:
        metadata[_KEY_SHAPE] = json.dumps(shape).encode()
    schema = parquet_schema(tuple(reader.variables), reader.dense_features, metadata)
    rows = 0
    try:
        with pq.ParquetWriter(partial, schema, compression=compression) as writer:
            for batch in reader.batches(epoch=epoch):
                writer.write_batch(_record_batch(batch, schema), row_group_size=batch.batch_size)
                rows += batch.batch_size
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return rows


def _reader_shape(reader: Reader) -> dict[str, dict[str, int]] | None:
    """Signs per batch and vocabulary per variable, for readers that know them (synthetic)."""
    signs = getattr(reader, "signs_per_batch", None)
    vocabulary = getattr(reader, "vocabulary", None)
    if not isinstance(signs, dict) or not isinstance(vocabulary, dict):
        return None
    return {"signs_per_batch": signs, "vocabulary": vocabulary}


def _record_batch(batch: Batch, schema: Any) -> Any:
    """A batch as an Arrow record batch, sharing the batch's memory (no copies)."""
    dense = pa.FixedSizeListArray.from_arrays(
        pa.array(batch.dense.reshape(-1)), batch.dense_features
    )
    columns = [pa.array(batch.labels), dense]
    missing = [name for name in schema.names[2:] if name not in batch.sparse]
    if missing:
        raise ValueError(f"a batch lacks the reader's variables {', '.join(missing)}")
    for name in schema.names[2:]:
        signs, offsets = batch.sparse[name]
        columns.append(pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(signs)))
    return pa.record_batch(columns, schema=schema)


class ParquetReader:
    """A Parquet file of batches as a :class:`~sniper.data.Reader` (same data every epoch).

    Batch ``i`` is rows ``[i * batch_size, (i + 1) * batch_size)``; the last one may be
    shorter. A shard reads only the row groups its batches lie in, several batches' groups in one
    call. A batch's labels, dense features and signs are read-only numpy views of the Arrow
    buffers that the Parquet decoder filled: no copy after decoding. Its offsets are a view too
    when they start at 0 (the first batch of a read, for ``large_list`` columns), else a copy
    that starts there (``batch_size + 1`` numbers).

    Not thread-safe (it keeps the last row groups read): give each thread its own reader.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        batch_size: int | None = None,
        max_batches: int | None = None,
        nonfinite_dense: NonfiniteDense = "error",
    ) -> None:
        """``batch_size`` defaults to the batch size the file was written with;
        ``max_batches`` stops each epoch early; ``nonfinite_dense``: a NaN or Inf dense
        feature is a :class:`ParquetFormatError` naming its row and feature (``error``), or
        is read as 0 (``fill``)."""
        if max_batches is not None:
            check_int("max_batches", max_batches)
        if nonfinite_dense not in ("error", "fill"):
            raise ValueError(f"nonfinite_dense must be 'error' or 'fill', got {nonfinite_dense!r}")
        self._nonfinite_dense = nonfinite_dense
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"Parquet file {str(self.path)!r} does not exist")
        try:
            self._file = pq.ParquetFile(self.path)
        except (pa.ArrowException, OSError) as exc:  # truncated, or not Parquet at all
            raise ParquetFormatError(f"{self.path}: not a readable Parquet file ({exc})") from None
        schema = self._file.schema_arrow
        metadata = schema.metadata or {}
        self._variables = self._read_variables(schema, metadata)
        self._dense_features = self._read_dense_features(schema)
        if batch_size is None:
            if _KEY_BATCH not in metadata:
                raise ValueError(
                    f"{self.path}: no sniper.batch_size in its metadata; pass batch_size"
                )
            batch_size = int(metadata[_KEY_BATCH])
        check_int("batch_size", batch_size)
        self._batch_size = batch_size
        self._max_batches = max_batches
        groups = self._file.metadata.num_row_groups
        sizes = [self._file.metadata.row_group(i).num_rows for i in range(groups)]
        self._group_starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        self._group_bytes = [
            self._file.metadata.row_group(i).total_byte_size for i in range(groups)
        ]
        self._cached: tuple[tuple[int, ...], _Rows] | None = None

    @property
    def variables(self) -> tuple[str, ...]:
        return self._variables

    @property
    def dense_features(self) -> int:
        return self._dense_features

    @property
    def label_names(self) -> tuple[str, ...]:
        return (_LABEL,)

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def num_rows(self) -> int:
        """Examples in the file."""
        return int(self._group_starts[-1])

    @property
    def num_batches(self) -> int:
        """Batches per epoch, counting a shorter last one (at most ``max_batches``)."""
        batches = -(-self.num_rows // self._batch_size)
        return batches if self._max_batches is None else min(batches, self._max_batches)

    @property
    def shape(self) -> tuple[dict[str, int], dict[str, int]] | None:
        """(signs per batch, vocabulary) of each variable, when the writer recorded them: the
        synthetic generator's figures, what it could draw, not what the file holds (``sniper
        train`` sizes a file's tables from the distinct ids counted in it, as any file's).
        """
        value = (self._file.schema_arrow.metadata or {}).get(_KEY_SHAPE)
        if value is None:
            return None
        try:
            raw = json.loads(value)
            signs = {str(k): int(v) for k, v in raw["signs_per_batch"].items()}
            vocabulary = {str(k): int(v) for k, v in raw["vocabulary"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{self.path}: unreadable sniper.shape metadata: {exc}") from None
        return signs, vocabulary

    @property
    def source(self) -> str | None:
        """What the file was written from (``repr`` of the reader), when recorded."""
        value = (self._file.schema_arrow.metadata or {}).get(_KEY_SOURCE)
        return value.decode() if value is not None else None

    def batches(self, *, epoch: int = 0, shard: int = 0, num_shards: int = 1) -> Iterator[Batch]:
        """Batches ``shard, shard + num_shards, ...`` of the file (every epoch the same).

        The row groups of several batches are read in one call (a window of up to
        :data:`WINDOW_BYTES` decoded): pyarrow's cost per call and per column is paid once for
        them all (seed_ctr at scale 0.02: 3.0 ms a batch read alone, 1.3 in fours). Only this
        shard's groups are read.

        The next window is decoded and checked on a thread of this iterator's own while the
        batches of the one before are handed out, so the caller pays only for slicing. Why: a
        one-process job reads on its event loop, which also runs every role's requests, and a
        window decoded there stopped them all for 20-30 ms every ten batches (seed_ctr at scale
        0.02); pyarrow decodes without the GIL, so on a thread it only takes a share of a core.
        One pyarrow thread decodes, leaving the other cores to training. A file that fails to
        decode or check raises here once every batch before it has been handed out.
        """
        check_stream(epoch, shard, num_shards)
        windows = self._windows(range(shard, self.num_batches, num_shards))
        if not windows:
            return
        decoder = _Decoder(self)
        pool = ThreadPoolExecutor(1, thread_name_prefix="sniper-parquet")
        try:
            ahead = pool.submit(decoder, windows[0])
            for index, window in enumerate(windows):
                rows = ahead.result()
                if index + 1 < len(windows):
                    ahead = pool.submit(decoder, windows[index + 1])
                yield from self._slices(window, rows)
        finally:
            pool.shutdown(cancel_futures=True)  # a caller that stops early waits for one window
            decoder.close()

    def _windows(self, indices: range) -> list[list[tuple[int, range]]]:
        """``indices`` grouped into windows of about :data:`WINDOW_BYTES` decoded, each batch
        with the row groups it lies in."""
        windows: list[list[tuple[int, range]]] = []
        window: list[tuple[int, range]] = []
        size = 0
        for index in indices:
            groups = self._groups(index)
            window.append((index, groups))
            size += sum(self._group_bytes[group] for group in groups)
            if size >= WINDOW_BYTES:
                windows.append(window)
                window, size = [], 0
        if window:
            windows.append(window)
        return windows

    def batch(self, index: int) -> Batch:
        """Batch ``index`` alone (read on the calling thread)."""
        if not 0 <= index < self.num_batches:
            raise IndexError(f"batch {index} out of range: the file has {self.num_batches}")
        window = [(index, self._groups(index))]
        return next(self._slices(window, self._read_groups(_groups_of(window))))

    def _rows(self, index: int) -> tuple[int, int]:
        """The file rows ``[start, stop)`` of batch ``index``."""
        start = index * self._batch_size
        return start, min(start + self._batch_size, self.num_rows)

    def _groups(self, index: int) -> range:
        """The row groups batch ``index`` lies in."""
        start, stop = self._rows(index)
        first = int(np.searchsorted(self._group_starts, start, side="right")) - 1
        last = int(np.searchsorted(self._group_starts, stop - 1, side="right")) - 1
        return range(first, last + 1)

    def _slices(self, window: list[tuple[int, range]], rows: _Rows) -> Iterator[Batch]:
        """The window's batches ``(index, its row groups)``, in order, cut from ``rows``: its
        groups, read in order back to back."""
        shift: dict[int, int] = {}  # how far each group's rows moved
        read = 0
        for group in _groups_of(window):
            start = int(self._group_starts[group])
            shift[group] = read - start
            read += int(self._group_starts[group + 1]) - start
        for index, spanned in window:
            start, stop = self._rows(index)
            offset = shift[spanned[0]]
            yield rows.batch(start + offset, stop + offset)

    def _read_groups(self, groups: tuple[int, ...]) -> _Rows:
        """Read row groups as numpy, keeping the last ones read: a batch read alone again, or
        consecutive small batches, share them."""
        if self._cached is None or self._cached[0] != groups:
            table = self._read_table(self._file, groups, use_threads=True)
            self._cached = (groups, self._to_rows(table, groups))
        return self._cached[1]

    def _read_table(self, file: Any, groups: tuple[int, ...], *, use_threads: bool) -> Any:
        """Row groups ``groups`` of ``file`` (this reader's path), or a
        :class:`ParquetFormatError` naming the file when they cannot be decoded (a file cut
        short after its footer was read, a damaged page)."""
        try:
            return file.read_row_groups(
                list(groups), columns=self._columns(), use_threads=use_threads
            )
        except (pa.ArrowException, OSError) as exc:
            raise ParquetFormatError(
                f"{self.path}: row groups {groups[0]}..{groups[-1]} are unreadable ({exc})"
            ) from None

    def _columns(self) -> list[str]:
        return [_LABEL, _DENSE, *self._variables]

    def _to_rows(self, table: Any, groups: tuple[int, ...]) -> _Rows:
        """A table's columns (row groups ``groups``, in order) as checked numpy arrays
        (checked here once, for every batch)."""
        labels = _numpy(self._single_chunk(table, _LABEL)).astype(np.float32, copy=False)
        if not np.all((labels == 0) | (labels == 1)):
            raise ParquetFormatError(
                f"{self.path}: labels must be 0.0 or 1.0; binarize click counts before writing"
            )
        dense_column = self._single_chunk(table, _DENSE)
        dense = _numpy(dense_column.flatten()).reshape(len(dense_column), self._dense_features)
        sparse = {name: self._ragged(table, name) for name in self._variables}
        dense = self._finite(dense.astype(np.float32, copy=False), groups)
        return _Rows(labels, dense, sparse)

    def _finite(self, dense: NDArray[np.float32], groups: tuple[int, ...]) -> NDArray[np.float32]:
        """``dense`` if every value is finite; else refused naming the first bad one's row and
        feature, or (``nonfinite_dense = "fill"``) a copy with 0 in their place. A NaN read
        as a feature would train, then fail far from here (a NaN probability) naming nothing."""
        if np.isfinite(dense.sum(dtype=np.float64)):  # one pass, no mask, when all is well
            return dense
        finite = np.isfinite(dense)
        if finite.all():  # the float64 sum overflowed: huge, but finite, values
            return dense
        if self._nonfinite_dense == "fill":
            return np.where(finite, dense, np.float32(0))
        row, feature = (int(i[0]) for i in np.nonzero(~finite))
        raise ParquetFormatError(
            f"{self.path}: row {self._file_row(groups, row)} (from 0), column 'dense', feature "
            f"{feature}: {dense[row, feature]}; dense features must be finite (nonfinite_dense "
            '= "fill" reads NaN and Inf as 0)'
        )

    def _file_row(self, groups: tuple[int, ...], row: int) -> int:
        """The file row of row ``row`` of row groups ``groups`` read back to back."""
        for group in groups:
            size = int(self._group_starts[group + 1] - self._group_starts[group])
            if row < size:
                return int(self._group_starts[group]) + row
            row -= size
        raise IndexError(f"row {row} lies past row groups {groups}")

    def _ragged(self, table: Any, name: str) -> Ragged:
        """A list<uint64> column as ``(signs, offsets)``, views of its buffers where possible;
        the offsets index ``signs`` directly (the first need not be 0)."""
        column = self._single_chunk(table, name)
        offsets = _numpy(column.offsets).astype(np.int64, copy=False)
        if np.any(offsets[1:] < offsets[:-1]):
            raise ParquetFormatError(f"{self.path}: column {name!r} has decreasing offsets")
        return _numpy(column.values), offsets

    def __repr__(self) -> str:
        limit = f", max_batches={self._max_batches}" if self._max_batches is not None else ""
        fill = ', nonfinite_dense="fill"' if self._nonfinite_dense == "fill" else ""
        return f"ParquetReader({str(self.path)!r}, batch_size={self._batch_size}{limit}{fill})"

    def _single_chunk(self, table: Any, name: str) -> Any:
        column = table.column(name)
        if column.null_count:
            raise ParquetFormatError(
                f"{self.path}: column {name!r} has nulls; write an empty list for an example "
                "without signs"
            )
        # Several chunks (a batch across row groups) must be joined, which copies.
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()

    def _read_variables(self, schema: Any, metadata: dict[bytes, bytes]) -> tuple[str, ...]:
        for name in (_LABEL, _DENSE):
            if schema.get_field_index(name) < 0:
                raise ParquetFormatError(f"{self.path}: no {name!r} column")
        label = schema.field(_LABEL).type
        if not pa.types.is_floating(label):
            raise ParquetFormatError(f"{self.path}: column 'label' must be float32, got {label}")
        if _KEY_VARIABLES in metadata:
            variables = tuple(json.loads(metadata[_KEY_VARIABLES]))
        else:
            variables = tuple(n for n in schema.names if n not in (_LABEL, _DENSE))
        for name in variables:
            if schema.get_field_index(name) < 0:
                raise ParquetFormatError(f"{self.path}: no column for variable {name!r}")
            kind = schema.field(name).type
            is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind)
            if not (is_list and kind.value_type == pa.uint64()):
                raise ParquetFormatError(
                    f"{self.path}: variable {name!r} must be a large_list<uint64> column, "
                    f"got {kind}"
                )
        return variables

    def _read_dense_features(self, schema: Any) -> int:
        kind = schema.field(_DENSE).type
        if not (pa.types.is_fixed_size_list(kind) and kind.value_type == pa.float32()):
            raise ParquetFormatError(
                f"{self.path}: column 'dense' must be fixed_size_list<float32>, got {kind}"
            )
        return int(kind.list_size)


class _Rows(NamedTuple):
    """Consecutive rows read from the file, as numpy arrays that have passed every check a
    :class:`Batch` makes: slicing one into batches needs no checks of its own."""

    labels: NDArray[np.float32]
    dense: NDArray[np.float32]
    sparse: dict[str, Ragged]

    def batch(self, start: int, stop: int) -> Batch:
        """Rows ``[start, stop)`` as a batch of views (the offsets alone are rebased: a copy
        of ``stop - start + 1`` numbers, unless they already start at 0)."""
        sparse = {}
        for name, (values, offsets) in self.sparse.items():
            mine = offsets[start : stop + 1]
            first = int(mine[0])
            sparse[name] = (values[first : int(mine[-1])], mine - first if first else mine)
        return checked_batch(self.labels[start:stop], self.dense[start:stop], sparse)


class _Decoder:
    """Reads and checks windows of a :class:`ParquetReader`'s file on another thread, through
    a file handle of its own (the reader's serves :meth:`ParquetReader.batch`)."""

    def __init__(self, reader: ParquetReader) -> None:
        self._reader = reader
        try:
            self._file = pq.ParquetFile(reader.path)
        except (pa.ArrowException, OSError) as exc:
            raise ParquetFormatError(
                f"{reader.path}: not a readable Parquet file ({exc}); it changed since it was "
                "opened"
            ) from None
        if not self._file.metadata.equals(reader._file.metadata):
            self._file.close()
            raise ParquetFormatError(
                f"{reader.path}: the file changed since it was opened; open a new reader"
            )

    def close(self) -> None:
        self._file.close()

    def __call__(self, window: list[tuple[int, range]]) -> _Rows:
        groups = _groups_of(window)
        table = self._reader._read_table(self._file, groups, use_threads=False)
        return self._reader._to_rows(table, groups)


def _groups_of(window: list[tuple[int, range]]) -> tuple[int, ...]:
    """The row groups a window's batches lie in, in file order."""
    return tuple(sorted({group for _, spanned in window for group in spanned}))


def _numpy(array: Any) -> NDArray[Any]:
    result: NDArray[Any] = array.to_numpy(zero_copy_only=True)
    return result
