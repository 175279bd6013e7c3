"""``EmbeddingTable``: the sharded, bounded embedding store of one ps process.

All rows live in slabs preallocated at construction (see :mod:`sniper.store._kernels` for the
layout), so a table never allocates per sign and never grows past ``capacity``. Python code here
validates input, picks locks and calls kernels; the kernels do all per-sign work without the GIL.

Lock modes, so that the seed logs' experiments can be reproduced:

- ``"global"``: one lock shared by every table in the process, held for a whole shard
  operation. This is the original system's first design; with one huge variable every other
  variable waits behind it (its p50 lookup reached 6.4 s).
- ``"table"``: one lock per table, held for a whole shard operation.
- ``"shard"`` (the default, and the fastest correct mode): one lock per shard, so the shards of
  one variable proceed in parallel on different threads.
- ``"none"``: the index is still changed under the shard's lock (finding, inserting and
  evicting rows), but reading rows for pooling takes no lock. A push sums its gradients by
  row in the index and applies them in one kernel call, under the shard's lock. What this
  permits: a lookup may see a row half-updated, and a row evicted by a concurrent insert
  between the index phase and the value phase may be read or written as the new sign's row.
  What it never permits: a corrupt index, a row shared by two signs afterwards, or a crash.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sniper._hashing import _as_u64, splitmix64_mix
from sniper.store import _kernels as k
from sniper.store._abc import (
    CLOSED,
    EmbeddingStore,
    RowMap,
    ShardedBatch,
    TableExport,
    TableStatistics,
)
from sniper.store._grouped import (
    GLOBAL_LOCK,
    map_plan,
    pin_shards,
    pool_plan,
    pool_shards,
    push_plan,
    push_shards,
    real_locks,
)
from sniper.store._initializers import DEFAULT_INITIALIZER, Initializer
from sniper.store._optimizers import Optimizer
from sniper.store._pages import untouched_zeros
from sniper.store._pointers import address
from sniper.store._warm import load_kernels

__all__ = [
    "BAG_POOLINGS",
    "LOCK_MODES",
    "POOLINGS",
    "Admission",
    "BagPooling",
    "CapacityError",
    "EmbeddingTable",
    "LockMode",
    "Pooling",
]

LockMode = Literal["global", "table", "shard", "none"]
LOCK_MODES: tuple[LockMode, ...] = ("global", "table", "shard", "none")
Pooling = Literal["fused", "separate"]
POOLINGS: tuple[Pooling, ...] = ("fused", "separate")
"""How a lookup pools: ``fused`` sums rows straight into the answer; ``separate`` first copies
every occurrence's row into an ``[n, dim]`` array, then sums it (the seeds' Embedding op
followed by SeqPool, kept for the experiment that compares them)."""
BagPooling = Literal["sum", "mean", "sqrtn", "none"]
BAG_POOLINGS: tuple[BagPooling, ...] = ("sum", "mean", "sqrtn", "none")
"""How a table combines the rows of an example's bag, each sign with its weight ``w_j`` (1
unless the batch is weighted): ``sum`` gives ``sum(w_j * row_j)``; ``mean`` divides it by
``sum(w_j)`` and ``sqrtn`` by ``sqrt(sum(w_j ** 2))`` (the count and its root when
unweighted; a zero divisor gives zeros), TensorFlow's ``embedding_lookup_sparse`` combiners;
``none`` does not pool: a lookup answers each value's ``w_j * row_j``, ``[values, dim]``, and
a push takes one gradient per value. A sign's gradient is its bag's times the same factor. An
empty bag pools to zeros. An unweighted ``sum`` or ``none`` batch runs the plain kernels."""
_BAG_MODES = {"sum": k.BAG_SUM, "mean": k.BAG_MEAN, "sqrtn": k.BAG_SQRTN, "none": k.BAG_SUM}
EVICTION_POLICIES = ("lru",)
MAX_LOAD_FACTOR = 0.75
_TABLE_ORDER = itertools.count()
"""Numbers tables in creation order: the order grouped calls take their locks in."""


class CapacityError(RuntimeError):
    """A single batch (or import) has more distinct signs in one shard than the shard can hold."""


class Admission:
    """Admission filter: a sign gets a row only once it has been seen ``min_count`` times.

    Sightings are counted in a count-min sketch of ``depth`` rows of ``width`` uint32 counters
    per shard, so memory does not grow with the number of distinct signs; a sketch only
    over-counts, so a sign is never admitted later than ``min_count`` sightings. Only lookups
    count as sightings; until admitted, a sign reads as zeros and its gradients are dropped and
    counted in ``TableStatistics.dropped_gradients``.
    """

    def __init__(self, min_count: int, *, width: int = 1 << 20, depth: int = 4) -> None:
        if min_count < 1:
            raise ValueError(f"admission min_count must be at least 1, got {min_count}")
        if width < 1 or depth < 1:
            raise ValueError(f"admission width and depth must be positive, got {width}, {depth}")
        self.min_count = min_count
        self.width = width
        self.depth = depth

    def __repr__(self) -> str:
        return f"Admission(min_count={self.min_count}, width={self.width}, depth={self.depth})"


class _PinStart(NamedTuple):
    """A pin whose protocol has begun (:meth:`EmbeddingTable._pin_start`): the rows its kernel
    writes, its pending number, whether it may evict, and its row of a grouped map's plan."""

    rows: NDArray[np.int64]
    seq: int
    may_evict: bool
    plan: tuple[int, ...]


