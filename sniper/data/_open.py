"""Choose a reader by name: what ``--data`` flags and config files say."""

from __future__ import annotations

from pathlib import Path

from sniper._workload import Workload, load_workload
from sniper.data._criteo import CriteoTsv
from sniper.data._parquet import ParquetReader
from sniper.data._reader import Reader
from sniper.data._synthetic import SyntheticCtr

__all__ = ["DATA_KINDS", "open_reader"]

DATA_KINDS = ("synthetic", "criteo:PATH", "parquet:PATH")
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
) -> Reader:
    """The reader that ``data`` names: ``synthetic``, ``criteo:PATH`` or ``parquet:PATH``.

    - ``synthetic``: :class:`SyntheticCtr` of ``workload`` (a built-in name, a JSON file or a
      :class:`~sniper._workload.Workload`) with ``scale`` and ``seed``; ``num_batches`` batches
      per epoch (required); ``batch_size`` defaults to the workload's.
    - ``criteo:PATH``: :class:`CriteoTsv`; ``batch_size`` defaults to 1024.
    - ``parquet:PATH``: :class:`ParquetReader`; ``batch_size`` defaults to the file's.

    For the files, ``num_batches`` (optional) stops each epoch early, and ``workload``,
    ``scale`` and ``seed`` do not apply: they are accepted and ignored, so one configuration
    can name any kind of data. An unknown kind raises ``LookupError`` listing the valid ones.
    """
    kind, colon, path = data.partition(":")
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
            return CriteoTsv(
                path, batch_size=batch_size or DEFAULT_BATCH_SIZE, max_batches=num_batches
            )
        return ParquetReader(path, batch_size=batch_size, max_batches=num_batches)
    raise LookupError(f"unknown data {data!r}; valid forms: {', '.join(DATA_KINDS)}")
