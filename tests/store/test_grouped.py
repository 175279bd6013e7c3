"""Grouped shard operations (``pin_shards``, ``pool_shards``, ``push_shards``): many tables in
one kernel call give exactly what one call per shard gives, read gradients of any positive
strides in place, change nothing on bad input, and take their locks in an order nothing can
deadlock on."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from numpy.typing import NDArray

from sniper.store import (
    SGD,
    Adagrad,
    Adam,
    Admission,
    EmbeddingTable,
    Ftrl,
    LockMode,
    Optimizer,
    ShardedBatch,
    _pointers,
    normal,
    pin_shards,
    pool_shards,
    push_shards,
    uniform,
)
from sniper.store import _kernels as kernels
from sniper.store._grouped import _readable, max_abs_matrices, strides_of
from sniper.store._pointers import address

BATCH = 24

# (dim, optimizer, shards, lock, pooling): every optimizer kind, dims on and off the
# 16-lane path, one and several shards, every lock mode, both poolings.
SPECS: list[tuple[int, Optimizer, int, LockMode, str]] = [
    (16, Adagrad(lr=0.1), 1, "shard", "fused"),
    (3, SGD(lr=0.5), 3, "table", "fused"),
    (16, Adam(lr=0.01), 2, "global", "separate"),
    (5, Ftrl(alpha=0.1, l1=0.01), 1, "none", "fused"),
    (16, Adagrad(lr=0.05, initial_accumulator_value=0.1), 4, "shard", "separate"),
]


def _tables() -> list[EmbeddingTable]:
    return [
        EmbeddingTable(
            dim,
            capacity=512,
            optimizer=optimizer,
            initializer=uniform(-0.5, 0.5),
            num_shards=shards,
            lock=lock,
            pooling=pooling,  # type: ignore[arg-type]
            seed=i,
        )
        for i, (dim, optimizer, shards, lock, pooling) in enumerate(SPECS)
    ]


def _batches(tables: list[EmbeddingTable], seed: int) -> list[ShardedBatch]:
    rng = np.random.default_rng(seed)
    batches = []
    for table in tables:
        lengths = rng.integers(0, 6, size=BATCH)
        signs = rng.integers(0, 300, size=int(lengths.sum())).astype(np.uint64)
        batches.append(table.split(signs, np.concatenate([[0], np.cumsum(lengths)])))
    return batches


def _grads(tables: list[EmbeddingTable], seed: int) -> list[NDArray[np.float32]]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(BATCH, t.dim)).astype(np.float32) for t in tables]


def _state(table: EmbeddingTable) -> tuple[NDArray[np.generic], ...]:
    data = table.export()
    order = np.argsort(data.signs)
    return (data.signs[order], data.weights[order], data.state[order], data.steps[order])


def test_grouped_calls_give_exactly_what_one_call_per_shard_gives() -> None:
    grouped, alone = _tables(), _tables()
    for step in range(4):
        batches = _batches(grouped, step)
        twins = _batches(alone, step)
        grads = _grads(grouped, 100 + step)
        # One grouped lookup of every shard of every table, into one matrix...
        width = sum(t.dim for t in grouped)
        matrix = np.full((BATCH, width), np.nan, dtype=np.float32)
        cols = np.cumsum([0] + [t.dim for t in grouped])[:-1]
        parts = []
        for table, batch, col in zip(grouped, batches, cols, strict=True):
            parts += [
                (table, batch, shard, np.empty((BATCH, table.dim), np.float32), 0)
                for shard in range(1, table.num_shards)
            ]
            parts.append((table, batch, 0, matrix, int(col)))
        blocks = pool_shards(parts)
        # ...against one lookup per shard on the twins.
        for (table, _, shard, out, _), block in zip(parts, blocks, strict=True):
            twin = alone[grouped.index(table)]
            expected = twin.lookup_shard(twins[grouped.index(table)], shard)
            np.testing.assert_array_equal(block, expected)
            assert np.shares_memory(block, out)
        push_shards(
            [
                (table, batch, shard, grad)
                for table, batch, grad in zip(grouped, batches, grads, strict=True)
                for shard in range(table.num_shards)
            ]
        )
        for twin, batch, grad in zip(alone, twins, grads, strict=True):
            for shard in range(twin.num_shards):
                twin.push_grad_shard(batch, shard, grad)
    for table, twin in zip(grouped, alone, strict=True):
        for mine, theirs in zip(_state(table), _state(twin), strict=True):
            np.testing.assert_array_equal(mine, theirs)
        assert table.statistics() == twin.statistics()
        assert table.pinned_rows() == 0


def _pin_tables() -> list[EmbeddingTable]:
    """The grouped-call tables, plus one that admits signs seen twice and one with the normal
    initializer."""
    return [
        *_tables(),
        EmbeddingTable(
            8, capacity=512, optimizer=Adagrad(0.1), admission=Admission(2, width=64), seed=7
        ),
        EmbeddingTable(16, capacity=512, optimizer=Adam(0.01), initializer=normal(0.3), seed=8),
    ]


def _all_shards(
    tables: list[EmbeddingTable], batches: list[ShardedBatch]
) -> list[tuple[EmbeddingTable, ShardedBatch, int]]:
    return [
        (table, batch, shard)
        for table, batch in zip(tables, batches, strict=True)
        for shard in range(table.num_shards)
    ]


def _train(tables: list[EmbeddingTable], batches: list[ShardedBatch], seed: int) -> list[Any]:
    """Look up and push every shard of every table, one call each: the pooled blocks."""
    pooled = []
    for table, batch, grad in zip(tables, batches, _grads(tables, seed), strict=True):
        pooled += [table.lookup_shard(batch, s) for s in range(table.num_shards)]
        for shard in range(table.num_shards):
            table.push_grad_shard(batch, shard, grad)
    return pooled


def test_grouped_pins_map_what_one_pin_per_shard_and_a_lookup_map() -> None:
    """Pins of every shard of every table in one call leave the tables, their statistics and
    every later lookup exactly as one pin per shard does; and the rows, lookups and pushes as
    mapping at lookup time (no pins) does."""
    grouped, alone, unpinned = _pin_tables(), _pin_tables(), _pin_tables()
    for step in range(4):
        batches, twins = _batches(grouped, step), _batches(alone, step)
        pinned = pin_shards(_all_shards(grouped, batches))
        assert pinned == [
            twin.pin_shard(batch, shard) for twin, batch, shard in _all_shards(alone, twins)
        ]
        assert all(pinned)
        assert [t.pinned_rows() for t in grouped] == [t.pinned_rows() for t in alone]
        pooled = _train(grouped, batches, step)
        for mine, theirs in zip(pooled, _train(alone, twins, step), strict=True):
            np.testing.assert_array_equal(mine, theirs)
        mapped_at_lookup = _train(unpinned, _batches(unpinned, step), step)
        for mine, theirs in zip(pooled, mapped_at_lookup, strict=True):
            np.testing.assert_array_equal(mine, theirs)
    for table, twin, other in zip(grouped, alone, unpinned, strict=True):
        assert table.statistics() == twin.statistics()
        for mine, theirs, unpinned_state in zip(
            _state(table), _state(twin), _state(other), strict=True
        ):
            np.testing.assert_array_equal(mine, theirs)
            np.testing.assert_array_equal(mine, unpinned_state)
        assert table.pinned_rows() == 0


def test_a_grouped_pin_skips_shards_mapped_or_closed_and_declines_a_full_one_alone() -> None:
    small = EmbeddingTable(4, capacity=8, optimizer=SGD(0.5))
    big = EmbeddingTable(4, capacity=64, optimizer=SGD(0.5), num_shards=2)
    held = small.split(np.arange(1, 7, dtype=np.uint64), np.array([0, 3, 6]))
    assert pin_shards([(small, held, 0)]) == [True]
    # Six of eight rows are pinned and this batch needs five new ones: its pin declines, and
    # the other table's pins in the same call go ahead.
    other = small.split(np.arange(10, 15, dtype=np.uint64), np.array([0, 2, 5]))
    fed = big.split(np.arange(1, 9, dtype=np.uint64), np.array([0, 4, 8]))
    parts = [(small, other, 0), (big, fed, 0), (big, fed, 1)]
    assert pin_shards(parts) == [False, True, True]
    # Pinned already, or pinned by the call before: nothing to do.
    assert pin_shards([(small, held, 0), *parts[1:]]) == [False, False, False]
    assert small.pinned_rows() == 6 and big.pinned_rows() == 8
    # The declined pin left no pending number behind: once the held batch is released,
    # every row can be evicted again.
    small.unpin(held)
    assert pin_shards([(small, other, 0)]) == [True]
    small.unpin(other)
    big.unpin(fed)
    for start in range(100, 160, 6):
        small.lookup_pool(np.arange(start, start + 6, dtype=np.uint64), np.array([0, 6]))
    assert small.pinned_rows() == 0 and big.pinned_rows() == 0
    assert small._low_water(0) == kernels.NO_PENDING


def test_a_grouped_pin_whose_shard_is_full_of_ended_calls_rows_maps_again_and_pins() -> None:
    """A shard's rows stamped by calls that have ended stay protected while an older pin is
    pending; a pin that runs out of rows stamps the shard again from its pins alone and maps
    once more, in a group as alone."""
    small = EmbeddingTable(4, capacity=8, optimizer=SGD(0.5))
    big = EmbeddingTable(4, capacity=64, optimizer=SGD(0.5))
    held = small.split(np.array([1, 2], np.uint64), np.array([0, 1, 2]))
    assert pin_shards([(small, held, 0)]) == [True]
    small.lookup_pool(np.arange(3, 8, dtype=np.uint64), np.array([0, 5]))  # no stamps yet
    # This lookup could evict, so it stamps its rows; they outlive it, behind the held pin.
    small.lookup_pool(np.arange(8, 11, dtype=np.uint64), np.array([0, 3]))
    fed = small.split(np.arange(20, 26, dtype=np.uint64), np.array([0, 3, 6]))
    other = big.split(np.arange(20, 26, dtype=np.uint64), np.array([0, 3, 6]))
    assert pin_shards([(big, other, 0), (small, fed, 0)]) == [True, True]
    assert small.pinned_rows() == 8 and 1 in small and 2 in small
    pooled = small.lookup_shard(fed, 0)
    np.testing.assert_array_equal(pooled, small.lookup_pool(fed.signs, np.array([0, 3, 6])))


def test_a_pin_protocol_that_fails_part_way_ends_the_numbers_taken_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tables = _tables()[:3]
    batches = _batches(tables, 0)
    start = EmbeddingTable._pin_start
    calls = []

    def fails_third(self: EmbeddingTable, *args: Any) -> Any:
        calls.append(self)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return start(self, *args)

    monkeypatch.setattr(EmbeddingTable, "_pin_start", fails_third)
    with pytest.raises(KeyboardInterrupt):
        pin_shards(_all_shards(tables, batches))
    monkeypatch.undo()
    for table in tables:
        assert table.pinned_rows() == 0
        assert all(table._low_water(s) == kernels.NO_PENDING for s in range(table.num_shards))


def test_a_failed_grouped_map_leaves_no_pin_and_no_pending_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A map kernel that cannot run (here: out of memory) fails the call, and the shards'
    pending numbers end with it: nothing is pinned and rows stay evictable."""
    tables = _tables()
    batches = _batches(tables, 0)

    def out_of_memory(*args: object) -> None:
        raise MemoryError("no room for the map")

    monkeypatch.setattr(kernels, "map_many", out_of_memory)
    with pytest.raises(MemoryError):
        pin_shards(_all_shards(tables, batches))
    for table in tables:
        assert table.pinned_rows() == 0
        assert all(table._low_water(s) == kernels.NO_PENDING for s in range(table.num_shards))
    monkeypatch.undo()
    assert all(pin_shards(_all_shards(tables, batches)))


