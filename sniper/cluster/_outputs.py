"""Where a command's output may go: never onto or among the data it reads.

``sniper train``'s report and ``sniper predict``'s scores are written when the work is done. An
output that is the data file would replace the data; one in the data's directory (a glob's
included) would be read as data by the next run. Both are refused before any work, in one
line, by the same rule: an output the data's reader would take as data (a report beside a
Parquet table's files is not one).
"""

from __future__ import annotations

import fnmatch
import glob
import os
from pathlib import Path

__all__ = ["check_output"]


def check_output(
    target: Path, named: str, kind: str, data: tuple[str, ...], reader: str, what: str
) -> None:
    """Refuse an output that cannot be written once the work is done, or that lands on the
    data: ``target``'s directory must exist and be one (not a file), ``target`` must not be
    a directory, and it must lie apart from each of ``data`` (:func:`_check_apart`).
    ``named``: how the user named it (``--output x``); ``kind``: the file it is (``JSON``);
    ``reader`` reads the data and ``what`` is written."""
    parent = target.parent
    if parent.exists() and not parent.is_dir():
        raise ValueError(f"{named}: {parent} is a file, not a directory")
    if not parent.is_dir():
        raise ValueError(f"{named}: directory {parent} does not exist: create it first")
    if target.is_dir():
        raise ValueError(f"{named} is a directory: name the {kind} file to write")
    for each in data:
        _check_apart(target, each, named, reader, what)


def _check_apart(target: Path, data: str, named: str, reader: str, what: str) -> None:
    """Refuse writing ``target`` (``named``: how the user named it, ``--output x``) where
    ``data`` (a ``KIND:PATH`` value; synthetic data has no path) would read it: it is the
    data's file, it matches the data's glob, or it lies in the data's directory and is of the
    files a directory of that kind reads (``.parquet`` at any depth for Parquet, any file of
    the top level for the others).
    ``reader`` reads the data, and ``what`` is to be written elsewhere."""
    kind, colon, path = data.partition(":")
    if not colon or not path:
        return
    written = target.resolve()
    source = Path(path).resolve()
    if glob.has_magic(path):
        read = fnmatch.fnmatchcase(str(written), os.path.abspath(path))
    elif source.is_dir():
        # A Parquet directory reads .parquet files at any depth (nested ones refuse it);
        # the others read every file of their top level.
        if kind == "parquet":
            read = written.suffix == ".parquet" and source in written.parents
        else:
            read = written.parent == source
    else:
        read = written == source
    where = "the data file" if written == source else "in the data"
    if read:
        raise ValueError(f"{named} is {where} {reader} reads ({data}): write {what} elsewhere")
