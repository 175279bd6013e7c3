"""The interface of an embedding store and the values it returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sniper.store._pointers import address

__all__ = ["EmbeddingStore", "ShardedBatch", "TableExport", "TableStatistics"]


@dataclass(frozen=True)
class TableStatistics:
    """Counters of one table since it was created (summed over its shards)."""

    rows: int
    """Rows currently held."""
    capacity: int
    """The most rows the table will ever hold."""
    inserts: int
    """Rows created for signs that were not held (first sight, or back after eviction)."""
    evictions: int
    """Rows taken back by CLOCK eviction to make room for a new sign."""
    hits: int
    """Sign occurrences (lookups and pushes) that found their row."""
    misses: int
    """Sign occurrences that found no row (then inserted, or rejected by admission)."""
    admitted: int
    """Misses that passed the admission filter (equal to inserts when it is on)."""
    rejected: int
    """Misses the admission filter held back: they read as zeros."""
    dropped_gradients: int
    """Gradients discarded because their sign had no row (not admitted)."""
    nonfinite_updates: int
    """Row updates the optimizer would have made NaN or Inf (a finite gradient too large for
    the row's state): the row kept its values."""
    bytes: int
    """Memory of all preallocated arrays: weights, optimizer state, index, CLOCK, sketch."""
    shards: int
    """Number of shards."""


@dataclass(frozen=True)
class TableExport:
    """Every row of a table as arrays: what a checkpoint stores."""

    signs: NDArray[np.uint64]
    """``[n]`` the sign of each row."""
    weights: NDArray[np.float32]
    """``[n, dim]`` the rows."""
    state: NDArray[np.float32]
    """``[n, slots, dim]`` the optimizer state (``slots`` may be 0)."""
    steps: NDArray[np.int32]
    """``[n]`` per-row optimizer step counts (zeros for optimizers without one)."""


class RowMap(NamedTuple):
    """The rows one shard of a batch was mapped to, kept with the batch for what comes next.

    Pinned (``seq`` > 0, the shard's pending number it holds): mapped when the batch was fed,
    and no eviction can give these rows to other signs until the batch is pushed or released:
    the lookup gathers them and the push applies to them without probing the index again.
    Unpinned (``seq`` 0): mapped by a lookup, and valid for the push only while the shard's
    eviction count is still ``evictions`` (eviction is the only way a row changes owner).
    """

    evictions: int
    rows: NDArray[np.int64]
    seq: int
    at: int
    """Where ``rows`` starts: what a grouped kernel reads it by (found once per mapping)."""

    @property
    def pinned(self) -> bool:
        return self.seq > 0


CLOSED = RowMap(-1, np.empty(0, dtype=np.int64), 0, 0)
"""The mark of a shard whose batch was pushed or released: nothing maps or pins it again."""


class ShardedBatch:
    """A ragged batch of one variable, partitioned by shard so each shard is a separate task.

    Shard ``s``'s signs are ``signs[shard_offsets[s, 0]:shard_offsets[s, -1]]`` and example
    ``b``'s part of them is ``signs[shard_offsets[s, b]:shard_offsets[s, b + 1]]``.

    A plain class with its sizes found once at construction, not a frozen dataclass with
    properties: a ps makes one per variable per FeedSample and reads its sizes in every pin,
    lookup and push, and those reads were a tenth of a small variable's Python overhead (see
    CHANGELOG.md, 2026-11-24, ad5e98d). Treat it as immutable.
    """

    __slots__ = (
        "_offsets_at",
        "_views",
        "bags",
        "batch_size",
        "num_shards",
        "row_cache",
        "scales",
        "shard_offsets",
        "shard_sizes",
        "signs",
        "weights",
    )

    def __init__(
        self,
        signs: NDArray[np.uint64],
        shard_offsets: NDArray[np.int64],
        *,
        weights: NDArray[np.float32] | None = None,
        scales: NDArray[np.float32] | None = None,
        bags: NDArray[np.int64] | None = None,
    ) -> None:
        self.signs = signs
        self.shard_offsets = shard_offsets
        self.weights = weights
        """Each sign's weight as fed (a weighted bag), in the order of :attr:`signs`; None:
        unweighted. Kept to move the batch (:meth:`unsplit`); the kernels read :attr:`scales`."""
        self.scales = scales
        """Each sign's factor in its pool, in the order of :attr:`signs`
        (:func:`~sniper.store._kernels.bag_scales`: its weight over its bag's divisor); None:
        a plain sum, pooled and pushed by the kernels of an unweighted batch."""
        self.bags = bags
        """An unpooled batch (pooling ``none``): the ``[batch + 1]`` offsets of its examples,
        as fed. Its signs were split as bags of one each, so a lookup answers one row per
        value, ``[values, dim]``, and a push takes one gradient per value."""
        self.num_shards: int = shard_offsets.shape[0]
        """Shards the batch was split into (the table's shard count)."""
        self.batch_size: int = shard_offsets.shape[1] - 1
        """Examples in the batch."""
        self.shard_sizes: tuple[int, ...] = (
            (int(shard_offsets[0, -1]) - int(shard_offsets[0, 0]),)
            if self.num_shards == 1
            else tuple((shard_offsets[:, -1] - shard_offsets[:, 0]).tolist())
        )
        """:meth:`shard_size` of every shard: each request plans its tasks by them."""
        self.row_cache: dict[tuple[object, int], RowMap] = {}
        """Rows mapped for this batch, per (table, shard): see :class:`RowMap`."""
        self._views: dict[int, tuple[NDArray[np.uint64], NDArray[np.int64]]] = {}
        self._offsets_at: dict[int, int] = {}

    def __repr__(self) -> str:
        return f"ShardedBatch(signs={self.signs!r}, shard_offsets={self.shard_offsets!r})"

    def unsplit(
        self,
    ) -> tuple[NDArray[np.uint64], NDArray[np.int64], NDArray[np.float32] | None]:
        """The batch as ``(signs, offsets, weights)`` again, each example's signs grouped by
        shard in shard order (splitting that again gives this batch back: to move it to
        another ps); ``weights`` is None for an unweighted batch, ``offsets`` an unpooled
        batch's examples (:attr:`bags`)."""
        starts = self.shard_offsets[:, :-1].T.reshape(-1)
        lengths = np.diff(self.shard_offsets, axis=1).T.reshape(-1)
        ends = np.cumsum(lengths)
        index = np.repeat(starts - (ends - lengths), lengths) + np.arange(
            int(ends[-1]) if len(ends) else 0
        )
        per_example = lengths.reshape(self.batch_size, self.num_shards).sum(axis=1)
        offsets = np.concatenate([[0], np.cumsum(per_example)]).astype(np.int64)
        weights = None if self.weights is None else self.weights[index]
        # An unpooled batch's examples are bags of one, so its signs come back in feed order.
        return self.signs[index], offsets if self.bags is None else self.bags.copy(), weights

    def shard_view(self, shard: int) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
        """Shard ``shard``'s signs and its offsets from 0 (``shard`` must be in range).

        Kept once made: a shard is pinned, looked up and pushed, and slicing it anew each time
        cost 2.4 us, a tenth of a small variable's lookup. Two threads that race here store
        the same views.
        """
        view = self._views.get(shard)
        if view is None:
            bounds = self.shard_offsets[shard]
            lo, hi = int(bounds[0]), int(bounds[-1])
            # The first view stored is every caller's: :meth:`offsets_at` hands out its address.
            view = self._views.setdefault(shard, (self.signs[lo:hi], bounds - lo if lo else bounds))
        return view

    def offsets_at(self, shard: int) -> int:
        """Where :meth:`shard_view`'s offsets of ``shard`` start (for a grouped kernel, which
        reads them as aligned contiguous int64: anything else is refused)."""
        at = self._offsets_at.get(shard)
        if at is None:
            offsets = self.shard_view(shard)[1]
            flags = offsets.flags
            if offsets.dtype != np.int64 or not (flags.c_contiguous and flags.aligned):
                raise ValueError(
                    "a ShardedBatch's shard_offsets must be an aligned C-contiguous int64 "
                    f"array, got {offsets.dtype}; split batches with EmbeddingTable.split"
                )
            at = self._offsets_at[shard] = address(offsets)
        return at

    def scales_at(self, shard: int) -> int:
        """Where shard ``shard``'s :attr:`scales` start (0: the batch has none), for a
        grouped kernel's plan."""
        if self.scales is None:
            return 0
        return address(self.scales) + 4 * int(self.shard_offsets[shard, 0])

    def shard_size(self, shard: int) -> int:
        """Signs that fall into ``shard``: a measure of that shard task's work."""
        return self.shard_sizes[shard]


class EmbeddingStore(ABC):
    """Embedding rows addressed by 64-bit signs, with sum-pooled lookup and sparse updates.

    Contract:

    - ``lookup_pool`` returns, for each example, the sum of its signs' rows. A sign seen for
      the first time gets its initial value, a pure function of (seed, sign).
    - ``push_grad`` gives every sign of example ``b`` the gradient ``grads[b]``; a sign that
      occurs several times in the batch has its gradients summed, then its row is updated once.
    - Thread safety: any method may be called from any thread. Each shard operation is atomic
      under the store's lock mode (except the ``"none"`` mode, which only protects the index).
    - Bounded memory: the store never holds more than ``capacity`` rows.
    - Work on different shards is independent: ``lookup_shard`` and ``push_grad_shard`` of
      different shards may run in parallel on different threads, which is how a scheduler
      spreads one huge variable over several workers.
    """

    @property
    @abstractmethod
    def dim(self) -> int:
        """Width of a row."""

    @property
    @abstractmethod
    def num_shards(self) -> int:
        """How many independent shards the store has."""

    @abstractmethod
    def split(self, signs: ArrayLike, offsets: ArrayLike) -> ShardedBatch:
        """Validate a ragged batch and partition it by shard (done once per batch)."""

    @abstractmethod
    def lookup_shard(self, batch: ShardedBatch, shard: int) -> NDArray[np.float32]:
        """Pooled ``[batch, dim]`` sums over the signs of one shard only."""

    def lookup_shard_into(
        self, batch: ShardedBatch, shard: int, out: NDArray[np.float32], col: int
    ) -> NDArray[np.float32]:
        """:meth:`lookup_shard` written into columns ``[col, col + dim)`` of ``out``
        (``[batch, width]`` float32); those columns, as a view. A store whose kernels can pool
        into a wider matrix overrides this to skip the copy."""
        pooled = self.lookup_shard(batch, shard)
        block = out[:, col : col + pooled.shape[1]]
        block[...] = pooled
        return block

    @abstractmethod
    def push_grad_shard(self, batch: ShardedBatch, shard: int, grads: NDArray[np.float32]) -> None:
        """Apply ``grads[batch, dim]`` to the signs of one shard only."""

    @abstractmethod
    def lookup_pool(self, signs: ArrayLike, offsets: ArrayLike) -> NDArray[np.float32]:
        """Pooled ``[batch, dim]`` sums of each example's rows."""

    @abstractmethod
    def push_grad(self, signs: ArrayLike, offsets: ArrayLike, grads: ArrayLike) -> None:
        """Apply one optimizer step with ``grads[batch, dim]`` to the batch's signs."""

    @abstractmethod
    def get(self, signs: ArrayLike) -> NDArray[np.float32]:
        """Rows of ``signs`` without inserting; an absent sign reads as its initial value."""

    @abstractmethod
    def statistics(self) -> TableStatistics:
        """Counters since creation."""

    @abstractmethod
    def export(self) -> TableExport:
        """Every held row with its optimizer state."""

    @abstractmethod
    def import_(self, data: TableExport) -> None:
        """Insert or overwrite the rows of ``data``."""

    @abstractmethod
    def check_import(self, data: TableExport) -> None:
        """Raise what ``import_(data)`` would raise, without changing anything."""

    @abstractmethod
    def __len__(self) -> int:
        """Rows currently held."""

    @abstractmethod
    def __contains__(self, sign: object) -> bool:
        """Whether ``sign`` currently has a row."""
