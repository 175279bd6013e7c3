"""The interface every data source implements, and the sharding rule they share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from sniper.data._batch import Batch
from sniper.data._checks import check_int

__all__ = ["Reader", "check_stream"]


@runtime_checkable
class Reader(Protocol):
    """A source of :class:`Batch` es for hubs (signs) and trainers (labels, dense features).

    Contract of :meth:`batches`:

    - **Deterministic.** The same arguments yield the same batches, in the same order, on any
      machine, so a restarted hub replays exactly what it sent before.
    - **Sharded by batch.** The source's batches are numbered 0, 1, 2, ... within an epoch;
      shard ``k`` of ``n`` yields batches ``k, k + n, k + 2n, ...``. The ``n`` shards together
      yield every batch exactly once, so ``n`` hubs can split one input without talking.
    - **Epochs.** A file yields the same batches in every epoch; a generator yields a fresh
      stream per epoch (same distribution, different draws).
    - Every batch has ``batch_size`` examples except possibly the last one of a finite source,
      and carries every name of :attr:`variables` in ``sparse``, in that order, and
      ``len(label_names)`` label columns.
    """

    @property
    def variables(self) -> tuple[str, ...]:
        """Names of the sparse variables, in the order batches list them."""
        ...

    @property
    def dense_features(self) -> int:
        """Dense features per example (columns of :attr:`Batch.dense`)."""
        ...

    @property
    def label_names(self) -> tuple[str, ...]:
        """The labels' names, one per column of :attr:`Batch.labels` (``("label",)`` for the
        ``[batch_size]`` labels of one): what a model is built to predict."""
        ...

    @property
    def batch_size(self) -> int:
        """Examples per batch."""
        ...

    def batches(self, *, epoch: int = 0, shard: int = 0, num_shards: int = 1) -> Iterator[Batch]:
        """Yield shard ``shard`` of ``num_shards`` of epoch ``epoch`` (see the class doc)."""
        ...


def check_stream(epoch: int, shard: int, num_shards: int) -> None:
    """Validate the arguments of :meth:`Reader.batches`; the error names the argument."""
    check_int("epoch", epoch, minimum=0)
    check_int("num_shards", num_shards)
    check_int("shard", shard, minimum=0)
    if shard >= num_shards:
        raise ValueError(f"shard must be in [0, num_shards={num_shards}), got {shard}")
