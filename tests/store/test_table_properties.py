"""The numba table against the naive reference, on hypothesis-generated batches.

The reference and the generated checks live in :mod:`sniper._contracts` (so that another
store can be checked the same way); this module runs them on ``EmbeddingTable`` in each lock
mode, shows they catch a wrong store, and keeps the example tests that pin single behaviours.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
from numpy.typing import ArrayLike

from sniper._contracts import (
    ContractViolation,
    check_export_import_round_trip,
    check_store_matches_reference,
)
from sniper._contracts._store import REGIMES
from sniper.store import (
    LOCK_MODES,
    SGD,
    Adagrad,
    Adam,
    Admission,
    EmbeddingTable,
    Ftrl,
    LockMode,
    Optimizer,
    TableExport,
    uniform,
)

DIM = 4


@pytest.mark.parametrize("regime", REGIMES)
def test_table_matches_reference(regime: str) -> None:
    check_store_matches_reference(EmbeddingTable, regimes=[regime])


@pytest.mark.parametrize("lock", [mode for mode in LOCK_MODES if mode != "shard"])
def test_every_lock_mode_matches_reference(lock: LockMode) -> None:
    """Lock modes change what may run in parallel, never what a single thread sees."""
    check_store_matches_reference(functools.partial(EmbeddingTable, lock=lock), examples=10)


def test_export_import_round_trip() -> None:
    check_export_import_round_trip(EmbeddingTable)


class HalvesGradients(EmbeddingTable):
    """A store with a bug: its gradients arrive at half their size."""

    def push_grad(
        self,
        signs: ArrayLike,
        offsets: ArrayLike,
        grads: ArrayLike,
        weights: ArrayLike | None = None,
    ) -> None:
        super().push_grad(signs, offsets, np.asarray(grads) / 2, weights)


def test_the_reference_check_catches_a_wrong_store() -> None:
    with pytest.raises(ContractViolation, match=r"^after step 0, the store's rows differ"):
        check_store_matches_reference(HalvesGradients, regimes=["train"], examples=20)


def test_unknown_regimes_are_refused() -> None:
    message = "unknown regimes ['fast']; choose from lookup, train, eviction, admission"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_store_matches_reference(EmbeddingTable, regimes=["lookup", "fast"])


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


@pytest.mark.parametrize(
    "optimizer",
    [Adagrad(0.5), Adagrad(0.5, initial_accumulator_value=0.25), Adam(0.1), Ftrl(0.1)],
    ids=["adagrad", "adagrad-0.25", "adam", "ftrl"],
)
def test_a_new_row_starts_with_fresh_optimizer_state(optimizer: Optimizer) -> None:
    # A row taken back from an evicted sign is reset, whatever its last push left there (a
    # kernel that skipped writing a new row's zero state, tried once, must not skip these).
    table = EmbeddingTable(DIM, capacity=1, optimizer=optimizer)
    one = np.array([0, 1])
    first, second = (np.array([sign], dtype=np.uint64) for sign in (42, 43))
    table.lookup_pool(first, one)
    fresh = table.export()
    expected = np.broadcast_to(optimizer.state_init()[None, :, None], fresh.state.shape)
    np.testing.assert_array_equal(fresh.state, expected)
    table.push_grad(first, one, np.ones((1, DIM), dtype=np.float32))
    assert not np.array_equal(table.export().state, fresh.state)
    table.lookup_pool(second, one)  # evicts 42 and takes its row
    reused = table.export()
    assert reused.signs.tolist() == [43]
    np.testing.assert_array_equal(reused.state, fresh.state)
    np.testing.assert_array_equal(reused.steps, fresh.steps)


def test_admission_reads_zeros_and_counts() -> None:
    table = EmbeddingTable(DIM, capacity=10, optimizer=SGD(0.5), admission=Admission(2))
    signs, offsets = np.array([5], dtype=np.uint64), np.array([0, 1])
    assert not table.lookup_pool(signs, offsets).any()
    table.push_grad(signs, offsets, np.ones((1, DIM), dtype=np.float32))
    stats = table.statistics()
    assert (stats.rows, stats.rejected, stats.dropped_gradients) == (0, 1, 1)
    assert table.lookup_pool(signs, offsets).any()
    assert table.statistics().admitted == 1


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
