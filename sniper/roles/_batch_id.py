"""Batch ids: which hub numbered a batch, in which epoch, at which index.

One 64-bit id names a batch on every ps and in the trainer: ``hub << 48 | epoch << 32 |
index``. :class:`BatchId` is its only packer and unpacker. Hubs never hand out the same id, and
a batch keeps its index (so whether it is held out) in every epoch. The last hub number,
:data:`EVAL_HUB`, belongs to the trainer, which feeds an evaluation file's batches under it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EVAL_HUB", "MAX_HUBS", "BatchId"]

_INDEX_BITS = 32
_EPOCH_BITS = 16
_HUB_SHIFT = _INDEX_BITS + _EPOCH_BITS
EVAL_HUB = (1 << 16) - 1
"""The hub number of batches the trainer feeds from ``eval_data``."""
MAX_HUBS = EVAL_HUB
"""Hubs of one job: numbers 0 .. MAX_HUBS - 1."""


@dataclass(frozen=True)
class BatchId:
    """A batch's place: its hub, its epoch (wrapping at 2**16) and its index in the epoch."""

    hub: int
    epoch: int
    index: int

    def pack(self) -> int:
        """The 64-bit id sent on the wire."""
        if not 0 <= self.hub <= EVAL_HUB:
            raise ValueError(f"hub must be in [0, {EVAL_HUB}], got {self.hub}")
        if not 0 <= self.index < 1 << _INDEX_BITS:
            raise ValueError(f"a batch index must be in [0, 2**32), got {self.index}")
        epoch = self.epoch % (1 << _EPOCH_BITS)
        return self.hub << _HUB_SHIFT | epoch << _INDEX_BITS | self.index

    @classmethod
    def unpack(cls, batch_id: int) -> BatchId:
        """The place of a 64-bit id."""
        return cls(
            batch_id >> _HUB_SHIFT,
            (batch_id >> _INDEX_BITS) & ((1 << _EPOCH_BITS) - 1),
            batch_id & ((1 << _INDEX_BITS) - 1),
        )
