"""Rows mapped and pinned when a batch is fed: the lookup gathers them, the push reuses them,
no eviction moves them in between, and a shard that runs out of rows takes the pins back."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sniper.store import SGD, EmbeddingTable, LockMode, ShardedBatch
from sniper.store._kernels import NO_PENDING

LR = 0.5


def table(capacity: int, *, shards: int = 2, lock: LockMode = "shard") -> EmbeddingTable:
    return EmbeddingTable(4, capacity=capacity, optimizer=SGD(lr=LR), num_shards=shards, lock=lock)


def batch_of(t: EmbeddingTable, signs: list[int], examples: int = 3) -> ShardedBatch:
    array = np.array(signs, dtype=np.uint64)
    cuts = np.linspace(0, len(signs), examples + 1).astype(np.int64)
    return t.split(array, cuts)


def lookup(t: EmbeddingTable, batch: ShardedBatch) -> np.ndarray:
    out = t.lookup_shard(batch, 0)
    for shard in range(1, t.num_shards):
        out += t.lookup_shard(batch, shard)
    return out


def pin(t: EmbeddingTable, batch: ShardedBatch) -> list[bool]:
    return [t.pin_shard(batch, shard) for shard in range(t.num_shards)]


def push(t: EmbeddingTable, batch: ShardedBatch, grads: np.ndarray) -> None:
    for shard in range(t.num_shards):
        t.push_grad_shard(batch, shard, grads)


def expected_pool(t: EmbeddingTable, batch: ShardedBatch) -> np.ndarray:
    """What a lookup must answer: the rows as the table holds them now, pooled per example."""
    out = np.zeros((batch.batch_size, t.dim), dtype=np.float32)
    for shard in range(batch.num_shards):
        bounds = batch.shard_offsets[shard]
        rows = t.get(batch.signs[bounds[0] : bounds[-1]])
        for b in range(batch.batch_size):
            out[b] += rows[bounds[b] - bounds[0] : bounds[b + 1] - bounds[0]].sum(axis=0)
    return out


def test_pinned_rows_survive_eviction_until_the_push() -> None:
    t = table(16, shards=1)
    fed = batch_of(t, [1, 2, 3, 1])
    assert pin(t, fed) == [True]
    # Fill the table many times over: every unpinned row is evicted, the fed batch's are not.
    for start in range(100, 400, 10):
        lookup(t, batch_of(t, list(range(start, start + 10))))
    assert t.statistics().evictions > 0
    assert all(sign in t for sign in (1, 2, 3))
    before = t.get(np.array([1, 2, 3], dtype=np.uint64))
    assert np.array_equal(lookup(t, fed), expected_pool(t, fed))
    push(t, fed, np.ones((3, 4), dtype=np.float32))
    after = t.get(np.array([1, 2, 3], dtype=np.uint64))
    # Sign 1 occurs in examples 0 and 2 (gradient 2), signs 2 and 3 once each.
    assert np.allclose(after, before - LR * np.array([[2.0], [1.0], [1.0]]))
    assert t.pinned_rows() == 0


def test_pending_numbers_start_again_without_losing_a_batch() -> None:
    """After 2**32 - 2 calls on a shard its numbers start again at 1: the batches pinned until
    then lose their pins (their lookups map them again) and nothing else changes."""
    t = table(64, shards=1)
    t._next_seq[0] = NO_PENDING - 2  # jump to the end of the numbers
    old = batch_of(t, [1, 2, 3])
    assert pin(t, old) == [True]
    new = batch_of(t, [4, 5])
    assert pin(t, new) == [True]  # took number 1 again: every stamp was cleared first
    assert t._next_seq[0] == 2
    assert t.pinned_rows() == 2
    for batch, signs in ((old, [1, 2, 3]), (new, [4, 5])):
        assert np.array_equal(lookup(t, batch), expected_pool(t, batch))
        check_push(t, batch, signs)
    assert t.pinned_rows() == 0


def test_release_gives_the_pins_back_at_the_next_call_on_the_shard() -> None:
    t = table(32)
    fed = batch_of(t, list(range(20)))
    assert all(pin(t, fed))
    assert t.pinned_rows() == 20
    t.unpin(fed)
    assert t.pinned_rows() == 0
    # A released batch is closed: pinning it again does nothing.
    assert pin(t, fed) == [False, False]


def test_a_shard_out_of_rows_takes_pins_back_instead_of_failing() -> None:
    t = table(8, shards=1)
    held = batch_of(t, [1, 2, 3, 4, 5, 6])
    assert pin(t, held) == [True]
    # Six of eight rows are pinned; this batch needs five new rows, so it takes the pins back.
    other = batch_of(t, [10, 11, 12, 13, 14])
    assert pin(t, other) == [False]  # pinning never evicts pinned rows: it declines
    assert np.array_equal(lookup(t, other), expected_pool(t, other))
    assert t.pinned_rows() == 0
    # The batch that lost its pins is mapped again by its own lookup and pushed correctly.
    assert np.array_equal(lookup(t, held), expected_pool(t, held))
    before = t.get(np.arange(1, 7, dtype=np.uint64))
    push(t, held, np.ones((3, 4), dtype=np.float32))
    assert np.allclose(t.get(np.arange(1, 7, dtype=np.uint64)), before - LR)


def check_push(t: EmbeddingTable, batch: ShardedBatch, signs: list[int]) -> None:
    """Push a gradient and check that exactly the batch's rows moved, by its summed gradient."""
    unique = np.unique(np.array(signs, dtype=np.uint64))
    before = t.get(unique)
    grads = np.arange(batch.batch_size * 4, dtype=np.float32).reshape(-1, 4) / 8
    push(t, batch, grads)
    summed = np.zeros_like(before)
    cuts = np.linspace(0, len(signs), batch.batch_size + 1).astype(np.int64)
    for b in range(batch.batch_size):
        for sign in signs[cuts[b] : cuts[b + 1]]:
            summed[np.searchsorted(unique, sign)] += grads[b]
    assert np.allclose(t.get(unique), before - LR * summed, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 120), min_size=1, max_size=14), st.booleans()),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 4),
    st.booleans(),
    st.sampled_from(["shard", "none", "table"]),
)
def test_lookups_and_pushes_are_exact_whatever_is_pinned(
    steps: list[tuple[list[int], bool]], ahead: int, map_at_feed: bool, lock: LockMode
) -> None:
    """Batches fed ``ahead`` of the step that uses them, into a table too small to keep them
    all pinned: every lookup answers the rows as they are, every push updates exactly its
    rows, evaluation batches are released unpushed, and no pin outlives its batch."""
    t = table(48, lock=lock)
    batches = [batch_of(t, signs) for signs, _ in steps]
    if map_at_feed:
        for batch in batches[:ahead]:
            pin(t, batch)
    for step, (batch, (signs, train)) in enumerate(zip(batches, steps, strict=True)):
        assert np.array_equal(lookup(t, batch), expected_pool(t, batch))
        if train:
            check_push(t, batch, signs)
        else:
            t.unpin(batch)  # an evaluation batch: looked up, then released
        if map_at_feed and step + ahead < len(batches):
            pin(t, batches[step + ahead])
    assert t.pinned_rows() == 0


@pytest.mark.parametrize("lock", ["global", "shard", "none"])
def test_pinning_changes_no_number(lock: LockMode) -> None:
    """With room for every row, the same batches give bit-identical lookups and rows whether
    they were mapped at feed time or at lookup."""
    rng = np.random.default_rng(3)
    sign_lists = [rng.integers(0, 500, size=200).tolist() for _ in range(6)]
    results = []
    for map_at_feed in (False, True):
        t = table(1024, shards=3, lock=lock)
        batches = [batch_of(t, signs, examples=16) for signs in sign_lists]
        if map_at_feed:
            for batch in batches:
                pin(t, batch)
        pooled = []
        for batch in batches:
            pooled.append(lookup(t, batch))
            push(t, batch, np.full((16, 4), 0.25, dtype=np.float32))
        results.append((pooled, t.get(np.arange(500, dtype=np.uint64))))
    (pooled_a, rows_a), (pooled_b, rows_b) = results
    assert all(np.array_equal(a, b) for a, b in zip(pooled_a, pooled_b, strict=True))
    assert np.array_equal(rows_a, rows_b)
