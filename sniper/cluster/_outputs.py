"""Where a command's output may go: never onto or among the data it reads.

``sniper train``'s report and ``sniper predict``'s scores are written when the work is done. An
output that is the data file would replace the data; one in the data's directory (a glob's
included) would be read as data by the next run. Both are refused before any work, in one
line, by the same rule.
"""

from __future__ import annotations

import glob
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
    ``data`` (a ``KIND:PATH`` value; synthetic data has no path) lies: ``reader`` reads it,
    and ``what`` is to be written elsewhere."""
    _, colon, path = data.partition(":")
    if not colon or not path:
        return
    source = Path(path).parent.resolve() if glob.has_magic(path) else Path(path).resolve()
    written = target.resolve()
    if written == source or (source.is_dir() and source in written.parents):
        where = "the data file" if written == source else "in the data"
        raise ValueError(f"{named} is {where} {reader} reads ({data}): write {what} elsewhere")
