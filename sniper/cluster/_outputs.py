"""Where a command's output may go: never onto or among the data it reads.

``sniper train``'s report and ``sniper predict``'s scores are written when the work is done. An
output that is the data file would replace the data; one in the data's directory (a glob's
included) would be read as data by the next run. Both are refused before any work, in one
line, by the same rule.
"""

from __future__ import annotations

import glob
from pathlib import Path

__all__ = ["check_apart_from_data"]


def check_apart_from_data(target: Path, data: str, named: str, reader: str, what: str) -> None:
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
