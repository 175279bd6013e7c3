"""Inputs of several files: a path, a directory or a glob, read as one :class:`Reader`.

A user's data is rarely one file: Criteo's release is one TSV per day, and a Parquet dataset is
a directory of part files. :func:`expand_paths` turns what a config names into a sorted list of
files, and :class:`FileSet` reads them as one input with the :class:`Reader` contract.

How several hubs split a file set (each example read exactly once per epoch):

- **By file**, when the files cannot be read in part cheaply (Criteo TSV, which must be parsed
  from the start) and there are at least as many files as hubs: hub ``k`` of ``n`` reads files
  ``k, k + n, ...`` whole.
- **By batch** otherwise: in file ``i``, hub ``k`` takes the batches ``j`` with
  ``(i + j) % n == k``. A Parquet file reads only the row groups of its hub's batches; the
  rotation by ``i`` keeps small files from all landing on hub 0.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator, Sequence
from pathlib import Path

from sniper.data._batch import Batch
from sniper.data._reader import Reader, check_stream

__all__ = ["TABLE_KINDS", "FileSet", "expand_paths", "table_files"]

TABLE_KINDS = ("parquet", "csv", "tsv")
"""The formats of a user's table, the ``KIND`` of its ``KIND:PATH``."""


def expand_paths(pattern: str | Path, kind: str, suffix: str = "") -> list[Path]:
    """The files ``pattern`` names, sorted: itself, a directory's files, or a glob's matches.

    In a directory, only files whose names end with ``suffix`` count (``.parquet``), and never
    hidden ones (``.x``), markers (``_SUCCESS``, ``_metadata``: Spark and Hadoop write them
    beside their part files, and pyarrow's datasets skip them too) nor ``*.partial`` files that
    a writer has not finished. A directory whose subdirectories hold such files too (a Hive
    layout's ``date=2024-01-02/``: of ``suffix``, or, with none, of a suffix its own files
    have) is refused, naming one: its files alone would train on part of the table without a
    word. A checkpoint directory kept in a data directory holds no such file. A glob's ``**``
    spans any depth of directories. An empty list is an error: ``FileNotFoundError`` naming
    ``kind`` and the pattern.
    """
    text = str(pattern)
    path = Path(text)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if _is_data_file(p, suffix))
        # The nested files that count: of the kind's suffix, else of the top level's own
        # (part-0.csv: *.csv). A checkpoint kept in the data's directory holds none.
        suffixes = {suffix} if suffix else {p.suffix for p in files if p.suffix}
        if (nested := _nested_data_file(path, suffixes)) is not None:
            ending = nested.suffix
            raise ValueError(
                f"{kind} directory {text!r} has {ending} files in subdirectories ({nested}), "
                f"which its own files leave out: name every one with a glob, "
                f"{str(path / '**' / f'*{ending}')!r}, or the top level's alone with "
                f"{str(path / f'*{ending}')!r}"
            )
        if not files:
            what = f"{suffix} files" if suffix else "files"
            raise FileNotFoundError(f"{kind} directory {text!r} holds no {what}")
        return files
    if glob.has_magic(text):
        files = sorted(p for p in map(Path, glob.glob(text, recursive=True)) if _matched(p, text))
        if not files:
            raise FileNotFoundError(f"{kind} pattern {text!r} matches no file")
        return files
    raise FileNotFoundError(f"{kind} file {text!r} does not exist")


def table_files(kind: str, path: str) -> list[Path]:
    """The files of a user's table ``kind:path`` (``kind`` of :data:`TABLE_KINDS`), as
    :func:`expand_paths` finds them: in a directory, a Parquet table's ``*.parquet`` files,
    a CSV or TSV table's every file. What training reads, and ``sniper data inspect``."""
    if not path:
        raise ValueError(f"{kind} data needs a file: {kind}:PATH")
    if kind == "parquet":
        return expand_paths(path, "Parquet", ".parquet")
    return expand_paths(path, kind.upper())


