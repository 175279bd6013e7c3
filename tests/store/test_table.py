"""Example tests of EmbeddingTable: threads, lock modes, determinism, bad input, memory."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
from typing import Any

import numpy as np
import pytest

from sniper.hashing import shard_of
from sniper.store import (
    LOCK_MODES,
    SGD,
    Adagrad,
    Adam,
    CapacityError,
    EmbeddingTable,
    Ftrl,
    LockMode,
    Optimizer,
    normal,
    uniform,
    zeros,
)
from sniper.store._kernels import (
    _ZIG_RATIO,
    INIT_NORMAL,
    _ziggurat_first,
    _ziggurat_rest,
    initial_rows,
    mix64,
)

ONE = np.array([0, 1])


def u64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


@pytest.mark.parametrize("lock", ["global", "table", "shard"])
def test_concurrent_push_grad_loses_no_update(lock: LockMode) -> None:
    threads, pushes, signs_per_push = 4, 50, 64
    table = EmbeddingTable(
        2, capacity=256, optimizer=SGD(lr=1.0), initializer=zeros(), num_shards=3, lock=lock
    )
    signs = np.arange(signs_per_push, dtype=np.uint64) % 16  # every sign repeated 4x per push
    offsets = np.arange(signs_per_push + 1)
    grads = np.ones((signs_per_push, 2), dtype=np.float32)
    barrier = threading.Barrier(threads)

    def worker() -> None:
        barrier.wait()
        for _ in range(pushes):
            table.push_grad(signs, offsets, grads)

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=60)
    expected = -float(threads * pushes * (signs_per_push // 16))
    np.testing.assert_array_equal(
        table.get(np.arange(16, dtype=np.uint64)), np.full((16, 2), expected, dtype=np.float32)
    )


def test_lock_none_keeps_the_index_consistent_under_concurrent_eviction() -> None:
    table = EmbeddingTable(4, capacity=64, optimizer=Adagrad(0.1), num_shards=2, lock="none")
    barrier = threading.Barrier(4)

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        barrier.wait()
        for _ in range(200):
            signs = rng.integers(0, 200, size=16).astype(np.uint64)
            offsets = np.array([0, 8, 16])
            table.lookup_pool(signs, offsets)
            table.push_grad(signs, offsets, np.ones((2, 4), dtype=np.float32))

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=60)
    exported = table.export()
    assert len(exported.signs) == len(table) <= 64
    assert len(np.unique(exported.signs)) == len(exported.signs)
    for sign in exported.signs.tolist():
        assert sign in table
    np.testing.assert_array_equal(table.get(exported.signs), exported.weights)


def test_initial_value_depends_only_on_seed_and_sign() -> None:
    signs = u64(0, 1, 2**63, 2**64 - 1)
    a = EmbeddingTable(8, capacity=10, optimizer=SGD(0.1), seed=7)
    b = EmbeddingTable(8, capacity=100, optimizer=Adam(), seed=7, num_shards=3)
    c = EmbeddingTable(8, capacity=10, optimizer=SGD(0.1), seed=8)
    np.testing.assert_array_equal(a.get(signs), b.get(signs))
    assert not np.array_equal(a.get(signs), c.get(signs))
    b.lookup_pool(signs[::-1], np.array([0, 4]))
    np.testing.assert_array_equal(b.get(signs), a.get(signs))


def test_initial_value_is_the_same_in_another_process() -> None:
    script = (
        "import numpy as np\n"
        "from sniper.store import EmbeddingTable, SGD\n"
        "t = EmbeddingTable(4, capacity=4, optimizer=SGD(0.1), seed=3)\n"
        "print(t.get(np.array([12345], dtype=np.uint64)).tobytes().hex())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    here = EmbeddingTable(4, capacity=4, optimizer=SGD(0.1), seed=3).get(u64(12345))
    assert result.stdout.strip() == here.tobytes().hex()


def test_initializers_have_the_requested_distribution() -> None:
    signs = np.arange(20000, dtype=np.uint64)
    drawn = EmbeddingTable(
        4, capacity=1, optimizer=SGD(0.1), initializer=normal(0.5, mean=1.0)
    ).get(signs)
    assert abs(drawn.mean() - 1.0) < 0.02 and abs(drawn.std() - 0.5) < 0.02
    flat = EmbeddingTable(4, capacity=1, optimizer=SGD(0.1), initializer=uniform(-2, 2)).get(signs)
    assert flat.min() >= -2 and flat.max() < 2 and abs(flat.mean()) < 0.05


def test_batch_with_more_distinct_signs_than_capacity_is_refused() -> None:
    table = EmbeddingTable(2, capacity=3, optimizer=SGD(0.1))
    message = r"shard 0 holds 3 rows but the batch has 4 distinct signs there"
    with pytest.raises(CapacityError, match=message):
        table.lookup_pool(u64(1, 2, 3, 4), np.array([0, 4]))
    assert len(table) == 0
    table.lookup_pool(u64(1, 1, 2, 2, 3), np.array([0, 5]))  # 5 signs, 3 distinct: fits
    assert len(table) == 3


def test_a_refused_batch_evicts_nothing() -> None:
    """The failed call changes no row: the table's rows all survive a batch too big for it."""
    table = EmbeddingTable(4, capacity=400, optimizer=SGD(0.1), num_shards=4)
    held = np.arange(1, 301, dtype=np.uint64)
    table.lookup_pool(held, np.array([0, 300]))
    before = table.export()
    big = np.arange(10_000, 110_000, dtype=np.uint64)
    with pytest.raises(CapacityError, match="raise the table's capacity"):
        table.split(big, np.array([0, 100_000]))
    after = table.export()
    assert sorted(after.signs.tolist()) == sorted(before.signs.tolist()) == held.tolist()


