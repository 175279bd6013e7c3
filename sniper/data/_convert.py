"""``sniper data convert``: turn Criteo TSV or synthetic data into Parquet files of batches."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal, get_args

from sniper.data._open import open_reader
from sniper.data._parquet import write_parquet

__all__ = ["CONVERT_KINDS", "ConvertKind", "convert"]

ConvertKind = Literal["criteo", "synthetic"]
CONVERT_KINDS: tuple[str, ...] = get_args(ConvertKind)
"""The kinds of source :func:`convert` reads."""


def convert(
    kind: ConvertKind,
    source: str | Path | None,
    out: str | Path | Sequence[str | Path],
    *,
    batch_size: int | None = None,
    num_batches: int | None = None,
    scale: float = 1.0,
    seed: int = 0,
) -> int:
    """Write ``source`` to the Parquet file ``out`` as batches; return the rows written.

    - ``kind="criteo"``: ``source`` is a Criteo TSV file; ``batch_size`` defaults to 1024;
      ``num_batches`` (optional) stops early; ``scale`` and ``seed`` do not apply.
    - ``kind="synthetic"``: ``source`` is a workload name or JSON file (default ``seed_ctr``);
      ``num_batches`` is required (the generator is endless); ``batch_size`` defaults to the
      workload's; ``scale`` and ``seed`` are :class:`~sniper.data.SyntheticCtr`'s.

    ``out`` may be several files (synthetic only): file ``i`` holds epoch ``i`` of the one
    generator, ``num_batches`` each, and the count returned is theirs together. Each file then
    holds other examples of the same planted model: the same seed for each wrote the same
    examples to each, and a seed per file would plant another model in each. The first file
    is what ``out`` alone writes, and converting again writes the same files.

    Each file appears only once complete. Errors a user can fix raise ``ValueError``
    (including :class:`~sniper.data.CriteoFormatError`), ``LookupError`` or ``OSError``.
    """
    outs = [out] if isinstance(out, str | Path) else list(out)
    seen: set[Path] = set()
    for path in outs:
        if Path(path).resolve() in seen:
            raise ValueError(f"{path} is named twice: each file to write must be named once")
        seen.add(Path(path).resolve())
    if kind == "criteo":
        if source is None:
            raise ValueError("criteo conversion needs the TSV file to read as its source")
        if scale != 1.0 or seed != 0:
            raise ValueError("scale and seed apply to synthetic data only, not to criteo")
        if len(outs) > 1:
            raise ValueError(f"criteo conversion writes one file, not {len(outs)}")
        data, workload = f"criteo:{source}", "seed_ctr"
    elif kind == "synthetic":
        data, workload = "synthetic", str(source or "seed_ctr")
    else:
        raise LookupError(f"unknown source kind {kind!r}; valid kinds: {', '.join(CONVERT_KINDS)}")
    if not outs:
        raise ValueError("convert needs a file to write")
    reader = open_reader(
        data,
        workload=workload,
        scale=scale,
        num_batches=num_batches,
        batch_size=batch_size,
        seed=seed,
    )
    return sum(write_parquet(reader, path, epoch=epoch) for epoch, path in enumerate(outs))
