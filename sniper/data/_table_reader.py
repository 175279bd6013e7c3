"""A user's Parquet, CSV or TSV files read through a :class:`FeatureSpec`, as batches.

**Streaming.** Parquet is read a row group at a time, in chunks of :data:`READ_ROWS` rows
(``ParquetFile.iter_batches``), CSV and TSV with pyarrow's streaming CSV reader in blocks of
:data:`CSV_BLOCK_BYTES`, as text made the values Parquet holds (:mod:`sniper.data._csv`: the
same rows give the same signs and numbers in either format): a file is never in memory whole.
Each chunk becomes numpy arrays (:mod:`sniper.data._columns`: signs hashed, dense values
filled and transformed, labels made 0/1, every value checked), and batches of exactly
``batch_size`` rows are cut from the chunks across row-group and file boundaries; a shard's
last batch may be shorter.

**Sharding** (several hubs, every row read once per epoch). Parquet is split by its row
groups, in file order, each to the hub with the fewest rows so far (round-robin where the
groups are of one size), or, when there are fewer row groups than hubs, each row group cut
into as many row ranges as there are hubs.
CSV cannot be read in part without parsing what comes before: with at least as many files as
hubs, hub ``k`` reads files ``k, k + n, ...``; with fewer, every hub parses every file and
converts (hashes) only its blocks ``k, k + n, ...`` of the blocks of all the files in order.
A shard's batches are cut from its own rows, so the contract of
:class:`~sniper.data.Reader` holds per row rather than per global batch number: the ``n``
shards together yield every row exactly once.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from numpy.typing import NDArray

from sniper.data._batch import Batch, Ragged, checked_batch
from sniper.data._checks import check_int
from sniper.data._columns import (
    TableError,
    Where,
    bag_weights,
    check_dense_type,
    check_label_type,
    check_sparse_type,
    dense_values,
    label_values,
    model_input,
    sparse_signs,
)
from sniper.data._csv import as_numbers, as_text, convert_options
from sniper.data._features import ColumnSpec, FeatureSpec, LabelSpec
from sniper.data._reader import check_stream

__all__ = ["CSV_BLOCK_BYTES", "READ_ROWS", "TableFormat", "TableReader"]

TableFormat = Literal["parquet", "csv", "tsv"]
READ_ROWS = 65536
"""Rows of a Parquet row group decoded at a time."""
CSV_BLOCK_BYTES = 4 << 20
"""Bytes of CSV parsed at a time (a block ends at a line's end)."""


@dataclass(frozen=True)
class _Unit:
    """Rows ``[start, stop)`` of row group ``group`` of file ``file``, whose first row is the
    file's row ``first``."""

    file: int
    group: int
    start: int
    stop: int
    first: int = 0


def _shown(schema: Any) -> str:
    """A file's first twelve column names, for an error that names one it lacks."""
    return ", ".join(schema.names[:12]) + (" ..." if len(schema.names) > 12 else "")


def _cut(unit: _Unit, shard: int, num_shards: int) -> _Unit:
    """Row range ``shard`` of ``unit`` cut into ``num_shards`` ranges as even as can be."""
    bounds = np.linspace(unit.start, unit.stop, num_shards + 1).astype(int)
    return _Unit(unit.file, unit.group, int(bounds[shard]), int(bounds[shard + 1]), unit.first)


@dataclass(frozen=True)
class _Rows:
    """Consecutive rows, converted and checked: what a :class:`Batch` is cut from."""

    labels: NDArray[np.float32]
    dense: NDArray[np.float32]
    sparse: dict[str, Ragged]
    weights: dict[str, NDArray[np.float32]]

    def __len__(self) -> int:
        return len(self.labels)

    def cut(self, start: int, stop: int) -> _Rows:
        """Rows ``[start, stop)``."""
        sparse: dict[str, Ragged] = {}
        weights: dict[str, NDArray[np.float32]] = {}
        for name, (signs, offsets) in self.sparse.items():
            mine = offsets[start : stop + 1]
            first, last = int(mine[0]), int(mine[-1])
            sparse[name] = (signs[first:last], mine - first)
            if name in self.weights:
                weights[name] = self.weights[name][first:last]
        return _Rows(self.labels[start:stop], self.dense[start:stop], sparse, weights)

    @staticmethod
    def join(parts: Sequence[_Rows]) -> _Rows:
        """``parts`` one after the other."""
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        sparse: dict[str, Ragged] = {}
        for name in first.sparse:
            signs = np.concatenate([p.sparse[name][0] for p in parts])
            lengths = np.concatenate([np.diff(p.sparse[name][1]) for p in parts])
            sparse[name] = (signs, _offsets(lengths))
        weights = {name: np.concatenate([p.weights[name] for p in parts]) for name in first.weights}
        return _Rows(
            np.concatenate([p.labels for p in parts]),
            np.concatenate([p.dense for p in parts]),
            sparse,
            weights,
        )

    def batch(self) -> Batch:
        return checked_batch(self.labels, self.dense, self.sparse, self.weights)


class TableReader:
    """A user's table (Parquet, CSV or TSV files of one schema) read through a
    :class:`FeatureSpec` as a :class:`~sniper.data.Reader` (see the module doc).

    Opening checks every file's schema against the spec (a missing column, a type that cannot
    be a sign, a dense column of strings, a string label without ``positive``, files that
    disagree) and, for ``standardize`` columns without ``stats``, measures them in one pass
    over those columns; :attr:`features` is the spec with them filled in. Every error names the
    file, the row where it is a value's fault, and the column.

    With ``optional_labels``, a table whose files lack label columns the spec names is read
    with the labels it has (:attr:`label_names` those, each batch's ``labels`` their columns;
    none: no columns), and a row whose label is null is kept, its label NaN
    (``skip_null_labels`` drops none): ``sniper predict`` scores every event, those whose
    outcome is not known yet too, and numbers its output's rows as the data's. Without it, a
    missing label column is an error as any other missing column, and a null label is
    refused or its row dropped (``skip_null_labels``): training and evaluation need the
    labels.
    """

    def __init__(
        self,
        files: Sequence[str | Path],
        features: FeatureSpec,
        *,
        format: TableFormat = "parquet",
        batch_size: int = 1024,
        max_batches: int | None = None,
        optional_labels: bool = False,
    ) -> None:
        """``max_batches`` stops each shard's epoch early; ``optional_labels``: see the class
        doc."""
        check_int("batch_size", batch_size)
        if max_batches is not None:
            check_int("max_batches", max_batches)
        if not files:
            raise ValueError("a table needs at least one file")
        self.files = tuple(Path(f) for f in files)
        for file in self.files:
            if not file.is_file():
                raise FileNotFoundError(f"{format} file {str(file)!r} does not exist")
        self.format: TableFormat = format
        self._batch_size = batch_size
        self._max_batches = max_batches
        self._spec = features
        self._keep_null_labels = optional_labels
        self._labels: tuple[LabelSpec, ...] = features.labels
        """The labels read: the spec's, or those the data has (``optional_labels``)."""
        self._schemas = [self._schema(file) for file in self.files]
        """Each file's schema, read once: the labels' check and the columns' both read it."""
        if optional_labels:
            self._labels = self._labels_present()
        self._types = self._check_schemas()
        self._footer = threading.local()
        """Each reading thread's last Parquet footer, ``(file index, metadata)``: a row group
        opens its file with it, where reading the whole footer again for each of a file's
        groups made reading quadratic in them (3,000 groups of one row: 35 s). One a thread,
        not every file's: a reader of thousands of files would hold all their footers."""
        self._units = self._parquet_units() if format == "parquet" else []
        if features.needs_stats:
            self._spec = features.with_stats(self._measure(features.needs_stats))

    @property
    def features(self) -> FeatureSpec:
        """The spec, with ``standardize``'s stats measured where it did not give them."""
        return self._spec

    @property
    def variables(self) -> tuple[str, ...]:
        return self._spec.variables

    @property
    def dense_features(self) -> int:
        return len(self._spec.dense)

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def label_names(self) -> tuple[str, ...]:
        """The label columns read, in the order of :attr:`Batch.labels`' columns (none for a
        table read without its labels: see ``optional_labels``)."""
        return tuple(label.column for label in self._labels)

    def pooling_of(self, variable: str) -> str:
        """How ``variable``'s bags are pooled (the spec's :meth:`FeatureSpec.pooling_of`)."""
        return self._spec.pooling_of(variable)

    def batches(self, *, epoch: int = 0, shard: int = 0, num_shards: int = 1) -> Iterator[Batch]:
        """Shard ``shard`` of ``num_shards`` of the table (every epoch the same rows)."""
        check_stream(epoch, shard, num_shards)
        pending: list[_Rows] = []
        held = 0
        made = 0
        for rows in self._chunks(shard, num_shards):
            pending.append(rows)
            held += len(rows)
            if held < self._batch_size:
                continue
            joined = _Rows.join(pending)
            start = 0
            while held - start >= self._batch_size:
                yield joined.cut(start, start + self._batch_size).batch()
                made += 1
                if self._max_batches is not None and made >= self._max_batches:
                    return
                start += self._batch_size
            pending = [joined.cut(start, len(joined))] if start < len(joined) else []
            held = len(joined) - start
        if held:
            yield _Rows.join(pending).batch()

    def variable_signs(self, variables: Iterable[str]) -> Iterator[tuple[str, NDArray[np.uint64]]]:
        """``(variable, signs)`` of each of ``variables``' columns, a chunk of the files at a
        time, read from those columns alone: what sizing a table from the data counts, in a
        pass that skips the labels and dense columns."""
        spec = self._spec
        wanted = set(variables)
        columns = [c for c in spec.sparse if spec.variable_of(c) in wanted]
        for table, _ in self._tables(0, 1, columns):
            for name in columns:
                variable = spec.variable_of(name)
                (signs, _), _ = sparse_signs(variable, table.column(name), spec.column(name))
                yield variable, signs

    def rows_of(self, columns: Sequence[str]) -> Iterator[Any]:
        """``columns`` of every row, as they are in the files (their types; CSV's inferred),
        in Arrow tables of a chunk of rows each, in the order :meth:`batches` of one shard
        reads the rows: ``sniper predict --keep`` writes them beside each row's scores, to
        join the scores to ids without counting rows. Every file must have them."""
        for file, schema in zip(self.files, self._schemas, strict=True):
            missing = [name for name in columns if schema.get_field_index(name) < 0]
            if missing:
                raise TableError(
                    f"{file}: no column {missing[0]!r} to keep; the file has {_shown(schema)}"
                )
        names = list(columns)
        if self.format == "parquet":
            chunks = (chunk for chunk, _ in self._tables(0, 1, names))
        else:
            chunks = (
                chunk
                for file in self.files
                for chunk, _ in self._csv_blocks(file, names, typed=False)
            )
        for chunk in chunks:
            yield pa.table(chunk)  # record batches too

    def __repr__(self) -> str:
        first = str(self.files[0])
        more = f" and {len(self.files) - 1} more" if len(self.files) > 1 else ""
        return f"TableReader({self.format}: {first!r}{more}, batch_size={self._batch_size})"

    # -- schema -------------------------------------------------------------------------------

    def _columns(self) -> list[str]:
        """Every column the spec reads, each once."""
        spec = self._spec
        names = [*self.label_names, *spec.dense, *spec.sparse]
        names += [spec.column(c).weights for c in spec.sparse if spec.column(c).weights]
        return list(dict.fromkeys(names))

    def _schema(self, file: Path) -> Any:
        if self.format == "parquet":
            try:
                return pq.ParquetFile(file).schema_arrow
            except (pa.ArrowException, OSError) as exc:
                raise TableError(f"{file}: not a Parquet file: {exc}") from None
        try:
            with pacsv.open_csv(
                file,
                read_options=pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES),
                parse_options=self._parse_options(),
            ) as stream:
                return stream.schema
        except pa.ArrowException as exc:
            raise TableError(
                f"{file}: not {self.format.upper()} with a header row: {exc}"
            ) from None

    def _labels_present(self) -> tuple[LabelSpec, ...]:
        """The spec's labels whose column every file has (``optional_labels``). A label column
        some files have and others lack is refused, naming one of each: reading it from some
        would leave the others' rows without truth, and reading it from none would drop
        theirs."""
        present = []
        for label in self._labels:
            has = {
                file: schema.get_field_index(label.column) >= 0
                for file, schema in zip(self.files, self._schemas, strict=True)
            }
            if all(has.values()):
                present.append(label)
            elif any(has.values()):
                lacking = next(file for file, there in has.items() if not there)
                having = next(file for file, there in has.items() if there)
                raise TableError(
                    f"{lacking}: lacks a label column ({label.column}) that {having} has: a "
                    "table is read with each label of every file or of none; read them apart"
                )
        return tuple(present)

    def _check_schemas(self) -> dict[str, Any]:
        """Each used column's type, the same in every file; every error names the file."""
        spec = self._spec
        first: dict[str, Any] = {}
        for index, (file, schema) in enumerate(zip(self.files, self._schemas, strict=True)):
            types = {}
            for name in self._columns():
                if schema.get_field_index(name) < 0:
                    raise TableError(
                        f"{file}: no column {name!r}, which [features] names; the file has "
                        f"{_shown(schema)}"
                    )
                types[name] = schema.field(name).type
                if self.format != "parquet" and name in spec.sparse:
                    types[name] = pa.string()  # text, whatever the guess (ids > 2**63: double)
            if index == 0:
                for label in self._labels:
                    check_label_type(str(file), label, types[label.column])
                for name in spec.sparse:
                    check_sparse_type(str(file), name, types[name], spec.column(name))
                for name in spec.dense:
                    check_dense_type(str(file), name, types[name])
                first = types
                continue
            for name, kind in types.items():
                if not _same_type(kind, first[name], self.format):
                    raise TableError(
                        f"{file}: column {name!r} is {kind}, but {self.files[0]} has it as "
                        f"{first[name]}: every file of an input must have one schema"
                    )
        return first

    def _parquet_units(self) -> list[_Unit]:
        units = []
        for index, file in enumerate(self.files):
            meta = pq.read_metadata(file)
            sizes = [meta.row_group(group).num_rows for group in range(meta.num_row_groups)]
            firsts = itertools.accumulate(sizes, initial=0)
            units += [
                _Unit(index, group, 0, size, first)
                for group, (size, first) in enumerate(zip(sizes, firsts, strict=False))
            ]
        return [unit for unit in units if unit.stop > unit.start]

    def _shard_units(self, shard: int, num_shards: int) -> list[_Unit]:
        """The units hub ``shard`` of ``num_shards`` reads, in file order.

        With at least as many row groups as hubs, each group goes whole, in order, to the hub
        with the fewest rows so far (the first of those that tie): row groups of equal sizes
        go round-robin, and groups of other sizes (a file's short last group, files of other
        lengths) leave hubs at most one group apart. Dealt round-robin regardless, groups of
        256, 256, 256 and 32 rows gave one hub 512 rows a file and the other 288, and its
        trainer rank steps without data. With fewer groups than hubs, each group is cut into
        as many row ranges as there are hubs (each hub then decodes every group, but each row
        is its hub's)."""
        if len(self._units) < num_shards:
            cuts = (_cut(unit, shard, num_shards) for unit in self._units)
            return [cut for cut in cuts if cut.stop > cut.start]
        rows = [0] * num_shards
        mine: list[_Unit] = []
        for unit in self._units:
            least = rows.index(min(rows))
            rows[least] += unit.stop - unit.start
            if least == shard:
                mine.append(unit)
        return mine

    # -- reading ------------------------------------------------------------------------------

    def _chunks(self, shard: int, num_shards: int) -> Iterator[_Rows]:
        for table, where in self._tables(shard, num_shards, self._columns()):
            rows = self._convert(table, where)
            if len(rows):
                yield rows

    def _tables(
        self, shard: int, num_shards: int, columns: list[str]
    ) -> Iterator[tuple[Any, Where]]:
        """This shard's record batches, each with the file rows it holds."""
        if self.format == "parquet":
            for unit in self._shard_units(shard, num_shards):
                yield from self._parquet_unit(unit, columns)
        else:
            for block, where in self._csv_shard(shard, num_shards, columns):
                yield self._typed(block, where), where

    def _csv_shard(
        self, shard: int, num_shards: int, columns: list[str]
    ) -> Iterator[tuple[Any, Where]]:
        """This shard's CSV blocks, as parsed text: its files, or its blocks of every file
        (the others' parsed, not converted)."""
        if len(self.files) >= num_shards:
            for index in range(shard, len(self.files), num_shards):
                yield from self._csv_blocks(self.files[index], columns)
            return
        blocks = (item for file in self.files for item in self._csv_blocks(file, columns))
        for number, item in enumerate(blocks):
            if number % num_shards == shard:
                yield item

    def _parquet_unit(self, unit: _Unit, columns: list[str]) -> Iterator[tuple[Any, Where]]:
        file = self.files[unit.file]
        reader = pq.ParquetFile(file, metadata=self._footer_of(unit.file))
        first = unit.first
        position = 0
        try:
            batches = reader.iter_batches(
                batch_size=READ_ROWS, row_groups=[unit.group], columns=columns, use_threads=False
            )
            while (batch := _decoded(batches, file, unit.group)) is not None:
                lo = max(unit.start - position, 0)
                hi = min(unit.stop - position, batch.num_rows)
                if hi > lo:
                    rows = np.arange(first + position + lo, first + position + hi, dtype=np.int64)
                    yield batch.slice(lo, hi - lo), Where(str(file), rows)
                position += batch.num_rows
                if position >= unit.stop:
                    break
        finally:
            reader.close()

    def _footer_of(self, index: int) -> Any:
        """The footer of file ``index``, read again only when this thread moves to another
        file (a thread reads its units in file order)."""
        last: tuple[int, Any] | None = getattr(self._footer, "last", None)
        if last is None or last[0] != index:
            last = (index, pq.read_metadata(self.files[index]))
            self._footer.last = last
        return last[1]

    def _parse_options(self) -> Any:
        return pacsv.ParseOptions(delimiter="\t" if self.format == "tsv" else ",")

    def _csv_blocks(
        self, file: Path, columns: list[str], *, typed: bool = True
    ) -> Iterator[tuple[Any, Where]]:
        """``file``'s blocks in order, parsed, each with its rows (0 is the line after the
        header); ``typed``: as the spec reads its columns (as text, :func:`convert_options`,
        which :meth:`_typed` makes Parquet's values), otherwise as pyarrow infers them."""
        if typed:
            options = convert_options(columns)
        else:
            options = pacsv.ConvertOptions(include_columns=columns, strings_can_be_null=True)
        row = 0
        try:
            with pacsv.open_csv(
                file,
                read_options=pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES),
                parse_options=self._parse_options(),
                convert_options=options,
            ) as stream:
                for block in stream:
                    rows = np.arange(row, row + block.num_rows, dtype=np.int64)
                    row += block.num_rows
                    yield block, Where(str(file), rows)
        except pa.ArrowInvalid as exc:
            raise TableError(f"{file}: after row {row}: {exc}") from None

    def _typed(self, block: Any, where: Where) -> Any:
        """A CSV block's text as the values Parquet would hold (:mod:`sniper.data._csv`):
        sparse columns stay text; dense and label columns become numbers, or a label of
        strings (as the first file's first block showed it) text with its null words null."""
        spec = self._spec
        text_labels = {n for n in self.label_names if pa.types.is_string(self._types[n])}
        arrays = []
        for name in block.schema.names:
            array = block.column(name)
            if name in text_labels:
                array = as_text(array)
            elif name in spec.dense or name in self.label_names:
                array = as_numbers(name, array, where)
            arrays.append(array)
        return pa.RecordBatch.from_arrays(arrays, names=block.schema.names)

    def _convert(self, table: Any, where: Where) -> _Rows:
        """One record batch as checked arrays (nulls, NaN, transforms: see the module doc)."""
        spec = self._spec
        table, where = self._drop_null_labels(table, where)
        size = table.num_rows
        columns = [label_values(lab, table.column(lab.column), where) for lab in self._labels]
        if len(columns) == 1:
            labels = columns[0]
        else:  # several labels, or none read: a column each
            labels = np.stack(columns, axis=1) if columns else np.empty((size, 0), np.float32)
        dense = np.empty((size, len(spec.dense)), dtype=np.float32)
        for index, name in enumerate(spec.dense):
            values = dense_values(name, table.column(name), spec.column(name), where)
            dense[:, index] = model_input(name, values, where)
        parts: dict[str, list[tuple[Ragged, NDArray[np.float32] | None]]] = {}
        for name in spec.sparse:
            column = spec.column(name)
            variable = spec.variable_of(name)
            ragged, kept = sparse_signs(variable, table.column(name), column)
            weights = None
            if column.weights:
                weights = bag_weights(
                    name, column.weights, table.column(column.weights), kept, where
                )
            parts.setdefault(variable, []).append((ragged, weights))
        sparse: dict[str, Ragged] = {}
        weights_of: dict[str, NDArray[np.float32]] = {}
        for variable, bags in parts.items():
            sparse[variable], merged = _merge(bags, size)
            if merged is not None:
                weights_of[variable] = merged
        return _Rows(labels, dense, sparse, weights_of)

    def _drop_null_labels(self, table: Any, where: Where) -> tuple[Any, Where]:
        """``table`` without its rows of a null label (``skip_null_labels``), or refused at the
        first; every row kept with ``optional_labels`` (see the class doc)."""
        spec = self._spec
        if self._keep_null_labels:
            return table, where
        valid = np.ones(table.num_rows, dtype=bool)
        for label in self.label_names:
            column = table.column(label)
            if column.null_count:
                valid &= column.is_valid().to_numpy(zero_copy_only=False)
        if valid.all():
            return table, where
        row = int(np.flatnonzero(~valid)[0])
        name = next(n for n in self.label_names if not table.column(n)[row].is_valid)
        null = f"{where.file}: row {where.row(row)}: label column {name!r} is null"
        if not spec.skip_null_labels:
            raise TableError(f"{null} (skip_null_labels = true in [features] drops such rows)")
        return table.filter(pa.array(valid)), Where(where.file, where.rows[valid])

    def _measure(self, names: tuple[str, ...]) -> dict[str, tuple[float, float]]:
        """Mean and standard deviation of each column over all the files (after ``fill``),
        read in one pass of those columns alone; a constant column gets std 1."""
        spec = self._spec
        moments = dict.fromkeys(names, (0, 0.0, 0.0))
        for table, where in self._tables(0, 1, list(names)):
            for name in names:
                plain = ColumnSpec(fill=spec.column(name).fill)
                values = dense_values(name, table.column(name), plain, where)
                moments[name] = _merged(moments[name], values)
        stats = {}
        for name, (count, mean, spread) in moments.items():
            variance = spread / count if count else 0.0
            std = float(np.sqrt(variance)) if variance > 1e-24 else 1.0
            if not np.isfinite(std):
                raise TableError(
                    f"column {name!r} cannot be standardized: the spread of its values "
                    'overflows float64; use transform = "log1p", or clip it first'
                )
            stats[name] = (mean, std)
        return stats