def test_signs_a_kernel_cannot_read_in_place_are_refused() -> None:
    table = EmbeddingTable(4, capacity=64, optimizer=SGD(0.5))
    offsets = np.array([[0, 2, 4]], dtype=np.int64)
    for signs in (np.arange(4, dtype=np.int64), np.arange(8, dtype=np.uint64)[::2]):
        batch = ShardedBatch(signs, offsets)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="aligned C-contiguous uint64"):
            pin_shards([(table, batch, 0)])
        assert table.pinned_rows() == 0 and len(table) == 0


def _layouts(grad: NDArray[np.float32]) -> dict[str, NDArray[np.float32]]:
    """The same values as C order, a column block of a wider matrix, a block of a transposed
    product (what the trainer pushes), every other row of a taller one, every other row and
    column of a bigger one, and reversed rows (negative strides: copied first)."""
    rows, dim = grad.shape
    wide = np.zeros((rows, dim + 7), np.float32)
    wide[:, 3 : 3 + dim] = grad
    tall_t = np.zeros((dim + 5, rows), np.float32)
    tall_t[2 : 2 + dim] = grad.T
    tall = np.zeros((2 * rows, dim), np.float32)
    tall[::2] = grad
    sparse = np.zeros((2 * rows, 2 * dim), np.float32)
    sparse[::2, ::2] = grad
    flipped = np.ascontiguousarray(grad[::-1])[::-1]
    return {
        "c": np.ascontiguousarray(grad),
        "column block": wide[:, 3 : 3 + dim],
        "transposed block": tall_t[2 : 2 + dim].T,
        "every other row": tall[::2],
        "every other row and column": sparse[::2, ::2],  # no stride of 1
        "negative strides": flipped,
    }