@pytest.mark.parametrize(
    ("signs", "offsets", "message"),
    [
        (np.array([1, -2]), [0, 2], r"signs must be unsigned 64-bit integers"),
        (np.array([[1]], dtype=np.uint64), [0, 1], r"signs must be 1-D, got shape \(1, 1\)"),
        (u64(1, 2), [1, 2], r"offsets\[0\] must be 0, got 1"),
        (u64(1, 2), [0, 3], r"offsets\[-1\] must equal len\(signs\) = 2, got 3"),
        (
            u64(1, 2),
            [0, 2, 1, 2],
            r"offsets must be non-decreasing, but offsets\[2\] = 1 < offsets\[1\] = 2",
        ),
        (u64(1, 2), np.array([0.0, 2.0]), r"offsets must be a 1-D integer array"),
        (u64(1, 2), [], r"offsets must be a 1-D integer array"),
    ],
)
def test_bad_batches_name_the_field(signs: object, offsets: object, message: str) -> None:
    table = EmbeddingTable(2, capacity=8, optimizer=SGD(0.1))
    with pytest.raises((ValueError, TypeError), match=message):
        table.lookup_pool(signs, offsets)  # type: ignore[arg-type]
    assert len(table) == 0


def test_bad_grads_change_nothing() -> None:
    table = EmbeddingTable(2, capacity=8, optimizer=SGD(0.1))
    before = table.lookup_pool(u64(5), ONE).copy()
    with pytest.raises(
        ValueError,
        match=r"grads must be float32 of shape \(1, 2\), "
        r"got float64 of shape \(1, 2\)",
    ):
        table.push_grad(u64(5), ONE, np.ones((1, 2)))
    np.testing.assert_array_equal(table.lookup_pool(u64(5), ONE), before)


@pytest.mark.parametrize(
    "optimizer", [SGD(1e30), Adagrad(lr=0.1), Adam(lr=0.1), Ftrl()], ids=lambda o: type(o).__name__
)
def test_an_update_that_would_overflow_leaves_its_row_and_is_counted(optimizer: Optimizer) -> None:
    """A finite gradient too large for the row's state (g*g past float32's range) must not
    leave a NaN or Inf row to be served: the row keeps its values, other rows update."""
    table = EmbeddingTable(4, capacity=64, optimizer=optimizer)
    signs, offsets = u64(5, 6), np.array([0, 1, 2])
    before = table.lookup_pool(signs, offsets).copy()
    grads = np.array([[3e38] * 4, [0.5] * 4], dtype=np.float32)
    table.push_grad(signs, offsets, grads)
    after = table.lookup_pool(signs, offsets)
    assert np.isfinite(after).all()
    np.testing.assert_array_equal(after[0], before[0])  # the overflowing row kept its values
    assert not np.array_equal(after[1], before[1])  # the other row was updated
    assert table.statistics().nonfinite_updates == 1
    exported = table.export()  # its optimizer state too stayed finite
    assert np.isfinite(exported.state).all()