class EmbeddingTable(EmbeddingStore):
    """A bounded table of ``dim``-wide float32 rows keyed by uint64 signs.

    Eviction is CLOCK (second chance), an O(1)-amortized approximation of LRU over lookups and
    updates: each access sets a row's reference bit; when a shard is full, the clock hand
    sweeps its rows, clearing set bits and evicting the first row whose bit is already clear.
    An evicted sign that comes back starts again from its initial value.
    """

    def __init__(
        self,
        dim: int,
        *,
        capacity: int,
        optimizer: Optimizer,
        initializer: Initializer | None = None,
        num_shards: int = 1,
        eviction: str = "lru",
        admission: Admission | None = None,
        lock: LockMode = "shard",
        seed: int = 0,
        pooling: Pooling = "fused",
        bag_pooling: BagPooling = "sum",
    ) -> None:
        _check_args(dim, capacity, num_shards, eviction, lock, seed)
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        if bag_pooling not in BAG_POOLINGS:
            raise ValueError(
                f"pooling must be one of {', '.join(BAG_POOLINGS)}, got {bag_pooling!r}"
            )
        self.pooling: Pooling = pooling
        self.bag_pooling: BagPooling = bag_pooling
        """How an example's rows are combined (:data:`BAG_POOLINGS`): the variable's own."""
        self._dim = dim
        self._capacity = capacity
        self._num_shards = num_shards
        self.optimizer = optimizer
        self.initializer = initializer if initializer is not None else DEFAULT_INITIALIZER
        self.admission = admission
        self._lock_mode: LockMode = lock
        self.seed = seed
        self._seed_key = np.uint64(splitmix64_mix(seed))
        self._token = object()  # identifies this table in a batch's row cache
        self._allocate()
        load_kernels()
        # Re-entrant: get/export/import hold every lock and then map rows under the index lock.
        self._shard_locks = [threading.RLock() for _ in range(num_shards)]
        self._table_lock = threading.Lock()
        self._op_locks, self._index_locks = self._locks()
        order = next(_TABLE_ORDER)
        self._pool_locks = [
            real_locks((self._op_locks[shard],), order, shard) for shard in range(num_shards)
        ]
        """Per shard, what a grouped lookup (:mod:`sniper.store._grouped`) holds, with each
        lock's place in the order every grouped call takes locks in."""
        self._push_locks = [
            real_locks((self._op_locks[shard], self._index_locks[shard]), order, shard)
            for shard in range(num_shards)
        ]
        """The same for a grouped push: its kernel sums gradients by row in the index, so it
        holds the index lock too (only mode ``"none"`` has one apart)."""
        self._pool_plan = pool_plan(self)
        self._push_plan = push_plan(self)
        self._map_plan = map_plan(self)

    def _allocate(self) -> None:
        capacity, shards = self._capacity, self._num_shards
        row_caps = np.full(shards, capacity // shards, dtype=np.int64)
        row_caps[: capacity % shards] += 1
        self._smallest_shard = int(row_caps.min())
        slot_counts = np.ceil(row_caps / MAX_LOAD_FACTOR).astype(np.int64) + 1
        self._meta = np.zeros((shards, k.META_FIELDS), dtype=np.int64)
        self._meta[:, k.ROW_CAPACITY] = row_caps
        self._meta[1:, k.ROW_START] = np.cumsum(row_caps)[:-1]
        self._meta[:, k.SLOT_COUNT] = slot_counts
        self._meta[1:, k.SLOT_START] = np.cumsum(slot_counts)[:-1]
        self._counters = np.zeros((shards, k.COUNTERS), dtype=np.int64)
        self._slots = np.empty((int(slot_counts.sum()), 3), dtype=np.uint32)
        self._slots[:, 2] = k.EMPTY
        # The row arrays fill from each shard's start as signs arrive: see _pages.
        self._slot_of_row = untouched_zeros((capacity,), np.uint32)
        self._stamps = untouched_zeros((capacity,), np.uint16)
        self._next_seq = [1] * shards
        self._pending: list[deque[int]] = [deque() for _ in range(shards)]
        """Per shard, the pending numbers in the order they were taken (see
        :mod:`sniper.store._kernels`: a call's, or a fed batch's until pushed or released)."""
        self._stamped = [True] * shards
        """Per shard, whether every pinned batch's rows carry its stamp (pins skip stamping
        while the shard has room; the first call that could evict stamps them)."""
        self._ended: list[set[int]] = [set() for _ in range(shards)]
        """Per shard, numbers no longer pending that are still behind an older pending one."""
        self._pinned: list[dict[int, ShardedBatch]] = [{} for _ in range(shards)]
        """Per shard, the batches holding pins there (by id): to take them back when the
        shard runs out of rows to evict."""
        self._released: list[deque[ShardedBatch]] = [deque() for _ in range(shards)]
        """Per shard, released batches whose pins the next call on the shard takes back."""
        self._pins_full = [False] * shards
        """Per shard, whether a pin found every row held by pending batches, with no pin
        given back since (:meth:`pins_full`)."""
        self._weights = untouched_zeros((capacity, self._dim), np.float32)
        self._state = untouched_zeros((capacity, self.optimizer.slots, self._dim), np.float32)
        self._state_init = np.ascontiguousarray(self.optimizer.state_init(), dtype=np.float32)
        if self._state_init.shape != (self.optimizer.slots,):
            raise ValueError(
                f"{type(self.optimizer).__name__}.state_init() must give one value per state "
                f"slot ({self.optimizer.slots}), got shape {self._state_init.shape}"
            )
        self._init_params = np.array([self.initializer.a, self.initializer.b], dtype=np.float64)
        self._steps = untouched_zeros((capacity if self.optimizer.uses_steps else 0,), np.int32)
        sketch_shape = (
            (shards, self.admission.depth, self.admission.width)
            if self.admission
            else (shards, 1, 1)
        )
        self._sketch = np.zeros(sketch_shape, dtype=np.uint32)
        self._min_count = self.admission.min_count if self.admission else 0

    # -- properties ---------------------------------------------------------------------------

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def capacity(self) -> int:
        """The most rows the table holds."""
        return self._capacity

    @property
    def num_shards(self) -> int:
        return self._num_shards

    @property
    def lock_mode(self) -> LockMode:
        """What each shard operation locks; fixed at construction (the locks are chosen then)."""
        return self._lock_mode

    def __repr__(self) -> str:
        return (
            f"EmbeddingTable(dim={self._dim}, capacity={self._capacity}, "
            f"optimizer={self.optimizer!r}, num_shards={self._num_shards}, "
            f"lock={self.lock_mode!r}, rows={len(self)})"
        )

    # -- locks ----------------------------------------------------------------------------------

    def _locks(self) -> tuple[list[AbstractContextManager[object]], ...]:
        """Per shard, the lock held for a whole shard operation (index and values), and the
        extra lock for index changes, needed only where the first is absent (``"none"``).

        Chosen once, not per call: every pin, lookup and push takes both, and choosing them
        each time was a twentieth of a small variable's Python overhead.
        """
        no_lock = nullcontext()
        mode = self.lock_mode
        shared = {"global": GLOBAL_LOCK, "table": self._table_lock}.get(mode)
        op: list[AbstractContextManager[object]] = [
            shared or (lock if mode == "shard" else no_lock) for lock in self._shard_locks
        ]
        index: list[AbstractContextManager[object]] = [
            lock if mode == "none" else no_lock for lock in self._shard_locks
        ]
        return op, index

    @contextmanager
    def _everything_locked(self) -> Iterator[None]:
        with ExitStack() as stack:
            held: set[int] = set()
            for shard in range(self._num_shards):
                for lock in (self._op_locks[shard], self._index_locks[shard]):
                    if not isinstance(lock, nullcontext) and id(lock) not in held:
                        held.add(id(lock))
                        stack.enter_context(lock)
            yield

    # -- batch operations -----------------------------------------------------------------------

    def split(
        self, signs: ArrayLike, offsets: ArrayLike, weights: ArrayLike | None = None
    ) -> ShardedBatch:
        """:meth:`EmbeddingStore.split`, with each sign's ``weights`` in its bag (float32
        ``[n]``; None: 1), pooled as :attr:`bag_pooling` says."""
        signs_u64, offsets_i64 = _check_batch(signs, offsets)
        fed = None if weights is None else _check_weights(weights, signs_u64.shape[0])
        bags = None
        if self.bag_pooling == "none":
            bags, offsets_i64 = offsets_i64.copy(), np.arange(signs_u64.shape[0] + 1)
        scales = None
        if fed is not None or self.bag_pooling in ("mean", "sqrtn"):
            ones = np.ones(signs_u64.shape[0], dtype=np.float32)
            scales = k.bag_scales(offsets_i64, ones if fed is None else fed, self._bag_mode)
        if self._num_shards == 1:
            # Copies: a caller reusing its buffers must not change a batch held for PushGrad
            # (the kernels trust validated offsets and do no bounds checks).
            batch = ShardedBatch(
                signs_u64.copy(),
                offsets_i64.reshape(1, -1).copy(),
                weights=None if fed is None else fed.copy(),
                scales=scales,
                bags=bags,
            )
        else:
            batch = self._split_shards(signs_u64, offsets_i64, fed, scales, bags)
        self._check_fits(batch)
        return batch

    @property
    def _bag_mode(self) -> int:
        return _BAG_MODES[self.bag_pooling]

    def _split_shards(
        self,
        signs: NDArray[np.uint64],
        offsets: NDArray[np.int64],
        fed: NDArray[np.float32] | None,
        scales: NDArray[np.float32] | None,
        bags: NDArray[np.int64] | None,
    ) -> ShardedBatch:
        """A checked batch split by shard, its weights and scales moved with their signs."""
        if scales is None:
            signs_out, shard_offsets, _ = k.split_by_shard(signs, offsets, self._num_shards)
            return ShardedBatch(signs_out, shard_offsets, bags=bags)
        values = scales[:, None] if fed is None else np.stack([fed, scales], axis=1)
        signs_out, shard_offsets, moved = k.split_by_shard(signs, offsets, self._num_shards, values)
        return ShardedBatch(
            signs_out,
            shard_offsets,
            weights=None if fed is None else np.ascontiguousarray(moved[:, 0]),
            scales=np.ascontiguousarray(moved[:, -1]),
            bags=bags,
        )

    def _check_fits(self, batch: ShardedBatch) -> None:
        """Refuse a batch with more distinct signs in a shard than the shard has rows.

        Checked when the batch is split (FeedSample), not when it is looked up: a lookup that
        ran out of rows half-way would already have evicted rows for its first signs, and no
        failed call may change a table. Only a shard with more signs than rows can be over,
        so the distinct count is taken for those alone: a table sized for its batches pays
        one comparison per shard, and a batch with no more signs than the smallest shard has
        rows, none.
        """
        if batch.signs.shape[0] <= self._smallest_shard:
            return
        for shard in range(batch.num_shards):
            capacity = int(self._meta[shard, k.ROW_CAPACITY])
            if batch.shard_size(shard) <= capacity:
                continue
            signs, _ = self._shard_view(batch, shard)
            distinct = int(np.unique(signs).shape[0])
            if distinct > capacity:
                raise CapacityError(
                    f"shard {shard} holds {capacity} rows but the batch has {distinct} "
                    "distinct signs there; raise the table's capacity (nothing was changed)"
                )

    def _map(
        self, shard: int, signs: NDArray[np.uint64], count_sighting: bool, min_count: int
    ) -> tuple[NDArray[np.int64], int]:
        """Rows of ``signs`` and the shard's eviction count read under the same index lock.

        If the shard has too few rows left to evict because pending calls protect them, the
        rows are stamped again from the pinned batches alone and the map retried; if that is
        not enough, the pins are taken back (those batches are mapped again at their lookup)
        and the map retried once more: pinning saves work, it never makes a batch that fits
        the table fail.
        """
        with self._index_locks[shard]:
            rows, evictions, full, _ = self._map_rows(shard, signs, count_sighting, min_count)
            for make_room in (self._restamp, self._revoke_pins):
                if full and make_room(shard):
                    rows, evictions, full, _ = self._map_rows(shard, signs, False, min_count)
        if full:
            raise CapacityError(
                f"shard {shard} holds {self._meta[shard, k.ROW_CAPACITY]} rows but one batch "
                "needs more distinct signs than that; raise the table's capacity"
            )
        return rows, evictions

    def _map_rows(
        self,
        shard: int,
        signs: NDArray[np.uint64],
        count_sighting: bool,
        min_count: int,
        *,
        pin: bool = False,
    ) -> tuple[NDArray[np.int64], int, bool, int]:
        """:func:`~sniper.store._kernels.map_rows` on this table (the caller holds the index
        lock): the rows, the eviction count, whether the shard ran out of rows, and the call's
        pending number, which stays pending with ``pin`` (the caller ends it)."""
        rows = np.empty(signs.shape[0], dtype=np.int64)
        init = self.initializer
        may_evict, seq = self._map_begin(shard, signs.shape[0])
        status = k.map_rows(
            shard,
            signs,
            rows,
            count_sighting,
            seq,
            self._low_water(shard),
            may_evict,
            self._slots,
            self._slot_of_row,
            self._stamps,
            self._meta,
            self._counters,
            self._sketch,
            min_count,
            self._weights,
            self._state,
            self._state_init,
            self._steps,
            self._seed_key,
            init.kind,
            init.a,
            init.b,
        )
        full = self._map_end(shard, seq, status == k.NO_ROW_FREE, pin, may_evict)
        return rows, int(self._counters[shard, k.EVICTIONS]), full, seq

    def _map_begin(self, shard: int, signs: int) -> tuple[bool, int]:
        """Before a map of ``signs`` signs (under the index lock): whether it may evict, and
        its pending number.

        Rows are evicted only once the shard is full: until a call could fill it, nothing
        needs a stamp. The first that could stamps the rows pinned without one.
        """
        may_evict = int(self._meta[shard, k.ROWS_USED]) + signs > int(
            self._meta[shard, k.ROW_CAPACITY]
        )
        if may_evict and not self._stamped[shard]:
            self._restamp(shard)
        return may_evict, self._begin(shard)

    def _map_end(self, shard: int, seq: int, full: bool, pin: bool, may_evict: bool) -> bool:
        """After a map: its number stays pending only for a pin that got its rows (a pin that
        did not stamp them leaves the shard to be stamped later). Returns ``full``."""
        if full or not pin:
            self._end(shard, seq)
        elif not may_evict:
            self._stamped[shard] = False
        return full

    def _begin(self, shard: int) -> int:
        """Take the shard's next pending number (under its locks)."""
        seq = self._next_seq[shard]
        if seq >= k.NO_PENDING - 1:
            self._restart_stamps(shard)
            seq = 1
        self._next_seq[shard] = seq + 1
        self._pending[shard].append(seq)
        return seq

    def _end(self, shard: int, seq: int) -> None:
        """``seq`` is no longer pending: its rows may be evicted once no older one is."""
        self._ended[shard].add(seq)

    def _low_water(self, shard: int) -> int:
        """The oldest pending number of the shard (``NO_PENDING`` if none)."""
        pending, ended = self._pending[shard], self._ended[shard]
        while pending and pending[0] in ended:
            ended.discard(pending.popleft())
        return pending[0] if pending else k.NO_PENDING

    def _restamp(self, shard: int) -> bool:
        """Stamp the shard's rows again from its pinned batches alone: rows that later calls
        stamped but no pending batch holds become evictable again. Always True."""
        start, count = self._meta[shard, k.ROW_START], self._meta[shard, k.ROW_CAPACITY]
        self._stamps[start : start + count] = 0
        for _, entry in self._pinned_maps(shard):
            rows = entry.rows
            self._stamps[rows[rows >= 0]] = entry.seq
        self._stamped[shard] = True
        return True

    def _restart_stamps(self, shard: int) -> None:
        """Numbers start again at 1 after 65,534 calls on a shard (about two hours of training
        at 10 batches a second): every pin is taken back (its batch is mapped again at its
        lookup), and every stamp is cleared."""
        self._revoke_pins(shard)
        self._pending[shard].clear()
        self._ended[shard].clear()
        self._restamp(shard)  # no batch holds a pin any more: this clears every stamp

    def _shard_view(
        self, batch: ShardedBatch, shard: int
    ) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
        if batch.num_shards != self._num_shards:
            raise ValueError(
                f"batch was split into {batch.num_shards} shards, "
                f"the table has {self._num_shards}; split it with this table"
            )
        if not 0 <= shard < self._num_shards:
            raise IndexError(f"shard {shard} out of range [0, {self._num_shards})")
        return batch.shard_view(shard)

    def lookup_shard(self, batch: ShardedBatch, shard: int) -> NDArray[np.float32]:
        out = np.empty((batch.batch_size, self._dim), dtype=np.float32)
        pool_shards([(self, batch, shard, out, 0)])
        return out

    def lookup_shard_into(
        self, batch: ShardedBatch, shard: int, out: NDArray[np.float32], col: int
    ) -> NDArray[np.float32]:
        return pool_shards([(self, batch, shard, out, col)])[0]

    def _checked_grads(
        self, grads: ArrayLike, batch_size: int, what: str = "grads"
    ) -> NDArray[np.float32]:
        """``grads`` checked against a batch of ``batch_size`` examples of this table (an
        error names the gradient as ``what``: a ps names the variable)."""
        return _check_grads(grads, batch_size, self._dim, what)

    def _lookup_rows(self, batch: ShardedBatch, shard: int) -> tuple[RowMap, int]:
        """A shard's rows to pool and where its offsets start (the caller holds the shard's
        locks)."""
        signs, _ = self._shard_view(batch, shard)
        return self._rows_for_lookup(batch, shard, signs), batch.offsets_at(shard)

    def _rows_for_lookup(
        self, batch: ShardedBatch, shard: int, signs: NDArray[np.uint64]
    ) -> RowMap:
        """The rows pinned when the batch was fed (a gather, no probe), else a new map.

        A new map is kept for the push, even with not-yet-admitted signs (-1): the push then
        drops exactly the gradients of the occurrences that read as zeros.
        """
        key = (self._token, shard)
        with self._index_locks[shard]:
            self._drain(shard)
            entry = batch.row_cache.get(key)
            if entry is not None and entry.pinned:
                return entry
            rows, evictions = self._map(shard, signs, True, self._min_count)
            mapped = RowMap(evictions, rows, 0, address(rows))
            if entry is not CLOSED:
                batch.row_cache[key] = mapped
            return mapped

    def _rows_for_push(
        self, batch: ShardedBatch, shard: int, signs: NDArray[np.uint64]
    ) -> tuple[RowMap, bool]:
        """The rows mapped before, if still valid, else a new map; and whether they were
        mapped before.

        Pinned rows are always valid; a lookup's rows are while the shard has evicted nothing
        since. The shard is closed for the batch either way: a push is its last use. A new map
        counts its hits; a mapping used again has the push count them (:func:`sum_by_row`).
        """
        key = (self._token, shard)
        with self._index_locks[shard]:
            self._drain(shard)
            entry = batch.row_cache.get(key)
            batch.row_cache[key] = CLOSED
            if entry is not None and (
                entry.pinned or entry.evictions == self._counters[shard, k.EVICTIONS]
            ):
                return entry, True
        rows, evictions = self._map(shard, signs, False, self._min_count)
        return RowMap(evictions, rows, 0, address(rows)), False

    def push_grad_shard(self, batch: ShardedBatch, shard: int, grads: NDArray[np.float32]) -> None:
        push_shards([(self, batch, shard, grads)])

    def _push_rows(self, batch: ShardedBatch, shard: int) -> tuple[RowMap, bool, int]:
        """A shard's rows to update, whether they were mapped before (the push counts their
        hits) and where its offsets start; the caller holds the shard's locks and ends with
        :meth:`_push_done`."""
        signs, _ = self._shard_view(batch, shard)
        mapped, reused = self._rows_for_push(batch, shard, signs)
        return mapped, reused, batch.offsets_at(shard)

    def _push_done(self, batch: ShardedBatch, shard: int, mapped: RowMap) -> None:
        """Give back the pins a push's mapping held (the caller holds the shard's locks)."""
        if mapped.pinned:
            with self._index_locks[shard]:
                self._unpin(batch, shard, mapped)

    # -- pins: rows mapped when a batch is fed --------------------------------------------------

    def pin_shard(self, batch: ShardedBatch, shard: int) -> bool:
        """Map shard ``shard`` of a fed batch to rows now and pin them until it is pushed or
        released (:meth:`unpin`), so its lookup is a gather over mapped rows and its push
        reuses them.

        A ps calls this when FeedSample arrives, while the trainer is still busy with earlier
        batches, which takes the index probes off the trainer's critical path. Returns False,
        pinning nothing, if the shard was mapped or closed already, or if it has too few rows
        left to evict (other batches pin them): the lookup then maps the batch itself.
        """
        return pin_shards([(self, batch, shard)])[0]

    def _pin_start(
        self, batch: ShardedBatch, shard: int, signs: NDArray[np.uint64]
    ) -> _PinStart | None:
        """A pin's protocol before its kernel (the caller holds the shard's locks): None if
        the shard was mapped or closed already, else its rows (to be written), its pending
        number, and its row of a grouped map's plan."""
        self._drain(shard)
        if (self._token, shard) in batch.row_cache:
            return None
        rows = np.empty(signs.shape[0], dtype=np.int64)
        may_evict, seq = self._map_begin(shard, signs.shape[0])
        plan = (
            *self._map_plan,
            shard,
            address(signs),
            signs.shape[0],
            address(rows),
            seq,
            self._low_water(shard),
            may_evict,
        )
        return _PinStart(rows, seq, may_evict, plan)

    def _pin_finish(
        self,
        batch: ShardedBatch,
        shard: int,
        signs: NDArray[np.uint64],
        start: _PinStart,
        full: bool,
    ) -> bool:
        """A pin's protocol after its kernel (the caller holds the shard's locks): keep the
        mapping with the batch, or, if the shard ran out of rows, stamp it again from its
        pinned batches and map once more; False if it is still full."""
        rows, seq = start.rows, start.seq
        full = self._map_end(shard, seq, full, True, start.may_evict)
        if full and self._restamp(shard):
            rows, _, full, seq = self._map_rows(shard, signs, False, self._min_count, pin=True)
        if full:
            self._pins_full[shard] = True
            return False
        evictions = int(self._counters[shard, k.EVICTIONS])
        batch.row_cache[(self._token, shard)] = RowMap(evictions, rows, seq, address(rows))
        self._pinned[shard][id(batch)] = batch
        return True

    def unpin(self, batch: ShardedBatch) -> None:
        """Give back the rows ``batch`` pinned: it was released, expired or fed again.

        Never blocks: each pinned shard gets the batch queued, and the next call on that shard
        takes the pins back under the shard's lock (an event loop may call this).
        """
        for (token, shard), entry in list(batch.row_cache.items()):
            if token is self._token and entry.pinned:
                self._released[shard].append(batch)

    def pinned_rows(self) -> int:
        """Distinct rows held by fed batches not yet pushed or released (takes the shards'
        locks, giving back the pins of batches released since their last call)."""
        held = 0
        for shard in range(self._num_shards):
            with self._op_locks[shard], self._index_locks[shard]:
                self._drain(shard)
                rows = [entry.rows for _, entry in self._pinned_maps(shard)]
                if rows:
                    every = np.concatenate(rows)
                    held += int(np.unique(every[every >= 0]).shape[0])
        return held

    def pins_full(self, shard: int) -> bool:
        """Whether the last pin of ``shard`` that needed a new row found none: rows pinned by
        fed batches not yet pushed or released fill the shard, and none has given its rows
        back since (nor is one about to: a release's pins count as given back). A ps refuses
        a FeedSample then rather than map a batch that can only take rows from another's."""
        return self._pins_full[shard] and not self._released[shard]

    def _unpin(self, batch: ShardedBatch, shard: int, mapped: RowMap) -> None:
        """Take back a pinned mapping's pins (the caller holds the shard's locks)."""
        self._end(shard, mapped.seq)
        self._pinned[shard].pop(id(batch), None)
        self._pins_full[shard] = False

    def _drain(self, shard: int) -> None:
        """Close the shard for every batch released since the last call (under its locks)."""
        released = self._released[shard]
        key = (self._token, shard)
        while released:
            batch = released.popleft()
            entry = batch.row_cache.get(key)
            batch.row_cache[key] = CLOSED
            if entry is not None and entry.pinned:
                self._unpin(batch, shard, entry)

    def _revoke_pins(self, shard: int) -> bool:
        """Unpin every fed batch's rows in ``shard``, keeping their mappings as a lookup's
        (valid for their push while nothing is evicted); False if there were none."""
        evictions = int(self._counters[shard, k.EVICTIONS])
        revoked = False
        for batch, entry in self._pinned_maps(shard):
            self._unpin(batch, shard, entry)
            batch.row_cache[(self._token, shard)] = entry._replace(evictions=evictions, seq=0)
            revoked = True
        self._pins_full[shard] = False
        return revoked

    def _pinned_maps(self, shard: int) -> list[tuple[ShardedBatch, RowMap]]:
        """The batches holding pins in ``shard`` with their pinned mappings (the caller holds
        the shard's locks). A batch whose push is applying it right now has marked its entry
        closed, and unpins itself when done: it is left out."""
        key = (self._token, shard)
        return [
            (batch, entry)
            for batch in self._pinned[shard].values()
            if (entry := batch.row_cache.get(key)) is not None and entry.pinned
        ]

    def lookup_pool(
        self, signs: ArrayLike, offsets: ArrayLike, weights: ArrayLike | None = None
    ) -> NDArray[np.float32]:
        """Pooled ``[batch, dim]`` rows as :attr:`bag_pooling` says (``[values, dim]`` for
        ``none``), each sign weighted by ``weights`` (None: 1)."""
        batch = self.split(signs, offsets, weights)
        out = self.lookup_shard(batch, 0)
        for shard in range(1, self._num_shards):
            out += self.lookup_shard(batch, shard)
        return out

    def push_grad(
        self,
        signs: ArrayLike,
        offsets: ArrayLike,
        grads: ArrayLike,
        weights: ArrayLike | None = None,
    ) -> None:
        """One optimizer step with ``grads[batch, dim]`` (``[values, dim]`` for pooling
        ``none``), each sign's gradient scaled as its lookup's pool scaled its row."""
        batch = self.split(signs, offsets, weights)
        checked = _check_grads(grads, batch.batch_size, self._dim)
        for shard in range(self._num_shards):
            self.push_grad_shard(batch, shard, checked)

    # -- reads, checkpoints, statistics --------------------------------------------------------

    def _find(self, signs: NDArray[np.uint64]) -> NDArray[np.int64]:
        shards = k.shard_ids(signs, self._num_shards)
        return np.asarray(k.find_rows(shards, signs, self._slots, self._meta), dtype=np.int64)

    def get(self, signs: ArrayLike) -> NDArray[np.float32]:
        signs_u64 = _check_signs(signs)
        init = self.initializer
        with self._everything_locked():
            rows = self._find(signs_u64)
            out = k.initial_rows(signs_u64, self._dim, self._seed_key, init.kind, init.a, init.b)
            held = rows >= 0
            out[held] = self._weights[rows[held]]
        return np.asarray(out, dtype=np.float32)

    def __contains__(self, sign: object) -> bool:
        if not isinstance(sign, int | np.integer) or not 0 <= int(sign) < 2**64:
            return False
        with self._everything_locked():
            return bool(self._find(np.array([sign], dtype=np.uint64))[0] >= 0)

    def __len__(self) -> int:
        return int(self._meta[:, k.ROWS_USED].sum())

    def statistics(self) -> TableStatistics:
        totals = self._counters.sum(axis=0)
        return TableStatistics(
            rows=len(self),
            capacity=self._capacity,
            inserts=int(totals[k.INSERTS]),
            evictions=int(totals[k.EVICTIONS]),
            hits=int(totals[k.HITS]),
            misses=int(totals[k.MISSES]),
            admitted=int(totals[k.ADMITTED]),
            rejected=int(totals[k.REJECTED]),
            dropped_gradients=int(totals[k.DROPPED_GRADIENTS]),
            nonfinite_updates=int(totals[k.NONFINITE_UPDATES]),
            bytes=self.nbytes,
            shards=self._num_shards,
        )

    @property
    def nbytes(self) -> int:
        """Bytes of every preallocated array of the table."""
        arrays = (
            self._slots,
            self._slot_of_row,
            self._stamps,
            self._weights,
            self._state,
            self._steps,
            self._sketch,
            self._meta,
            self._counters,
        )
        return sum(int(a.nbytes) for a in arrays)

    def _held_rows(self) -> NDArray[np.int64]:
        parts = [
            np.arange(start, start + used, dtype=np.int64)
            for start, used in self._meta[:, [k.ROW_START, k.ROWS_USED]]
        ]
        return np.concatenate(parts)

    def export(self) -> TableExport:
        with self._everything_locked():
            rows = self._held_rows()
            slots = self._slots[self._slot_of_row[rows]]
            signs = slots[:, 0].astype(np.uint64) | (slots[:, 1].astype(np.uint64) << np.uint64(32))
            steps = (
                self._steps[rows]
                if self.optimizer.uses_steps
                else np.zeros(rows.shape[0], dtype=np.int32)
            )
            return TableExport(
                signs=signs, weights=self._weights[rows], state=self._state[rows], steps=steps
            )

    def check_import(self, data: TableExport) -> None:
        """Raise what :meth:`import_` would raise for ``data``, changing nothing."""
        self._validated_import(data)

    def _validated_import(self, data: TableExport) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
        signs = _check_signs(data.signs)
        n = signs.shape[0]
        _check_import_shapes(data, n, self._dim, self.optimizer.slots)
        if np.unique(signs).shape[0] != n:
            raise ValueError("import has a sign more than once; each sign must appear once")
        shards = k.shard_ids(signs, self._num_shards)
        per_shard = np.bincount(shards, minlength=self._num_shards)
        over = np.nonzero(per_shard > self._meta[:, k.ROW_CAPACITY])[0]
        if over.size:
            raise CapacityError(
                f"import puts {per_shard[over[0]]} rows into shard {over[0]}, which holds "
                f"{self._meta[over[0], k.ROW_CAPACITY]}; raise the table's capacity"
            )
        return signs, shards

    def import_(self, data: TableExport) -> None:
        signs, shards = self._validated_import(data)
        with self._everything_locked():
            for shard in range(self._num_shards):
                mine = np.nonzero(shards == shard)[0]
                rows = self._map(shard, signs[mine], False, 0)[0]
                self._weights[rows] = data.weights[mine]
                self._state[rows] = data.state[mine]
                if self.optimizer.uses_steps:
                    self._steps[rows] = data.steps[mine]


def _check_args(
    dim: int, capacity: int, num_shards: int, eviction: str, lock: str, seed: int
) -> None:
    if dim < 1:
        raise ValueError(f"dim must be at least 1, got {dim}")
    if not 1 <= num_shards <= k.MAX_TABLE_SHARDS:
        raise ValueError(f"num_shards must be in [1, {k.MAX_TABLE_SHARDS}], got {num_shards}")
    if capacity < num_shards:
        raise ValueError(f"capacity must be at least num_shards ({num_shards}), got {capacity}")
    # A row id must fit the index word's low 30 bits (ROW_BITS; bit 30 is CLOCK's REF), and
    # slot indices stay below the dedup MARK bit (2**31).
    if capacity >= 2**30:
        raise ValueError(f"capacity must be below 2**30 per table, got {capacity}")
    if eviction not in EVICTION_POLICIES:
        raise ValueError(f"eviction must be one of {EVICTION_POLICIES}, got {eviction!r}")
    if lock not in LOCK_MODES:
        raise ValueError(f"lock must be one of {', '.join(LOCK_MODES)}, got {lock!r}")
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")


def _check_signs(signs: ArrayLike) -> NDArray[np.uint64]:
    array = _as_u64(signs, "signs")
    if array.ndim != 1:
        raise ValueError(f"signs must be 1-D, got shape {array.shape}")
    return np.ascontiguousarray(array)


def _check_batch(
    signs: ArrayLike, offsets: ArrayLike
) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
    signs_u64 = _check_signs(signs)
    raw = np.asarray(offsets)
    if raw.ndim != 1 or raw.shape[0] < 1 or raw.dtype.kind not in "iu":
        raise ValueError(
            f"offsets must be a 1-D integer array of batch+1 entries, "
            f"got dtype {raw.dtype} and shape {raw.shape}"
        )
    offsets_i64 = np.ascontiguousarray(raw, dtype=np.int64)
    first, last = int(offsets_i64[0]), int(offsets_i64[-1])
    if first != 0:
        raise ValueError(f"offsets[0] must be 0, got {first}")
    if last != signs_u64.shape[0]:
        raise ValueError(f"offsets[-1] must equal len(signs) = {signs_u64.shape[0]}, got {last}")
    decrease = k.first_decrease(offsets_i64)
    if decrease >= 0:
        raise ValueError(
            f"offsets must be non-decreasing, but offsets[{decrease}] = "
            f"{offsets_i64[decrease]} < offsets[{decrease - 1}] = {offsets_i64[decrease - 1]}"
        )
    return signs_u64, offsets_i64


def _check_weights(weights: ArrayLike, n: int) -> NDArray[np.float32]:
    """A weighted bag's weights: finite float32, one per sign."""
    array = np.asarray(weights)
    if array.dtype != np.float32 or array.shape != (n,):
        raise ValueError(
            f"weights must be float32 of shape ({n},), one per sign, "
            f"got {array.dtype} of shape {array.shape}"
        )
    if not np.isfinite(array).all():
        raise ValueError("weights must be finite, got NaN or Inf")
    return np.ascontiguousarray(array)


def _check_grads(
    grads: ArrayLike, batch_size: int, dim: int, what: str = "grads"
) -> NDArray[np.float32]:
    """``grads`` as an array, if it is float32 of the batch's shape (any layout: the grouped
    push reads it in place or copies it)."""
    array = np.asarray(grads)
    if array.dtype != np.float32 or array.shape != (batch_size, dim):
        raise ValueError(
            f"{what} must be float32 of shape ({batch_size}, {dim}), "
            f"got {array.dtype} of shape {array.shape}"
        )
    return array


def _check_import_shapes(data: TableExport, n: int, dim: int, slots: int) -> None:
    expected = {"weights": (n, dim), "state": (n, slots, dim), "steps": (n,)}
    for name, shape in expected.items():
        actual = getattr(data, name).shape
        if actual != shape:
            raise ValueError(f"import {name} must have shape {shape}, got {actual}")
