"""Batch ids: which hub numbered a batch, in which epoch, at which index.

One 64-bit id names a batch on every ps and in the trainer: ``hub << 48 | epoch << 32 |
index``. Hubs never hand out the same id, and a batch keeps its index (so whether it is held
out) in every epoch. The last hub number, :data:`EVAL_HUB`, belongs to the trainer, which feeds
an evaluation file's batches under it.
"""

from __future__ import annotations

__all__ = ["EVAL_HUB", "MAX_HUBS", "batch_index", "pack_batch_id"]

_INDEX_BITS = 32
_EPOCH_BITS = 16
_HUB_SHIFT = _INDEX_BITS + _EPOCH_BITS
EVAL_HUB = (1 << 16) - 1
"""The hub number of batches the trainer feeds from ``eval_data``."""
MAX_HUBS = EVAL_HUB
"""Hubs of one job: numbers 0 .. MAX_HUBS - 1."""


def pack_batch_id(hub: int, epoch: int, index: int) -> int:
    """The id of batch ``index`` of ``epoch`` from ``hub`` (epochs wrap at 2**16)."""
    if not 0 <= hub <= EVAL_HUB:
        raise ValueError(f"hub must be in [0, {EVAL_HUB}], got {hub}")
    if not 0 <= index < 1 << _INDEX_BITS:
        raise ValueError(f"a batch index must be in [0, 2**32), got {index}")
    epoch %= 1 << _EPOCH_BITS
    return hub << _HUB_SHIFT | epoch << _INDEX_BITS | index


def batch_index(batch_id: int) -> int:
    """The batch's index in its epoch."""
    return batch_id & ((1 << _INDEX_BITS) - 1)
