"""Sizing: the shards and rows a table gets when its config leaves them to sniper."""

from __future__ import annotations

import numpy as np

from sniper.data import VariableSpec
from sniper.hashing import shard_of
from sniper.placement import (
    COUNT_HEADROOM,
    FILE_CAPACITY,
    INFLIGHT_HEADROOM,
    MAX_AUTO_CAPACITY,
    MAX_AUTO_SHARDS,
    MIN_AUTO_CAPACITY,
    SHARD_SIGNS,
    auto_capacity,
    auto_shards,
    capacity_for,
    counted_capacity,
    inflight_capacity,
    shards_for,
)


def test_auto_shards_gives_one_shard_per_shard_signs_within_bounds() -> None:
    assert auto_shards(0) == 1
    assert auto_shards(SHARD_SIGNS - 1) == 1
    assert auto_shards(3 * SHARD_SIGNS) == 3
    assert auto_shards(3 * SHARD_SIGNS + SHARD_SIGNS - 1) == 3
    assert auto_shards(100 * SHARD_SIGNS) == MAX_AUTO_SHARDS


def test_auto_capacity_follows_the_vocabulary_clamped_or_falls_back() -> None:
    assert auto_capacity(None) == FILE_CAPACITY
    assert auto_capacity(0) == FILE_CAPACITY
    assert auto_capacity(10) == MIN_AUTO_CAPACITY
    assert auto_capacity(50_000) == 50_000
    assert auto_capacity(10**9) == MAX_AUTO_CAPACITY


def test_a_counted_vocabulary_gets_headroom_within_the_same_bounds() -> None:
    assert counted_capacity(0) == counted_capacity(10) == MIN_AUTO_CAPACITY
    assert counted_capacity(100_000) == round(100_000 * COUNT_HEADROOM) > 100_000
    assert counted_capacity(10**9) == MAX_AUTO_CAPACITY


def test_a_workloads_variable_takes_the_train_shard_rule_and_a_bounded_capacity() -> None:
    huge = VariableSpec("huge", signs_per_batch=270_000, vocabulary=10**8, field=1)
    small = VariableSpec("small", signs_per_batch=100, vocabulary=1_000, field=2)
    assert shards_for(huge) == auto_shards(270_000) == 8
    assert shards_for(small) == 1
    assert capacity_for(huge) == 2_000_000  # 76 such tables in one process must fit
    assert capacity_for(small) == 1_000  # never more rows than signs
    middle = VariableSpec("middle", signs_per_batch=10_000, vocabulary=10**7, field=3)
    assert capacity_for(middle) == 160_000  # 16 batches of distinct signs


def test_the_batches_in_flight_need_room_for_their_distinct_signs_in_every_shard() -> None:
    distinct = np.arange(1, 1001, dtype=np.uint64)
    signs = np.repeat(distinct, 3)  # a sign in several batches pins one row
    assert inflight_capacity(signs, 1) == 1000 * INFLIGHT_HEADROOM == 1125
    # A table's rows split evenly between its shards: the fullest shard sets the size.
    fullest = int(np.bincount(shard_of(distinct, 4)).max())
    assert fullest > 250
    assert inflight_capacity(signs, 4) == 4 * int(np.ceil(fullest * INFLIGHT_HEADROOM))
    # A table of one shard that holds every id of the variable never evicts; split, it may.
    assert inflight_capacity(signs, 1, vocabulary=1100) == 1100
    assert inflight_capacity(signs, 4, vocabulary=1100) == inflight_capacity(signs, 4)
    assert inflight_capacity(np.array([], np.uint64), 2) == 2  # a row a shard at least