def _decoded(batches: Iterator[Any], file: Path, group: int) -> Any | None:
    """The next record batch of row group ``group`` of ``file``, or None at its end. A page
    that does not decompress or decode (a damaged file) is a :class:`TableError` naming the
    file and the group, on one line: pyarrow's error names neither, and some span lines."""
    try:
        return next(batches, None)
    except (pa.ArrowException, OSError) as exc:
        reason = " ".join(str(exc).split())
        raise TableError(f"{file}: row group {group} cannot be read: {reason}") from None


def _merged(
    moments: tuple[int, float, float], values: NDArray[np.float64]
) -> tuple[int, float, float]:
    """``(count, mean, sum of squared deviations)`` of what ``moments`` summed and ``values``
    (Chan, Golub and LeVeque's pairwise update): each chunk's deviations are taken from its own
    mean, so a column of large mean and small spread keeps its spread, where a sum of squares
    less the squared mean cancels it away (1e9 + N(0, 1) measured a std of 11, not 1)."""
    count, mean, spread = moments
    size = len(values)
    if size == 0:
        return moments
    with np.errstate(over="ignore"):  # an overflowing spread is refused by the caller
        chunk_mean = float(values.mean())
        chunk_spread = float(np.square(values - chunk_mean).sum())
    total = count + size
    delta = chunk_mean - mean
    return (
        total,
        mean + delta * size / total,
        spread + chunk_spread + delta * delta * count * size / total,
    )


