"""``sniper predict``: every example of a data file scored by a job checkpoint's model, to
Parquet (CSV for an output named ``.csv``, TSV for ``.tsv``).

The scoring is ``sniper eval``'s (:func:`~sniper.cluster._eval.score_checkpoint`): the same
ps restored from the checkpoint, the same model, the same batches in the data's order. Each
batch is written as it is scored, so the output's size does not bound the data's. The file
holds, one row per example in the data's order:

- ``row``: the example's index in the data (int64), to join the scores back to it;
- each label column the data has (float32; ``label`` for today's readers), so the scores can
  be evaluated without the data: null for a row whose label is null (such a row is scored,
  not refused nor dropped, ``skip_null_labels`` or not); those a user's table has where it
  lacks some or all of them (new events whose outcome is not known yet are scored all the
  same);
- the columns ``--keep`` names, as the data has them (ids to join the scores on);
- ``<label>_score``: the model's probability for each label the model predicts (float32).

It is written to ``<output>.partial`` and renamed when complete: a failed run leaves no file
that looks whole. An output named ``.csv`` or ``.tsv`` is written as such (a header row, then
the rows; a kept list column has no such form and is refused before a row is written): a
``scores.csv`` that held Parquet would be read as garbage by whatever expected text.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from numpy.typing import NDArray

from sniper.cluster._config import TrainConfig
from sniper.cluster._eval import score_checkpoint
from sniper.cluster._outputs import check_output
from sniper.data import Reader, TableReader
from sniper.roles import DataEvaluator, Predictor

__all__ = ["run_predict", "score_columns"]


def score_columns(labels: tuple[str, ...]) -> list[str]:
    """The score column of each label, in the model's output order."""
    return [f"{label}_score" for label in labels]


class _Kept:
    """The columns ``--keep`` names, handed out as many rows at a time as each batch scored
    (the reader's chunks and the batches are cut at other rows)."""

    def __init__(self, tables: Iterator[pa.Table]) -> None:
        self._tables = tables
        self._pending: list[pa.Table] = []
        self._rows = 0

    def take(self, size: int) -> pa.Table:
        """The next ``size`` rows."""
        while self._rows < size:
            table = next(self._tables)
            self._pending.append(table)
            self._rows += table.num_rows
        whole = pa.concat_tables(self._pending)
        rest = whole.slice(size)
        self._pending, self._rows = [rest], rest.num_rows
        return whole.slice(0, size)


def _kept(reader: Reader, keep: tuple[str, ...], data: str) -> _Kept | None:
    """The rows of ``keep``'s columns of ``reader`` (None where nothing is kept)."""
    if not keep:
        return None
    if not isinstance(reader, TableReader):
        raise ValueError(
            f"--keep names columns of a table of your own (parquet:, csv:, tsv:), not of {data!r}"
        )
    return _Kept(reader.rows_of(keep))


def _table(
    row: int,
    read: tuple[str, ...],
    labels: tuple[str, ...],
    truth: NDArray[Any],
    probs: NDArray[Any],
    kept: _Kept | None,
) -> pa.Table:
    """A batch's rows from ``row`` on: the data's label columns ``read`` (``truth``, NaN where
    a label is null, written as null; none for data without labels), the columns ``--keep``
    names (``kept``) and the scores of the model's ``labels`` (``probs``)."""
    size = len(truth)
    scores = probs.reshape(size, -1).astype(np.float32, copy=False)
    truths = truth.reshape(size, len(read)).astype(np.float32, copy=False)
    columns: dict[str, Any] = {"row": pa.array(np.arange(row, row + size, dtype=np.int64))}
    columns |= {
        name: pa.array(truths[:, i], mask=np.isnan(truths[:, i])) for i, name in enumerate(read)
    }
    if kept is not None:
        rows = kept.take(size)
        columns |= {name: rows.column(name) for name in rows.column_names}
    columns |= {name: pa.array(scores[:, i]) for i, name in enumerate(score_columns(labels))}
    return pa.table(columns)


def _check_keep(keep: tuple[str, ...], written: tuple[str, ...]) -> None:
    """Refuse a column ``--keep`` names twice, or one the output has already."""
    for name in keep:
        if name in written:
            raise ValueError(
                f"--keep {name}: the output has a column {name!r} already ({', '.join(written)})"
            )
    if len(set(keep)) < len(keep):
        raise ValueError(f"--keep names a column twice: {', '.join(keep)}")


_TEXT_FORMATS = {".csv": ("CSV", ","), ".tsv": ("TSV", "\t")}
"""The text formats an output's name can ask for, by suffix (name, delimiter); any other name
is Parquet."""


def _format(suffix: str) -> str:
    """The format an output named ``suffix`` is written in (``CSV``, ``TSV``, ``Parquet``)."""
    return _TEXT_FORMATS.get(suffix.lower(), ("Parquet", ""))[0]


def _writer(path: Path, suffix: str, schema: pa.Schema) -> pq.ParquetWriter | pacsv.CSVWriter:
    """The writer of an output named ``suffix``: CSV for ``.csv``, TSV for ``.tsv``, else
    Parquet. Text has no form for a list column (a kept ``list<string>``): refused, naming
    it."""
    if suffix.lower() not in _TEXT_FORMATS:
        return pq.ParquetWriter(path, schema)
    kind, delimiter = _TEXT_FORMATS[suffix.lower()]
    nested = [f.name for f in schema if pa.types.is_nested(f.type)]
    if nested:
        raise ValueError(
            f"--keep {nested[0]}: a {schema.field(nested[0]).type} column has no "
            f"{kind} form; write Parquet (--output NAME.parquet) or keep it out"
        )
    return pacsv.CSVWriter(path, schema, write_options=pacsv.WriteOptions(delimiter=delimiter))


def run_predict(
    checkpoint: str, data: str, output: str, config: TrainConfig, keep: tuple[str, ...] = ()
) -> int:
    """Write the scores of ``data`` by the model of ``checkpoint`` to the Parquet file
    ``output`` (``config``: see :func:`~sniper.cluster._eval.score_checkpoint`), with the
    data's columns ``keep`` (a user's table's: ids to join the scores on); returns 0."""
    target = Path(output)
    partial = target.with_name(target.name + ".partial")

    named = f"--output {target}"
    check_output(target, named, _format(target.suffix), (data,), "predict", "the scores")

    async def write(evaluator: DataEvaluator, predict: Predictor, step: int) -> int:
        del step
        labels = tuple(predict.model.inputs.labels)
        read = evaluator.reader.label_names
        _check_keep(keep, ("row", *read, *score_columns(labels)))
        kept = _kept(evaluator.reader, keep, data)
        writer: pq.ParquetWriter | pacsv.CSVWriter | None = None
        rows = 0
        try:
            async for batch, probs in evaluator.predictions(predict):
                table = _table(rows, read, labels, batch.labels, probs, kept)
                if writer is None:
                    writer = _writer(partial, target.suffix, table.schema)
                writer.write_table(table)
                rows += batch.batch_size
        finally:
            if writer is not None:
                writer.close()
        if writer is None:
            raise ValueError(f"data {data!r} holds no examples")
        return rows

    try:
        job, rows = score_checkpoint(checkpoint, data, config, write, optional_labels=True)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    print(f"wrote {rows:,} scores of {data} by the model of {job.directory} (step {job.step})")
    print(f"to {target}")
    return 0
