# Kernel bodies are typed by numba, whose scalars mypy does not equate with Python's.
# mypy: disable-error-code="no-any-return,return-value,assignment"
"""Shard operations of many tables in one kernel call: how a ps pins, pools and pushes a
request.

Why. A request names every variable of a batch (76 for seed_ctr), each its own table. Pooled or
pushed one shard at a time, each shard cost its own kernel calls (a push two: the sums, then
the optimizer), each with its arguments typed by numba's dispatcher, and a worker thread
running them took the GIL back after every call. Here a task's shards go through their Python
protocol first (locks, pins, the rows mapped at feed time), then one kernel call does all their
per-sign work without the GIL, the way FBGEMM's table-batched embeddings treat many tables as
one operator. Measured on seed_ctr at scale 0.02 (38 variables a ps): the push's kernels took
1.30-1.48 ms as one call against 1.47-1.63 ms as 76, but planning the call (addresses, plan
rows, lock order, checks) costs a little more Python than the calls did: a push request came
out 0.2-0.4 ms slower in an engine microbenchmark (CHANGELOG.md, 2026-11-25, 10886b9).

Gradients are read where they lie, in any layout with positive strides: the trainer's are
blocks of one transposed product (one matrix product for every variable instead of one each:
2.0-2.7 against 3.0-3.1 ms a seed_ctr batch), which the per-shard kernels copied first.

Locks. A grouped call holds the locks of every shard it touches (each shard's lock mode
decides which: see :mod:`sniper.store._table`) from its protocol until its kernel is done,
taken in one global order (the process-wide lock, then by table, then by shard), so two
grouped calls, or a grouped call and a whole-table operation, cannot deadlock.

The kernels (in :mod:`sniper.store._kernels`) read each table's arrays by address
(:mod:`sniper.store._pointers`): every array is checked here first (dtype, shape, layout)
and kept referenced until the call returns.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from sniper._arrays import is_float32_matrix
from sniper.store import _kernels as k
from sniper.store._pointers import address

if TYPE_CHECKING:
    from sniper.store._abc import RowMap, ShardedBatch
    from sniper.store._table import EmbeddingTable, _PinStart

__all__ = [
    "PinPart",
    "PoolPart",
    "PushPart",
    "max_abs_matrices",
    "pin_shards",
    "pool_shards",
    "push_shards",
    "strides_of",
]

PinPart = tuple["EmbeddingTable", "ShardedBatch", int]
"""``(table, batch, shard)``: map shard ``shard`` of a batch just fed to rows and pin them."""
PoolPart = tuple["EmbeddingTable", "ShardedBatch", int, NDArray[np.float32], int]
"""``(table, batch, shard, out, col)``: pool shard ``shard`` of ``batch`` into columns
``[col, col + dim)`` of ``out``, overwriting them."""
PushPart = tuple["EmbeddingTable", "ShardedBatch", int, NDArray[np.float32]]
"""``(table, batch, shard, grads)``: apply ``grads`` (``[batch, dim]``) to shard ``shard``
(each sign's gradient times its scale, for a batch with :attr:`~ShardedBatch.scales`)."""

GLOBAL_LOCK = threading.Lock()
"""The lock every table of lock mode ``"global"`` shares (taken first by a grouped call)."""


def real_locks(locks: Sequence[Any], table_order: int, shard: int) -> list[tuple[Any, Any]]:
    """``(order key, lock)`` of each of ``locks`` that is a lock (not a ``nullcontext``): the
    key is where the lock comes in a grouped call's locking order."""
    return [
        ((0, 0, 0) if lock is GLOBAL_LOCK else (1, table_order, shard), lock)
        for lock in locks
        if not isinstance(lock, nullcontext)
    ]


class _Held:
    """The locks of every shard of a grouped call (each shard's list of ``(order key, lock)``),
    taken in order, released in reverse."""

    def __init__(self, locks: Sequence[list[tuple[tuple[int, int, int], Any]]]) -> None:
        keyed: dict[int, tuple[tuple[int, int, int], Any]] = {}
        for shard_locks in locks:
            for key, lock in shard_locks:
                keyed[id(lock)] = (key, lock)
        self._locks = [lock for _, lock in sorted(keyed.values(), key=_first)]

    def __enter__(self) -> None:
        taken = []
        try:
            for lock in self._locks:
                lock.acquire()
                taken.append(lock)
        except BaseException:
            for lock in reversed(taken):
                lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        for lock in reversed(self._locks):
            lock.release()


def _first(item: tuple[tuple[int, int, int], Any]) -> tuple[int, int, int]:
    return item[0]


def pin_shards(parts: Sequence[PinPart]) -> list[bool]:
    """Map and pin every part's rows (:meth:`EmbeddingTable.pin_shard`), in one kernel call;
    whether each part was pinned.

    Every part's shard goes through the pin protocol first (pins taken back, a shard already
    mapped or closed skipped, a pending number taken), then one kernel maps them all, then
    each mapping is kept with its batch. A shard that ran out of rows is stamped again from
    its pinned batches and mapped once more on its own (rare: the shard is full of pinned
    rows); if it is still full, that part is not pinned and its lookup maps it itself.
    """
    _refuse_repeats(parts)
    signs = [_mappable(table._shard_view(batch, shard)[0]) for table, batch, shard in parts]
    # A pin holds what a push holds: the shard's operation lock and its index lock.
    with _Held([part[0]._push_locks[part[2]] for part in parts]):
        started: list[_PinStart | None] = []
        pinned: list[bool] = []
        finishing = -1  # the part whose own protocol is ending its number
        try:
            for (table, batch, shard), part_signs in zip(parts, signs, strict=True):
                started.append(table._pin_start(batch, shard, part_signs))
            planned = [start for start in started if start is not None]
            status = np.zeros(len(planned), dtype=np.int64)
            if planned:
                plan = [start.plan for start in planned]
                matrix = np.array(plan, dtype=np.int64).reshape(len(plan), k.MAP_PLAN_COLUMNS)
                k.map_many(matrix, status)
            full = iter(status.tolist())
            for (table, batch, shard), part_signs, start in zip(parts, signs, started, strict=True):
                finishing += 1
                pinned.append(
                    start is not None
                    and table._pin_finish(
                        batch, shard, part_signs, start, next(full) == k.NO_ROW_FREE
                    )
                )
        except BaseException:
            # Whatever failed (a part's protocol, the kernel), no number the call took may
            # stay pending without a pin that holds it: it would protect rows from eviction.
            for index, start in enumerate(started):
                if start is not None and index > finishing:
                    table, _, shard = parts[index]
                    table._end(shard, start.seq)
            raise
        return pinned


def _mappable(signs: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """A shard's signs as the map kernel reads them by address: refuse anything else."""
    flags = signs.flags
    if signs.dtype != np.uint64 or not (flags.c_contiguous and flags.aligned):
        raise ValueError(
            "a ShardedBatch's signs must be an aligned C-contiguous uint64 array, got "
            f"{signs.dtype}; split batches with EmbeddingTable.split"
        )
    return signs


def pool_shards(parts: Sequence[PoolPart]) -> list[NDArray[np.float32]]:
    """Pool every part, in one kernel call; each part's block of its ``out``, as a view.

    A part whose shard takes no lock to pool (lock mode ``"none"``) goes through its protocol
    before the other parts' locks are taken: its index lock is then never waited for while
    another lock is held, which keeps the global locking order whatever modes are mixed.
    """
    _refuse_repeats(parts)
    outs: dict[int, int] = {}  # each distinct out's address, checked once
    for table, batch, _, out, col in parts:
        if id(out) not in outs:
            check_out(out)
            outs[id(out)] = address(out)
        check_block(out, batch.batch_size, table.dim, col)
    unlocked = [part for part in parts if not part[0]._pool_locks[part[2]]]
    locked = [part for part in parts if part[0]._pool_locks[part[2]]]
    mapped = {id(part): part[0]._lookup_rows(part[1], part[2]) for part in unlocked}
    with _Held([part[0]._pool_locks[part[2]] for part in locked]):
        for part in locked:
            mapped[id(part)] = part[0]._lookup_rows(part[1], part[2])
        plan = [_pool_row(part, *mapped[id(part)], outs[id(part[3])]) for part in parts]
        # ``mapped`` keeps every rows array alive until the kernel is done: a batch closed
        # meanwhile (released, fed again) keeps no map of its own.
        k.pool_many(np.array(plan, dtype=np.int64).reshape(len(plan), k.POOL_PLAN_COLUMNS))
    return [out[:, col : col + table.dim] for table, _, _, out, col in parts]


def _pool_row(part: PoolPart, mapped: RowMap, offsets_at: int, out_at: int) -> tuple[int, ...]:
    """A part's row of a pool plan."""
    table, batch, _, out, col = part
    return (
        *table._pool_plan,
        mapped.at,
        mapped.rows.shape[0],
        offsets_at,
        batch.batch_size,
        out_at,
        out.shape[1],
        col,
        batch.scales_at(part[2]),
    )


def push_shards(parts: Sequence[PushPart]) -> None:
    """Apply every part's gradient, in one kernel call: each shard's gradients summed by row,
    then its table's optimizer. A gradient is read in place if it has positive strides (a
    block of a wider matrix, or a transposed one), else copied first. A shard whose mapping
    fails (a full shard) leaves every part unapplied, and every part's batch closed for its
    table: a push is its batch's last use."""
    _refuse_repeats(parts)
    if not parts:
        return
    checked = []
    for table, batch, shard, grads in parts:
        table._shard_view(batch, shard)
        array, layout = _readable(table._checked_grads(grads, batch.batch_size))
        checked.append((table, batch, shard, array, layout))
    plan: list[tuple[int, ...]] = []
    done: list[tuple[EmbeddingTable, ShardedBatch, int, RowMap]] = []
    with _Held([part[0]._push_locks[part[2]] for part in parts]):
        try:
            for table, batch, shard, grads, layout in checked:
                mapped, reused, offsets_at = table._push_rows(batch, shard)
                done.append((table, batch, shard, mapped))  # keeps the rows alive too
                n = mapped.rows.shape[0]
                plan.append(
                    (
                        *table._push_plan,
                        mapped.at,
                        n,
                        offsets_at,
                        batch.batch_size,
                        shard,
                        n if reused else 0,
                        address(grads),
                        *layout,
                        batch.scales_at(shard),
                    )
                )
            k.push_many(np.array(plan, dtype=np.int64).reshape(len(plan), k.PUSH_PLAN_COLUMNS))
        finally:
            # Only now: until the updates are written, no insert may take these rows.
            for table, batch, shard, mapped in done:
                table._push_done(batch, shard, mapped)


def _refuse_repeats(parts: Sequence[PinPart] | Sequence[PoolPart] | Sequence[PushPart]) -> None:
    """One shard of one table may come once in a call, whatever the batch: a second part
    would map under the first's rows (evicting them, or closing them) before the kernel
    reads them, and a second pin would take its pending number before the first's rows
    exist to be stamped. Two batches of one shard take a call each."""
    seen = {(id(part[0]), part[2]) for part in parts}
    if len(seen) != len(parts):
        raise ValueError(
            "a grouped call names one shard of one table more than once "
            "(two batches of one shard take a call each)"
        )


def check_out(out: NDArray[np.float32]) -> None:
    """The kernels write ``out`` without bounds checks: refuse anything they could overrun."""
    if not is_float32_matrix(out) or not out.flags.aligned:
        raise ValueError(
            "out must be a writable, aligned, C-contiguous float32 matrix [batch, width]"
        )


def check_block(out: NDArray[np.float32], batch_size: int, dim: int, col: int) -> None:
    """Refuse an ``out`` (checked by :func:`check_out`) with no room for a shard's block."""
    if out.shape[0] != batch_size or not 0 <= col <= out.shape[1] - dim:
        raise ValueError(
            f"out of shape {out.shape} has no room for a [{batch_size}, {dim}] block at "
            f"column {col}"
        )


_STATE_OF_KIND = {
    k.OPT_SGD: (0, False),
    k.OPT_ADAGRAD: (1, False),
    k.OPT_ADAM: (2, True),
    k.OPT_FTRL: (2, False),
}
"""State slots and per-row steps each optimizer kind's update writes."""


def pool_plan(table: EmbeddingTable) -> tuple[int, ...]:
    """A table's first pool plan columns, found once when it is made: its arrays never move."""
    return (address(table._weights), table.capacity, table.dim, table.pooling == "separate")


def push_plan(table: EmbeddingTable) -> tuple[int, ...]:
    """A table's first push plan columns, which never change (its arrays never move). An
    optimizer whose kind the kernel does not know, or whose state is smaller than that
    kind's update writes, is refused here, before any push."""
    optimizer = table.optimizer
    needs = _STATE_OF_KIND.get(getattr(optimizer, "kind", -1))
    if needs is None or optimizer.slots < needs[0] or (needs[1] and not optimizer.uses_steps):
        raise TypeError(
            f"{type(optimizer).__name__} is not an optimizer the store's kernels apply: "
            "use SGD, Adagrad, Adam or Ftrl"
        )
    return (
        address(table._weights),
        table.capacity,
        table.dim,
        optimizer.kind,
        address(optimizer.kernel_array),  # kept alive by the optimizer, which caches it
        address(table._state),
        optimizer.slots,
        address(table._steps),
        table._steps.shape[0],
        address(table._slot_of_row),
        address(table._counters),
        table.num_shards,
    )


def map_plan(table: EmbeddingTable) -> tuple[int, ...]:
    """A table's first map plan columns (its arrays never move; its initializer and its
    admission never change)."""
    sketch = table._sketch
    state = table._state
    return (
        address(table._slots),
        table._slots.shape[0],
        address(table._slot_of_row),
        address(table._stamps),
        table.capacity,
        address(table._meta),
        address(table._counters),
        table.num_shards,
        address(sketch),
        sketch.shape[1],
        sketch.shape[2],
        table._min_count,
        address(table._weights),
        table.dim,
        address(state),
        state.shape[1],
        address(table._state_init),
        address(table._steps),
        table._steps.shape[0],
        int(np.array(table._seed_key, dtype=np.uint64).view(np.int64)),
        table.initializer.kind,
        address(table._init_params),
    )


def max_abs_matrices(matrices: Sequence[NDArray[Any]]) -> NDArray[np.float64]:
    """The largest ``|x|`` of each float32 matrix that :func:`strides_of` can read (NaN where
    one is NaN), in one kernel call, without copying a block of a wider matrix first.

    One call, not one a matrix: a ps checks every gradient of a PushGrad before it applies
    any, on its event loop, and each kernel call gives up the GIL and must take it back, which
    waits while another thread runs Python. 26 calls (a criteo push) took 0.08 ms alone and 29
    ms beside a thread looping in Python; in the one-process job a seed_ctr 0.02 push's check
    went from 0.39 to 0.31 ms, criteo's stayed at 0.10 (CHANGELOG.md, 2026-11-27,
    ce5548e)."""
    plan = np.empty((len(matrices), 5), dtype=np.int64)
    for p, matrix in enumerate(matrices):
        strides = strides_of(matrix)
        if strides is None:
            raise ValueError("max_abs_matrices reads float32 matrices with positive strides only")
        plan[p] = (address(matrix), *matrix.shape, *strides)
    out = np.empty(len(matrices), dtype=np.float64)
    k.max_abs_many(plan, out)
    return out


def strides_of(matrix: NDArray[Any]) -> tuple[int, int] | None:
    """A float32 matrix's ``(row, column)`` strides in elements, if a push kernel can read it
    in place: aligned, both strides positive (an axis of one element counts as stride 1), as
    in a C- or Fortran-ordered matrix or a block of one; else None (copy it first, or, not
    float32, convert it)."""
    if matrix.dtype != np.float32 or matrix.ndim != 2 or not matrix.flags.aligned:
        return None
    (rows, cols), (row_step, col_step) = matrix.shape, matrix.strides
    row_stride = row_step >> 2 if rows > 1 else 1
    col_stride = col_step >> 2 if cols > 1 else 1
    if row_stride <= 0 or col_stride <= 0 or (row_step | col_step) & 3:
        return None
    return row_stride, col_stride


def _readable(grads: NDArray[np.float32]) -> tuple[NDArray[np.float32], tuple[int, int, int]]:
    """A checked gradient as the push kernel reads it, with its strides and the flat size they
    span: itself, or where :func:`strides_of` cannot read it an aligned copy, in its own
    layout where that is C or Fortran order (a gradient sent transposed, at an odd offset of
    its message, is copied straight, not transposed), else C-ordered. ``ascontiguousarray``
    would hand back a contiguous array as it is, aligned or not."""
    strides = strides_of(grads)
    if strides is None:
        grads = np.require(grads, np.float32, ["A"])
        strides = strides_of(grads)
    if strides is None:
        grads = np.require(grads, np.float32, ["C", "A"])
        strides = (grads.shape[1], 1)
    rows, cols = grads.shape
    row_stride, col_stride = strides
    size = (rows - 1) * row_stride + (cols - 1) * col_stride + 1 if rows and cols else 0
    return grads, (row_stride, col_stride, size)