def _merge(
    bags: list[tuple[Ragged, NDArray[np.float32] | None]], size: int
) -> tuple[Ragged, NDArray[np.float32] | None]:
    """The bags of columns sharing one variable, row by row: row ``b``'s signs of the first
    column, then the second's...; weights 1 for a column without a weights column."""
    if len(bags) == 1:
        return bags[0]
    signs = np.concatenate([ragged[0] for ragged, _ in bags])
    rows = np.concatenate([np.repeat(np.arange(size), np.diff(ragged[1])) for ragged, _ in bags])
    order = np.argsort(rows, kind="stable")
    lengths = np.bincount(rows, minlength=size).astype(np.int64)
    merged = None
    if any(w is not None for _, w in bags):
        weights = [w if w is not None else np.ones(len(r[0]), np.float32) for r, w in bags]
        merged = np.concatenate(weights)[order]
    return (signs[order], _offsets(lengths)), merged


def _offsets(lengths: NDArray[np.int64]) -> NDArray[np.int64]:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _same_type(kind: Any, first: Any, format: str) -> bool:
    """Whether two files' types of a column agree (CSV's guesses from a file's first block
    may differ by file, an integer's width, a float or a boolean: all are read as numbers,
    and agree there)."""
    if kind == first:
        return True
    numeric = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean)
    return format != "parquet" and any(t(kind) for t in numeric) and any(t(first) for t in numeric)
