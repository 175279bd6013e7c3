"""The pooling kernel against a naive loop, bit for bit.

Pooling has two paths (rows of dim 16 summed in registers, any other dim through ``out``):
both must add an example's rows one at a time in the order of its signs, so they must give
exactly the bits that a plain float32 loop gives, for every dim and through the table.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from sniper.store import SGD, EmbeddingTable, uniform
from sniper.store._kernels import pool_rows, pool_rows16, pool_rows_any
from sniper.store._prefetch import GATHER_PREFETCH_DISTANCE


def naive_pool(
    weights: NDArray[np.float32],
    rows: NDArray[np.int64],
    offsets: NDArray[np.int64],
    out: NDArray[np.float32],
) -> NDArray[np.float32]:
    """``out[b] += weights[row]`` for each row of example b, in order; negative rows skipped."""
    out = out.copy()
    for b in range(len(offsets) - 1):
        for row in rows[offsets[b] : offsets[b + 1]]:
            if row >= 0:
                out[b] += weights[row]
    return out


def bits(array: NDArray[np.float32]) -> NDArray[np.uint32]:
    return array.view(np.uint32)


def ragged_case(
    rng: np.random.Generator, dim: int, *, table_rows: int = 500, examples: int = 12
) -> tuple[NDArray[np.float32], NDArray[np.int64], NDArray[np.int64], NDArray[np.float32]]:
    """Weights of mixed magnitudes (sums whose bits depend on their order), -0.0 and a
    subnormal; rows with repeats, -1 (a sign without a row) and empty examples; more signs
    than the prefetch distance; an ``out`` that is not zero (pooling adds to it)."""
    magnitudes = 10.0 ** rng.integers(-30, 30, (table_rows, dim))
    weights = (rng.normal(0, 1, (table_rows, dim)) * magnitudes).astype(np.float32)
    weights[0] = -0.0
    weights[1] = np.float32(1e-40)  # subnormal: no flush to zero on either path
    counts = rng.integers(0, 2 * GATHER_PREFETCH_DISTANCE // max(1, examples) + 40, examples)
    if examples:
        counts[rng.integers(examples)] = 0
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    rows = rng.integers(-1, table_rows, offsets[-1]).astype(np.int64)
    if len(rows):
        rows[-1] = table_rows - 1  # the table's last row: the prefetch must stay in bounds
    out = rng.normal(0, 1, (examples, dim)).astype(np.float32)
    return weights, rows, offsets, out


@pytest.mark.parametrize("dim", [1, 3, 8, 15, 16, 17, 32])
def test_pool_rows_adds_in_sign_order(dim: int) -> None:
    weights, rows, offsets, out = ragged_case(np.random.default_rng(dim), dim)
    assert offsets[-1] > GATHER_PREFETCH_DISTANCE
    want = naive_pool(weights, rows, offsets, out)
    pool_rows(weights, rows, offsets, out)
    np.testing.assert_array_equal(bits(out), bits(want))


@pytest.mark.parametrize("dim", [3, 16])
@pytest.mark.parametrize("add", [False, True])
def test_pool_rows_into_a_wider_matrix_writes_its_columns_alone(dim: int, add: bool) -> None:
    weights, rows, offsets, out = ragged_case(np.random.default_rng(dim), dim)
    wide = np.random.default_rng(1).normal(0, 1, (out.shape[0], dim + 7)).astype(np.float32)
    before = wide.copy()
    start = 5 if dim == 3 else 2
    own = wide[:, start : start + dim].copy()
    pool_rows(weights, rows, offsets, own, add)
    pool_rows(weights, rows, offsets, wide, add, start)
    np.testing.assert_array_equal(bits(wide[:, start : start + dim]), bits(own))
    if not add:  # what the block held before is ignored, not added to
        fresh = naive_pool(weights, rows, offsets, np.zeros_like(out))
        np.testing.assert_array_equal(bits(own), bits(fresh))
    untouched = np.ones(wide.shape[1], dtype=bool)
    untouched[start : start + dim] = False
    np.testing.assert_array_equal(wide[:, untouched], before[:, untouched])


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), examples=st.integers(0, 20))
def test_dim16_path_equals_the_generic_path(seed: int, examples: int) -> None:
    """The register path and the generic path, run directly on the same input."""
    weights, rows, offsets, out = ragged_case(
        np.random.default_rng(seed), 16, table_rows=300, examples=examples
    )
    fast, generic = out.copy(), out.copy()
    pool_rows16(weights, rows, offsets, fast)
    pool_rows_any(weights, rows, offsets, generic)
    np.testing.assert_array_equal(bits(fast), bits(generic))


@pytest.mark.parametrize("dim", [15, 16, 17])
@pytest.mark.parametrize("fed", [False, True], ids=["mapped at lookup", "pinned at feed"])
def test_table_lookup_is_the_naive_sum_of_its_rows(dim: int, fed: bool) -> None:
    """One shard, so that the table's sum is one loop over each example's signs."""
    table = EmbeddingTable(
        dim, capacity=4096, optimizer=SGD(lr=0.1), initializer=uniform(-1e3, 1e3)
    )
    rng = np.random.default_rng(dim)
    signs = rng.integers(0, 2000, 3000).astype(np.uint64)
    offsets = np.concatenate([[0], np.sort(rng.integers(0, 3000, 63)), [3000]]).astype(np.int64)
    batch = table.split(signs, offsets)
    if fed:
        assert table.pin_shard(batch, 0)
    got = table.lookup_shard(batch, 0)
    rows = table.get(signs)
    want = naive_pool(rows, np.arange(len(signs)), offsets, np.zeros_like(got))
    np.testing.assert_array_equal(bits(got), bits(want))
