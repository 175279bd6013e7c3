"""Reading back the batches written for a TorchRec peer: each feature's ids in TorchRec's
jagged layout (feature by feature, each feature's examples in order: what
``KeyedJaggedTensor.from_lengths_sync`` reads)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sniper.data import Batch


def jagged_chunks(
    written: Mapping[str, NDArray[Any]], index: int, batch: Batch, names: Sequence[str]
) -> Iterator[tuple[str, int, NDArray[np.uint64], NDArray[np.int64]]]:
    """Batch ``index`` of ``written`` against the ``batch`` it was written from: checks its
    lengths, then yields each feature's ``(name, table rows, signs, ids)``; once every feature
    is read, checks that the features' ids were all of the batch's values."""
    values, lengths = written[f"values_{index}"], written[f"lengths_{index}"]
    assert lengths.tolist() == [int(x) for n in names for x in np.diff(batch.sparse[n][1])]
    start = 0
    for name, rows in zip(names, written["rows"], strict=True):
        signs = batch.sparse[name][0]
        yield name, int(rows), signs, values[start : start + len(signs)]
        start += len(signs)
    assert start == len(values) == int(lengths.sum())