@pytest.mark.parametrize(
    "layout", ["column block", "transposed block", "every other row", "negative strides"]
)
def test_gradients_of_any_layout_update_rows_as_a_contiguous_copy_does(layout: str) -> None:
    results = {}
    for name in ("c", layout):
        tables = _tables()
        for step in range(3):
            batches = _batches(tables, step)
            grads = [_layouts(g)[name] for g in _grads(tables, 7 + step)]
            push_shards(
                [
                    (table, batch, shard, grad)
                    for table, batch, grad in zip(tables, batches, grads, strict=True)
                    for shard in range(table.num_shards)
                ]
            )
        results[name] = [_state(table) for table in tables]
    for mine, theirs in zip(results[layout], results["c"], strict=True):
        for a, b in zip(mine, theirs, strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_bad_gradient_in_one_part_changes_no_table() -> None:
    tables = _tables()
    batches = _batches(tables, 0)
    for table, batch in zip(tables, batches, strict=True):
        for shard in range(table.num_shards):
            table.lookup_shard(batch, shard)  # rows exist and are mapped for the push
    before = [_state(table) for table in tables]
    grads: list[object] = list(_grads(tables, 1))
    grads[-1] = np.ones((BATCH, 99), np.float32)
    with pytest.raises(ValueError, match=r"grads must be float32 of shape \(24, 16\)"):
        push_shards(
            [
                (table, batch, shard, grad)  # type: ignore[misc]
                for table, batch, grad in zip(tables, batches, grads, strict=True)
                for shard in range(table.num_shards)
            ]
        )
    for table, state in zip(tables, before, strict=True):
        for a, b in zip(_state(table), state, strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_batch_split_by_another_table_is_refused_before_anything_changes() -> None:
    tables = _tables()
    batches = _batches(tables, 0)
    before = [_state(table) for table in tables]
    grads = _grads(tables, 1)
    # tables[1] has three shards; tables[0]'s batch was split into one.
    with pytest.raises(ValueError, match="split into 1 shards, the table has 3"):
        push_shards([(tables[0], batches[0], 0, grads[0]), (tables[1], batches[0], 0, grads[1])])
    for table, state in zip(tables, before, strict=True):
        for a, b in zip(_state(table), state, strict=True):
            np.testing.assert_array_equal(a, b)


def test_an_out_without_room_is_refused() -> None:
    (table, *_) = _tables()
    (batch, *_) = _batches([table], 0)
    with pytest.raises(ValueError, match="no room for a \\[24, 16\\] block at column 10"):
        pool_shards([(table, batch, 0, np.empty((BATCH, 20), np.float32), 10)])
    with pytest.raises(ValueError, match="writable, aligned, C-contiguous float32 matrix"):
        pool_shards([(table, batch, 0, np.empty((BATCH, 32), np.float32).T.T[:, ::2], 0)])


LOCK_MIXES: list[tuple[LockMode, ...]] = [
    ("global",) * 3,
    ("table",) * 3,
    ("shard",) * 3,
    ("none",) * 3,
    ("none", "shard", "table"),
    ("global", "none", "shard"),
]


@pytest.mark.parametrize("locks", LOCK_MIXES, ids="-".join)
def test_grouped_calls_in_opposite_orders_and_whole_table_reads_never_deadlock(
    locks: tuple[LockMode, ...],
) -> None:
    tables = [
        EmbeddingTable(4, capacity=256, optimizer=SGD(0.1), num_shards=3, lock=lock)
        for lock in locks
    ]
    rounds = 60
    failures: list[BaseException] = []

    def calls(order: list[int], seed: int) -> Callable[[], None]:
        def run() -> None:
            try:
                for step in range(rounds):
                    batches = _batches(tables, seed + step)
                    parts = [(i, shard) for i in order for shard in reversed(range(3))]
                    pool_shards(
                        [
                            (tables[i], batches[i], shard, np.empty((BATCH, 4), np.float32), 0)
                            for i, shard in parts
                        ]
                    )
                    grad = np.full((BATCH, 4), 0.01, np.float32)
                    push_shards([(tables[i], batches[i], shard, grad) for i, shard in parts])
            except BaseException as exc:  # reported below: a thread must not die silently
                failures.append(exc)

        return run

    def exports() -> None:
        for _ in range(rounds):
            for table in tables:
                table.export()

    threads = [
        threading.Thread(target=calls([0, 1, 2], 0), daemon=True),
        threading.Thread(target=calls([2, 1, 0], 1000), daemon=True),
        threading.Thread(target=exports, daemon=True),
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "grouped calls deadlocked"
    assert not failures


def test_a_lookup_of_a_batch_closed_meanwhile_pools_rows_kept_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch whose shard is closed (pushed, released) is mapped again by a lookup and the
    map is not kept with the batch: the call itself must keep every part's rows alive until
    its kernel has read them (freed rows would be read as row numbers)."""
    tables, twins = _tables(), _tables()
    batches, twin_batches = _batches(tables, 5), _batches(twins, 5)
    for group, group_batches in ((tables, batches), (twins, twin_batches)):
        for table, batch in zip(group, group_batches, strict=True):
            table.lookup_shard(batch, 0)
            table.push_grad_shard(batch, 0, np.ones((BATCH, table.dim), np.float32))
    expected = [
        twin.lookup_shard(batch, 0) for twin, batch in zip(twins, twin_batches, strict=True)
    ]
    # Every rows array the protocol handed out must still be alive when the kernel runs.
    handed: list[weakref.ref[NDArray[np.int64]]] = []
    lookup_rows, pool_many = EmbeddingTable._lookup_rows, kernels.pool_many

    def recording(self: EmbeddingTable, batch: ShardedBatch, shard: int) -> Any:
        mapped, offsets_at = lookup_rows(self, batch, shard)
        handed.append(weakref.ref(mapped.rows))
        return mapped, offsets_at

    def checking(plan: NDArray[np.int64]) -> None:
        gc.collect()
        assert all(ref() is not None for ref in handed), "rows freed before the kernel"
        pool_many(plan)

    monkeypatch.setattr(EmbeddingTable, "_lookup_rows", recording)
    monkeypatch.setattr(kernels, "pool_many", checking)
    blocks = pool_shards(
        [
            (table, batch, 0, np.empty((BATCH, table.dim), np.float32), 0)
            for table, batch in zip(tables, batches, strict=True)
        ]
    )
    assert len(handed) == len(tables)
    for block, want in zip(blocks, expected, strict=True):
        np.testing.assert_array_equal(block, want)


def test_empty_calls_batches_and_rows_not_admitted() -> None:
    assert pool_shards([]) == []
    push_shards([])
    table = EmbeddingTable(
        16, capacity=64, optimizer=Adagrad(0.1), initializer=uniform(-1, 1), admission=Admission(2)
    )
    empty = table.split(np.empty(0, np.uint64), np.zeros(1, np.int64))
    (block,) = pool_shards([(table, empty, 0, np.empty((0, 16), np.float32), 0)])
    assert block.shape == (0, 16)
    push_shards([(table, empty, 0, np.empty((0, 16), np.float32))])
    # Seen once, sign 7 is not admitted yet: it reads as zeros and its gradient is dropped.
    batch = table.split(np.array([7], np.uint64), np.array([0, 1, 1]))
    (block,) = pool_shards([(table, batch, 0, np.full((2, 16), np.nan, np.float32), 0)])
    np.testing.assert_array_equal(block, np.zeros((2, 16), np.float32))
    push_shards([(table, batch, 0, np.ones((2, 16), np.float32))])
    assert table.statistics().dropped_gradients == 1
    assert 7 not in table


def test_a_shard_named_twice_or_a_foreign_optimizer_is_refused() -> None:
    (table, *_) = _tables()
    (batch, *_) = _batches([table], 0)
    out = np.empty((BATCH, 32), np.float32)
    with pytest.raises(ValueError, match="more than once"):
        pool_shards([(table, batch, 0, out, 0), (table, batch, 0, out, 16)])
    grad = np.zeros((BATCH, 16), np.float32)
    with pytest.raises(ValueError, match="more than once"):
        push_shards([(table, batch, 0, grad), (table, batch, 0, grad)])
    with pytest.raises(ValueError, match="more than once"):
        pin_shards([(table, batch, 0), (table, batch, 0)])
    # Two batches of one shard: the second would map before the first's rows exist.
    (other, *_) = _batches([table], 1)
    for call in (
        lambda: pin_shards([(table, batch, 0), (table, other, 0)]),
        lambda: pool_shards([(table, batch, 0, out, 0), (table, other, 0, out, 16)]),
        lambda: push_shards([(table, batch, 0, grad), (table, other, 0, grad)]),
    ):
        with pytest.raises(ValueError, match="two batches of one shard take a call each"):
            call()
    assert table.pinned_rows() == 0 and len(table) == 0

    class Mine(SGD):
        kind = 99

    with pytest.raises(TypeError, match="Mine is not an optimizer the store's kernels apply"):
        EmbeddingTable(4, capacity=8, optimizer=Mine())


@pytest.mark.parametrize("order", ["C", "F"])
def test_misaligned_gradients_are_copied_and_misaligned_outs_refused(
    order: Literal["C", "F"],
) -> None:
    """``F``: a gradient sent transposed (``grad_transposed``) at an odd offset of its message;
    its aligned copy keeps its layout, a straight copy rather than a transposing one."""
    tables, twins = _tables()[:1], _tables()[:1]
    (batch,) = _batches(tables, 0)
    (twin_batch,) = _batches(twins, 0)
    grad = _grads(tables, 1)[0]
    raw = np.zeros(grad.nbytes + 1, np.uint8)
    misaligned = raw[1:].view(np.float32).reshape(grad.shape, order=order)
    misaligned[...] = grad
    assert not misaligned.flags.aligned and misaligned.flags[order]
    copied, _ = _readable(misaligned)
    assert copied.flags.aligned and copied.flags[order]
    push_shards([(tables[0], batch, 0, misaligned)])
    push_shards([(twins[0], twin_batch, 0, grad)])
    for a, b in zip(_state(tables[0]), _state(twins[0]), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="aligned"):
        pool_shards([(tables[0], batch, 0, misaligned, 0)])


def test_address_is_where_the_data_starts(tmp_path: Path) -> None:
    base = np.arange(64, dtype=np.float32).reshape(8, 8)
    for array in (
        base,
        base[2:],
        base[:, 3:5],
        base.T,
        np.frombuffer(bytes(64), np.float32),  # read-only
        np.empty(0, np.float32),
        np.memmap(tmp_path / "rows", np.float32, "w+", shape=(4, 4))[1:],  # a subclass
    ):
        assert _pointers._DATA_FIELD is not None  # read from the struct on this build
        assert address(array) == array.__array_interface__["data"][0]
    with pytest.raises(TypeError, match="an address is an ndarray's, got bytes"):
        address(b"\0" * 8)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "layout",
    ["c", "column block", "transposed block", "every other row", "every other row and column"],
)
def test_max_abs_matrices_reads_any_positive_strides(layout: str) -> None:
    grad = np.random.default_rng(3).normal(size=(33, 5)).astype(np.float32)
    grad[7, 2] = -41.5
    matrix = _layouts(grad)[layout]
    assert strides_of(matrix) is not None
    assert max_abs_matrices([matrix]).tolist() == [41.5]
    for bad in (np.inf, -np.inf, np.nan):
        broken = grad.copy()
        broken[32, 4] = bad
        clean, value = max_abs_matrices([matrix, _layouts(broken)[layout]])
        assert clean == 41.5  # each matrix its own answer
        assert np.isnan(value) if np.isnan(bad) else value == np.inf


def test_max_abs_matrices_refuses_what_it_cannot_read() -> None:
    for matrix in (np.zeros((3, 2)), np.zeros(4, np.float32), np.zeros((3, 2), np.float32)[::-1]):
        with pytest.raises(ValueError, match="float32 matrices with positive strides only"):
            max_abs_matrices([np.ones((2, 2), np.float32), matrix])


def test_strides_of_refuses_what_a_kernel_cannot_read() -> None:
    base = np.zeros((4, 6), np.float32)
    assert strides_of(base) == (6, 1)
    assert strides_of(base.T) == (1, 6)
    assert strides_of(base[::-1]) is None
    assert strides_of(np.broadcast_to(base[:1], (4, 6))) is None
    assert strides_of(base.reshape(-1)) is None
    # Misaligned (a tensor's bytes at an odd offset in a message): copied, never read by
    # address, which a kernel could load with aligned vector instructions.
    assert strides_of(np.frombuffer(bytes(25), np.float32, offset=1).reshape(2, 3)) is None


@pytest.mark.parametrize("optimizer", [spec[1] for spec in SPECS])
def test_optimizer_apply_is_the_update_a_push_applies(optimizer: Optimizer) -> None:
    """``Optimizer.apply`` on bare arrays and a table's push run the same kernel."""
    table = EmbeddingTable(3, capacity=64, optimizer=optimizer, initializer=uniform(-1, 1))
    signs = np.arange(8, dtype=np.uint64)  # one sign per example: each row gets its gradient
    table.lookup_pool(signs, np.arange(9))
    before = table.export()
    grads = np.random.default_rng(4).normal(size=(8, 3)).astype(np.float32)
    weights, state, steps = before.weights.copy(), before.state.copy(), before.steps.copy()
    order = np.argsort(before.signs)
    rows = order.astype(np.int64)  # row i of the export holds sign before.signs[i]
    skipped = optimizer.apply(weights, state, steps, rows, grads)
    table.push_grad(signs, np.arange(9), grads)
    after = table.export()
    assert skipped == 0
    np.testing.assert_array_equal(after.weights, weights)
    np.testing.assert_array_equal(after.state, state)