def _matched(path: Path, pattern: str) -> bool:
    """Whether a glob's match is data: a file, below no hidden or marker directory that the
    pattern's wildcards reached (``**`` walks into ``_temporary/`` too)."""
    fixed = Path(pattern).parts
    depth = next((i for i, part in enumerate(fixed) if glob.has_magic(part)), len(fixed))
    spanned = path.parts[depth:-1]
    return path.is_file() and not any(part.startswith((".", "_")) for part in spanned)


def _nested_data_file(directory: Path, suffixes: set[str]) -> Path | None:
    """A data file (as :func:`_is_data_file` tells) ending with one of ``suffixes`` in a
    subdirectory of ``directory``, at any depth, if there is one; hidden and marker
    directories (``.x``, ``_temporary``, where a writer keeps what it has not committed) are
    not looked into."""
    if not suffixes:
        return None
    for child in sorted(directory.iterdir()):
        if not child.is_dir() or child.name.startswith((".", "_")):
            continue
        for file in sorted(child.iterdir()):
            if _is_data_file(file, "") and file.suffix in suffixes:
                return file
        if (deeper := _nested_data_file(child, suffixes)) is not None:
            return deeper
    return None


def _is_data_file(path: Path, suffix: str) -> bool:
    name = path.name
    return (
        path.is_file()
        and not name.startswith((".", "_"))
        and not name.endswith(".partial")
        and name.endswith(suffix)
    )


class FileSet:
    """Several readers of one format as one :class:`~sniper.data.Reader` (see module doc).

    Every file must hold the same variables, in the same order, the same number of dense
    features and the same labels; the constructor names the first file that differs from the
    first one.
    """

    def __init__(self, readers: Sequence[Reader], *, split_by_file: bool) -> None:
        """``split_by_file``: whether hubs may split by whole files (see the module doc)."""
        if not readers:
            raise ValueError("a file set needs at least one file")
        first = readers[0]
        for reader in readers[1:]:
            if reader.variables != first.variables:
                raise ValueError(
                    f"{reader!r} holds variables {_names(reader.variables)}, but {first!r} "
                    f"holds {_names(first.variables)}: every file of an input must agree"
                )
            if reader.dense_features != first.dense_features:
                raise ValueError(
                    f"{reader!r} has {reader.dense_features} dense features, but {first!r} "
                    f"has {first.dense_features}: every file of an input must agree"
                )
            if reader.label_names != first.label_names:
                raise ValueError(
                    f"{reader!r} has labels {_names(reader.label_names)}, but {first!r} has "
                    f"{_names(first.label_names)}: every file of an input must agree"
                )
        self.readers = tuple(readers)
        self._split_by_file = split_by_file

    @property
    def variables(self) -> tuple[str, ...]:
        return self.readers[0].variables

    @property
    def dense_features(self) -> int:
        return self.readers[0].dense_features

    @property
    def label_names(self) -> tuple[str, ...]:
        return self.readers[0].label_names

    @property
    def batch_size(self) -> int:
        return self.readers[0].batch_size

    def batches(self, *, epoch: int = 0, shard: int = 0, num_shards: int = 1) -> Iterator[Batch]:
        """This shard's batches of every file, files in order (see the module doc)."""
        check_stream(epoch, shard, num_shards)
        by_file = self._split_by_file and len(self.readers) >= num_shards
        for i, reader in enumerate(self.readers):
            if by_file:
                if i % num_shards == shard:
                    yield from reader.batches(epoch=epoch)
            else:
                part = (shard - i) % num_shards
                yield from reader.batches(epoch=epoch, shard=part, num_shards=num_shards)

    def __repr__(self) -> str:
        return f"FileSet({len(self.readers)} files, first {self.readers[0]!r})"


def _names(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:5])
    return shown + (f" ... ({len(names)} in all)" if len(names) > 5 else "")