def test_gradients_that_overflow_only_once_summed_leave_their_row() -> None:
    """Each of the two occurrences' gradient is finite; their sum for the one row is Inf."""
    table = EmbeddingTable(4, capacity=64, optimizer=Adagrad(lr=0.1))
    signs, offsets = u64(5, 5, 6), np.array([0, 1, 2, 3])
    before = table.lookup_pool(signs, offsets).copy()
    grads = np.array([[3e38] * 4, [3e38] * 4, [0.5] * 4], dtype=np.float32)
    table.push_grad(signs, offsets, grads)
    after = table.lookup_pool(signs, offsets)
    np.testing.assert_array_equal(after[0], before[0])
    assert not np.array_equal(after[2], before[2])
    assert table.statistics().nonfinite_updates == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dim": 0}, "dim must be at least 1, got 0"),
        ({"capacity": 1, "num_shards": 2}, r"capacity must be at least num_shards \(2\), got 1"),
        ({"num_shards": 0}, r"num_shards must be in \[1, 65536\], got 0"),
        ({"capacity": 70000, "num_shards": 65537}, r"num_shards must be in \[1, 65536\], got 6"),
        ({"lock": "spin"}, "lock must be one of global, table, shard, none, got 'spin'"),
        ({"eviction": "fifo"}, r"eviction must be one of \('lru',\), got 'fifo'"),
    ],
)
def test_bad_table_arguments(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"dim": 4, "capacity": 8, "optimizer": SGD(0.1)} | kwargs
    with pytest.raises(ValueError, match=message):
        EmbeddingTable(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (lambda: SGD(lr=0), "lr must be a positive number within float32's range .*, got 0"),
        (lambda: Adagrad(lr=0.1, eps=-1), "eps must be a positive number .*, got -1"),
        (lambda: Adagrad(lr=0.1, eps=1e-50), "eps must be a positive number .*, got 1e-50"),
        (lambda: Adam(eps=1e-50), "eps must be a positive number .*, got 1e-50"),
        (lambda: SGD(lr=1e40), r"lr must be a positive number .*, got 1e\+40"),
        (
            lambda: Ftrl(beta=0.0, l2=0.0, initial_accumulator_value=0.0),
            "Ftrl needs beta > 0, l2 > 0 or initial_accumulator_value > 0",
        ),
        (lambda: Adam(beta1=1.0), r"beta1 must be in \[0, 1\), got 1.0"),
        (lambda: Ftrl(l1=-0.5), "l1 must be >= 0, got -0.5"),
        (lambda: uniform(1, 1), r"uniform initializer needs low < high, got \[1.0, 1.0\)"),
    ],
)
def test_bad_optimizer_and_initializer_arguments(factory: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        factory()  # type: ignore[operator]


@pytest.mark.parametrize("optimizer", [SGD(0.1), Adagrad(0.1), Adam(), Ftrl()])
@pytest.mark.parametrize("dim", [8, 16, 64])
def test_bytes_per_row_within_budget(optimizer: Optimizer, dim: int) -> None:
    capacity = 100_000
    table = EmbeddingTable(dim, capacity=capacity, optimizer=optimizer, num_shards=4)
    payload = 4 * dim * (1 + optimizer.slots) + (4 if optimizer.uses_steps else 0)
    assert table.statistics().bytes / capacity <= 1.25 * payload + 16


def test_lock_modes_are_listed() -> None:
    assert LOCK_MODES == ("global", "table", "shard", "none")


def test_contains_and_len() -> None:
    table = EmbeddingTable(2, capacity=8, optimizer=SGD(0.1), num_shards=2)
    table.lookup_pool(u64(3, 2**64 - 1), np.array([0, 1, 2]))
    assert 3 in table and 2**64 - 1 in table and 4 not in table
    assert -1 not in table and "x" not in table
    assert len(table) == 2


def test_push_reuses_lookup_rows_only_while_nothing_was_evicted() -> None:
    """lookup_shard + push_grad_shard of one batch equals a fresh push, with or without an
    eviction in between (which must make the push map its signs again)."""
    signs, offsets = u64(1, 2, 3, 2), np.array([0, 2, 4])
    grads = np.ones((2, 2), dtype=np.float32)
    for evict_between in (False, True):
        cached = EmbeddingTable(2, capacity=3, optimizer=Adagrad(0.5))
        fresh = EmbeddingTable(2, capacity=3, optimizer=Adagrad(0.5))
        batch = cached.split(signs, offsets)
        cached.lookup_shard(batch, 0)
        fresh.lookup_pool(signs, offsets)
        if evict_between:
            for table in (cached, fresh):
                table.lookup_pool(u64(50), ONE)  # evicts one of 1, 2, 3
        cached.push_grad_shard(batch, 0, grads)
        fresh.push_grad(signs, offsets, grads)
        exported_cached, exported_fresh = cached.export(), fresh.export()
        assert exported_cached.signs.tolist() == exported_fresh.signs.tolist()
        np.testing.assert_array_equal(exported_cached.weights, exported_fresh.weights)
        assert cached.statistics() == fresh.statistics()


def test_split_does_not_alias_the_callers_buffers() -> None:
    table = EmbeddingTable(2, capacity=8, optimizer=SGD(0.1))
    signs, offsets = u64(1, 2), np.array([0, 2])
    batch = table.split(signs, offsets)
    signs[:] = 99
    offsets[1] = 5
    assert batch.signs.tolist() == [1, 2]
    assert batch.shard_offsets.tolist() == [[0, 2]]


@pytest.mark.parametrize("shards", [2, 5, 8, 12, 64])
def test_split_puts_each_sign_in_the_shard_hashing_names(shards: int) -> None:
    """Power-of-two shard counts take a mask instead of a division: same shard either way."""
    rng = np.random.default_rng(shards)
    signs = rng.integers(0, 2**64 - 1, size=5000, dtype=np.uint64, endpoint=True)
    offsets = np.array([0, 1200, 1200, 5000], dtype=np.int64)
    table = EmbeddingTable(4, capacity=10_000, optimizer=SGD(0.1), num_shards=shards)
    batch = table.split(signs, offsets)
    for shard in range(shards):
        lo, hi = batch.shard_offsets[shard, 0], batch.shard_offsets[shard, -1]
        assert (shard_of(batch.signs[lo:hi], shards) == shard).all()
    assert sorted(batch.signs.tolist()) == sorted(signs.tolist())


def test_a_shard_view_is_the_shards_signs_with_offsets_from_zero_and_is_kept() -> None:
    table = EmbeddingTable(4, capacity=1000, optimizer=SGD(0.1), num_shards=3)
    signs = np.arange(1, 301, dtype=np.uint64)
    batch = table.split(signs, np.array([0, 120, 120, 300], dtype=np.int64))
    for shard in range(3):
        lo, hi = batch.shard_offsets[shard, 0], batch.shard_offsets[shard, -1]
        view_signs, view_offsets = batch.shard_view(shard)
        assert view_signs.tolist() == batch.signs[lo:hi].tolist()
        assert view_offsets.tolist() == (batch.shard_offsets[shard] - lo).tolist()
        assert batch.shard_size(shard) == hi - lo
        assert batch.shard_view(shard)[0] is view_signs  # made once, then kept
    assert (batch.num_shards, batch.batch_size) == (3, 3)


def test_a_one_shard_batch_knows_its_size() -> None:
    table = EmbeddingTable(4, capacity=1000, optimizer=SGD(0.1))
    batch = table.split(np.arange(1, 8, dtype=np.uint64), np.array([0, 3, 3, 7]))
    assert (batch.num_shards, batch.batch_size, batch.shard_sizes) == (1, 3, (7,))


def test_normal_initial_values_follow_the_normal_into_its_tails() -> None:
    """The ziggurat's three paths (a layer's core, its wedge, the tail past 3.44) together give
    the normal: Kolmogorov-Smirnov against its CDF, and the mass beyond 3, 3.44 and 4 sigma on
    each side."""
    table = EmbeddingTable(16, capacity=10, optimizer=SGD(0.1), initializer=normal(1.0))
    signs = np.arange(40_000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    z = np.sort(table.get(signs).astype(np.float64).ravel())
    n = z.shape[0]
    cdf = 0.5 * np.vectorize(math.erfc)(-z / math.sqrt(2.0))
    gap = max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n))
    assert gap * math.sqrt(n) < 1.95  # the KS statistic's 0.1% critical value
    for sigma in (3.0, 3.442619855899, 4.0):
        expected = n * math.erfc(sigma / math.sqrt(2.0)) / 2  # on each side
        for side in (np.sum(z > sigma), np.sum(z < -sigma)):
            assert abs(side - expected) < 5 * math.sqrt(expected), sigma


