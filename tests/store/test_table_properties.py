"""The numba table against the naive reference, on hypothesis-generated batches."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from sniper.store import (
    SGD,
    Adagrad,
    Adam,
    Admission,
    EmbeddingTable,
    Ftrl,
    Optimizer,
    TableExport,
    uniform,
)
from tests.store.reference import ReferenceTable

DIM = 4
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Batch = tuple[NDArray[np.uint64], NDArray[np.int64]]


@st.composite
def batches(draw: st.DrawFn, domain: int = 40, max_batch: int = 6, max_per: int = 6) -> Batch:
    """A ragged batch whose signs repeat often (small domain), with empty examples allowed."""
    sizes = draw(st.lists(st.integers(0, max_per), min_size=1, max_size=max_batch))
    pool = draw(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=domain, unique=True))
    signs = [draw(st.sampled_from(pool)) for _ in range(sum(sizes))]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return np.array(signs, dtype=np.uint64), offsets


def grads_for(batch: Batch, seed: int) -> NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(len(batch[1]) - 1, DIM)).astype(np.float32)


optimizers = st.sampled_from(
    [
        SGD(lr=0.5),
        Adagrad(lr=0.3, initial_accumulator_value=0.1),
        Adam(lr=0.05),
        Ftrl(alpha=0.5, beta=1.0, l1=0.01, l2=0.1),
    ]
)


def assert_rows_match(table: EmbeddingTable, ref: ReferenceTable) -> None:
    held = sorted(ref.held())
    assert set(table.export().signs.tolist()) == set(held)
    if held:
        got = table.get(np.array(held, dtype=np.uint64))
        want = np.stack([ref.rows[s] for s in held])
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def step_both(
    table: EmbeddingTable, ref: ReferenceTable, batch: Batch, i: int, *, rtol: float, atol: float
) -> None:
    """One training step on the table and the reference: equal lookups, then equal rows."""
    signs, offsets = batch
    np.testing.assert_allclose(
        table.lookup_pool(signs, offsets), ref.lookup_pool(signs, offsets), rtol=rtol, atol=atol
    )
    grads = grads_for(batch, i)
    table.push_grad(signs, offsets, grads)
    ref.push_grad(signs, offsets, grads)
    assert_rows_match(table, ref)


@SETTINGS
@given(st.lists(batches(), min_size=1, max_size=4), st.integers(1, 4), st.integers(0, 2**64 - 1))
def test_lookup_pool_matches_reference(steps: list[Batch], shards: int, seed: int) -> None:
    table = EmbeddingTable(
        DIM,
        capacity=1000,
        optimizer=SGD(0.1),
        num_shards=shards,
        seed=seed,
        initializer=uniform(-1, 1),
    )
    ref = ReferenceTable(table)
    for signs, offsets in steps:
        np.testing.assert_allclose(
            table.lookup_pool(signs, offsets), ref.lookup_pool(signs, offsets), rtol=1e-5, atol=1e-6
        )
    assert len(table) == len(ref.held())


@SETTINGS
@given(st.lists(batches(), min_size=1, max_size=4), optimizers, st.integers(1, 3))
def test_push_grad_matches_reference(steps: list[Batch], optimizer: Optimizer, shards: int) -> None:
    table = EmbeddingTable(DIM, capacity=1000, optimizer=optimizer, num_shards=shards)
    ref = ReferenceTable(table)
    for i, (signs, offsets) in enumerate(steps):
        step_both(table, ref, (signs, offsets), i, rtol=2e-5, atol=2e-6)


def test_repeated_sign_gets_summed_gradient_and_one_update() -> None:
    table = EmbeddingTable(2, capacity=8, optimizer=Adagrad(lr=1.0), initializer=uniform(0, 1))
    start = table.get(np.array([7], dtype=np.uint64))[0].copy()
    signs = np.array([7, 7, 7], dtype=np.uint64)
    offsets = np.array([0, 2, 3])
    grads = np.array([[1.0, 2.0], [3.0, -4.0]], dtype=np.float32)
    table.push_grad(signs, offsets, grads)
    g = 2 * grads[0] + grads[1]
    expected = start - g / (np.sqrt(g * g) + np.float32(1e-10))
    np.testing.assert_allclose(table.get(np.array([7], dtype=np.uint64))[0], expected, rtol=1e-6)
    assert table.export().state[0, 0].tolist() == (g * g).tolist()


@SETTINGS
@given(
    st.lists(batches(domain=30, max_batch=3, max_per=4), min_size=1, max_size=12),
    st.integers(1, 2),
    st.integers(8, 14),
)
def test_eviction_order_matches_reference_clock(
    steps: list[Batch], shards: int, capacity: int
) -> None:
    table = EmbeddingTable(DIM, capacity=capacity, optimizer=Adagrad(0.1), num_shards=shards)
    ref = ReferenceTable(table)
    for i, (signs, offsets) in enumerate(steps):
        if len(np.unique(signs)) > capacity // shards:
            continue  # more distinct signs than a shard holds: tested separately
        step_both(table, ref, (signs, offsets), i, rtol=2e-5, atol=2e-6)
        assert len(table) <= capacity


def test_recently_used_rows_survive_eviction() -> None:
    table = EmbeddingTable(DIM, capacity=4, optimizer=SGD(0.1))
    one = np.array([0, 1])
    for sign in range(4):
        table.lookup_pool(np.array([sign], dtype=np.uint64), one)
    # Inserting 100 sweeps once: every reference bit is cleared and 0, the oldest, goes.
    table.lookup_pool(np.array([100], dtype=np.uint64), one)
    assert 0 not in table
    # 2 and 3 are used again, 1 is not: 1 is now least recently used and goes next.
    for sign in (2, 3):
        table.lookup_pool(np.array([sign], dtype=np.uint64), one)
    table.lookup_pool(np.array([101], dtype=np.uint64), one)
    assert {100, 2, 3, 101} == set(table.export().signs.tolist())
    assert table.statistics().evictions == 2


def test_evicted_sign_returns_with_initial_value() -> None:
    table = EmbeddingTable(DIM, capacity=1, optimizer=SGD(1.0))
    one = np.array([0, 1])
    sign = np.array([42], dtype=np.uint64)
    initial = table.lookup_pool(sign, one).copy()
    table.push_grad(sign, one, np.ones((1, DIM), dtype=np.float32))
    assert not np.allclose(table.lookup_pool(sign, one), initial)
    table.lookup_pool(np.array([43], dtype=np.uint64), one)
    assert 42 not in table
    np.testing.assert_array_equal(table.lookup_pool(sign, one), initial)


@SETTINGS
@given(st.lists(batches(domain=10), min_size=1, max_size=6), st.integers(2, 4))
def test_admission_matches_reference(steps: list[Batch], min_count: int) -> None:
    table = EmbeddingTable(
        DIM, capacity=1000, optimizer=SGD(0.5), admission=Admission(min_count, width=1 << 16)
    )
    ref = ReferenceTable(table)
    for i, (signs, offsets) in enumerate(steps):
        step_both(table, ref, (signs, offsets), i, rtol=1e-5, atol=1e-6)
    assert table.statistics().dropped_gradients == ref.dropped


def test_admission_reads_zeros_and_counts() -> None:
    table = EmbeddingTable(DIM, capacity=10, optimizer=SGD(0.5), admission=Admission(2))
    signs, offsets = np.array([5], dtype=np.uint64), np.array([0, 1])
    assert not table.lookup_pool(signs, offsets).any()
    table.push_grad(signs, offsets, np.ones((1, DIM), dtype=np.float32))
    stats = table.statistics()
    assert (stats.rows, stats.rejected, stats.dropped_gradients) == (0, 1, 1)
    assert table.lookup_pool(signs, offsets).any()
    assert table.statistics().admitted == 1


@SETTINGS
@given(
    st.lists(batches(), min_size=1, max_size=3), optimizers, st.integers(1, 3), st.integers(1, 3)
)
def test_export_import_round_trip(
    steps: list[Batch], optimizer: Optimizer, shards_a: int, shards_b: int
) -> None:
    a = EmbeddingTable(DIM, capacity=500, optimizer=optimizer, num_shards=shards_a)
    for i, (signs, offsets) in enumerate(steps):
        a.lookup_pool(signs, offsets)
        a.push_grad(signs, offsets, grads_for((signs, offsets), i))
    exported = a.export()
    b = EmbeddingTable(DIM, capacity=500, optimizer=optimizer, num_shards=shards_b)
    b.import_(exported)
    again = b.export()
    order_a, order_b = np.argsort(exported.signs), np.argsort(again.signs)
    for name in ("signs", "weights", "state", "steps"):
        np.testing.assert_array_equal(
            getattr(exported, name)[order_a], getattr(again, name)[order_b]
        )
    signs, offsets = steps[-1]
    # Pooling sums shard by shard, so other shard counts round differently: a few float32 ulps
    # of the summands (magnitude up to ~10 here), not of a result that may cancel to ~0.
    np.testing.assert_allclose(
        a.lookup_pool(signs, offsets), b.lookup_pool(signs, offsets), rtol=1e-5, atol=1e-5
    )


def test_import_overwrites_and_checks_shapes() -> None:
    table = EmbeddingTable(2, capacity=4, optimizer=Adagrad(0.1))
    data = TableExport(
        signs=np.array([3], dtype=np.uint64),
        weights=np.array([[1.0, 2.0]], dtype=np.float32),
        state=np.ones((1, 1, 2), dtype=np.float32),
        steps=np.zeros(1, dtype=np.int32),
    )
    table.import_(data)
    np.testing.assert_array_equal(table.get(np.array([3], dtype=np.uint64)), [[1.0, 2.0]])
    bad = TableExport(data.signs, data.weights, np.ones((1, 2, 2), np.float32), data.steps)
    try:
        table.import_(bad)
    except ValueError as exc:
        assert str(exc) == "import state must have shape (1, 1, 2), got (1, 2, 2)"
    else:  # pragma: no cover
        raise AssertionError("a bad import shape was accepted")
