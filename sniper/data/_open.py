"""Choose a reader by name: what ``--data`` flags and config files say."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sniper.data._criteo import CriteoTsv
from sniper.data._features import FeatureSpec
from sniper.data._files import TABLE_KINDS, FileSet, expand_paths, table_files
from sniper.data._parquet import NonfiniteDense, ParquetReader
from sniper.data._reader import Reader
from sniper.data._synthetic import SyntheticCtr
from sniper.data._table_reader import TableReader
from sniper.data._workload import Workload, load_workload

__all__ = ["DATA_KINDS", "open_reader"]

DATA_KINDS = ("synthetic", "criteo:PATH", "parquet:PATH", "csv:PATH", "tsv:PATH")
"""The forms of :func:`open_reader`'s ``data``."""
DEFAULT_BATCH_SIZE = 1024


def open_reader(
    data: str,
    *,
    workload: str | Path | Workload = "seed_ctr",
    scale: float = 1.0,
    num_batches: int | None = None,
    batch_size: int | None = None,
    seed: int = 0,
    features: FeatureSpec | Mapping[str, Any] | None = None,
    nonfinite_dense: NonfiniteDense = "error",
    optional_labels: bool = False,
) -> Reader:
    """The reader that ``data`` names: ``synthetic``, ``criteo:PATH``, ``parquet:PATH``,
    ``csv:PATH`` or ``tsv:PATH``.

    - ``synthetic``: :class:`SyntheticCtr` of ``workload`` (a built-in name, a JSON file or a
      :class:`~sniper.data._workload.Workload`) with ``scale`` and ``seed``; ``num_batches`` batches
      per epoch (required); ``batch_size`` defaults to the workload's.
    - ``criteo:PATH``: :class:`CriteoTsv` (a ``.gz`` is decompressed); ``batch_size``
      defaults to 1024.
    - ``parquet:PATH``: :class:`ParquetReader`; ``batch_size`` defaults to the first file's.
    - With ``features`` (a :class:`FeatureSpec` or its ``[features]`` table), ``parquet:PATH``
      is a user's table of any schema, and ``csv:PATH`` or ``tsv:PATH`` (a header row, then
      one example a line) are read too, as one :class:`TableReader` of all the files;
      ``batch_size`` defaults to 1024. CSV and TSV need ``features``. With
      ``optional_labels``, such a table that lacks label columns is read with those it has
      (or none), and a null label is read as NaN (see :class:`TableReader`), rather than
      refused.
      ``nonfinite_dense`` says what a NaN or Inf dense feature of sniper's own Parquet gets
      (Criteo's dense features are parsed from integers, and synthetic ones generated: both
      always finite).

    ``PATH`` is a file, a directory (its non-hidden files; for Parquet, its ``*.parquet``
    files) or a glob; several files are read in sorted order as one :class:`FileSet`, which
    also decides how hubs split them. For the files, ``num_batches`` (optional) stops each
    file early, and ``workload``,
    ``scale`` and ``seed`` do not apply: they are accepted and ignored, so one configuration
    can name any kind of data. An unknown kind raises ``LookupError`` listing the valid ones.
    """
    kind, colon, path = data.partition(":")
    if features and kind in TABLE_KINDS and colon:
        return _open_table(kind, path, features, batch_size, num_batches, optional_labels)
    if kind in ("csv", "tsv") and colon:
        raise ValueError(
            f"{kind} data needs a [features] table: which column is the label, which are "
            "sparse and which dense"
        )
    if kind == "synthetic" and not colon:
        if num_batches is None:
            raise ValueError("synthetic data is endless: say how many batches (num_batches)")
        return SyntheticCtr(
            workload if isinstance(workload, Workload) else load_workload(workload),
            num_batches=num_batches,
            scale=scale,
            seed=seed,
            batch_size=batch_size,
        )
    if kind in ("criteo", "parquet") and colon:
        if not path:
            raise ValueError(f"{kind} data needs a file: {kind}:PATH")
        if kind == "criteo":
            files = expand_paths(path, "Criteo TSV")
        else:
            files = expand_paths(path, "Parquet", ".parquet")
        readers: list[Reader] = []
        for file in files:
            if kind == "criteo":
                size = batch_size or DEFAULT_BATCH_SIZE
                readers.append(CriteoTsv(file, batch_size=size, max_batches=num_batches))
            else:
                parquet = ParquetReader(
                    file,
                    batch_size=batch_size,
                    max_batches=num_batches,
                    nonfinite_dense=nonfinite_dense,
                )
                batch_size = parquet.batch_size  # every file in batches of the first's size
                readers.append(parquet)
        if len(readers) == 1:
            return readers[0]
        return FileSet(readers, split_by_file=kind == "criteo")
    raise LookupError(f"unknown data {data!r}; valid forms: {', '.join(DATA_KINDS)}")


def _open_table(
    kind: str,
    path: str,
    features: FeatureSpec | Mapping[str, Any],
    batch_size: int | None,
    num_batches: int | None,
    optional_labels: bool,
) -> TableReader:
    spec = features if isinstance(features, FeatureSpec) else FeatureSpec.from_table(features)
    return TableReader(
        table_files(kind, path),
        spec,
        format="parquet" if kind == "parquet" else "csv" if kind == "csv" else "tsv",
        batch_size=batch_size or DEFAULT_BATCH_SIZE,
        max_batches=num_batches,
        optional_labels=optional_labels,
    )