def test_the_ziggurat_s_first_tries_stand_as_often_as_its_layers_ratios_say() -> None:
    """A first try stands when the draw falls in its layer's core: on average over the 128
    layers, the mean of their ratios (97.2%; the kernel's cost per row follows from it)."""
    draws = 50_000
    states = np.arange(1, draws + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    stood = sum(_ziggurat_first(np.uint64(mix64(state)))[1] for state in states)
    expected = float(np.mean(_ZIG_RATIO))
    assert abs(expected - 0.9724) < 0.0001
    assert abs(stood / draws - expected) < 5 * math.sqrt(expected * (1 - expected) / draws)


@pytest.mark.parametrize("dim", [1, 7, 16, 33])
def test_a_normal_row_is_each_coordinate_s_own_ziggurat_draw_bit_for_bit(dim: int) -> None:
    """The kernel's loops (every coordinate's first try, then those that did not stand) give
    the bits of the definition, one coordinate at a time: draw ``x = mix64(base + (d + 1) *
    golden)``, keep its first try if it stands, else finish the try from ``x``."""
    seed_key, a, b = 0x5EED, 0.25, 0.5
    signs = np.arange(1, 1001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    got = initial_rows(signs, dim, np.uint64(seed_key), INIT_NORMAL, a, b)
    expected = np.empty_like(got)
    finished = 0
    for j, sign in enumerate(signs.tolist()):
        base = int(mix64(np.uint64(sign ^ seed_key)))
        for d in range(dim):
            x = np.uint64(mix64(np.uint64((base + (d + 1) * 0x9E3779B97F4A7C15) % 2**64)))
            z, stands = _ziggurat_first(x)
            if not stands:
                z = _ziggurat_rest(x)
                finished += 1
            expected[j, d] = a + b * z
    assert finished > 0
    assert got.view(np.uint32).tolist() == expected.view(np.uint32).tolist()


@pytest.mark.parametrize("dim", [1, 7, 16])
def test_normal_initial_values_have_the_asked_distribution(dim: int) -> None:
    """Mean, std, the normal's 1- and 2-sigma mass, and no correlation between dimensions."""
    table = EmbeddingTable(dim, capacity=10, optimizer=SGD(0.1), initializer=normal(2.0, mean=1.0))
    signs = np.arange(40_000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    z = (table.get(signs) - 1.0) / 2.0
    assert abs(z.mean()) < 0.01
    assert abs(z.std() - 1.0) < 0.01
    assert abs((np.abs(z) < 1).mean() - 0.6827) < 0.01
    assert abs((np.abs(z) < 2).mean() - 0.9545) < 0.005
    if dim > 1:
        assert abs(np.corrcoef(z[:, 0], z[:, 1])[0, 1]) < 0.03


@pytest.mark.parametrize("pooling", ["fused", "separate"])
def test_lookup_shard_into_writes_its_block_and_refuses_what_does_not_fit(pooling: Any) -> None:
    table = EmbeddingTable(
        4, capacity=64, optimizer=SGD(lr=0.1), initializer=uniform(-1, 1), pooling=pooling
    )
    signs = np.array([1, 2, 3, 2], dtype=np.uint64)
    offsets = np.array([0, 1, 4], dtype=np.int64)
    batch = table.split(signs, offsets)
    out = np.full((2, 10), 3.0, dtype=np.float32)
    block = table.lookup_shard_into(batch, 0, out, 6)
    assert np.shares_memory(block, out) and block.shape == (2, 4)
    np.testing.assert_array_equal(out[:, 6:], table.lookup_shard(batch, 0))
    np.testing.assert_array_equal(out[:, :6], 3.0)
    rows = len(table)
    cases: tuple[tuple[Any, int], ...] = (
        (np.zeros((2, 10), np.float32), 7),
        (np.zeros((3, 10), np.float32), 0),
        (np.zeros((2, 10), np.float64), 0),
        (np.zeros((2, 20), np.float32)[:, ::2], 0),
        (np.zeros((2, 10), np.float32), -1),
    )
    for bad, col in cases:
        with pytest.raises(ValueError, match="out"):
            table.lookup_shard_into(batch, 0, bad, col)
    assert len(table) == rows
