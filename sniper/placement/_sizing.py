"""Sizing: how many shards and rows a table gets when its config leaves them to sniper.

The one policy for tables ``sniper train`` creates (``shards = 0``, ``capacity = 0`` in
``[variables]``): one shard per :data:`SHARD_SIGNS` signs per batch, at most
:data:`MAX_AUTO_SHARDS` (:func:`auto_shards`); rows from the data's vocabulary when the data
knows it (the synthetic generator's, which is their source), clamped to
[:data:`MIN_AUTO_CAPACITY`, :data:`MAX_AUTO_CAPACITY`] (:func:`auto_capacity`), or from the
distinct signs counted in the data with :data:`COUNT_HEADROOM` when it does not
(:func:`counted_capacity`: a file, whoever wrote it), else :data:`FILE_CAPACITY` rows. LRU
eviction takes rows back past any of them, but never a row of a batch fed and not yet pushed,
so a written capacity below :func:`inflight_capacity` is refused. The benchmarks that run a
whole workload's ps on one machine size its tables from the workload's shape with the same
shard rule (:func:`shards_for`) and a tighter bound on rows (:func:`capacity_for`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from sniper.hashing import shard_of

if TYPE_CHECKING:
    from sniper.data import VariableSpec

__all__ = [
    "COUNT_HEADROOM",
    "FILE_CAPACITY",
    "INFLIGHT_HEADROOM",
    "MAX_AUTO_CAPACITY",
    "MAX_AUTO_SHARDS",
    "MIN_AUTO_CAPACITY",
    "SHARD_SIGNS",
    "auto_capacity",
    "auto_shards",
    "capacity_for",
    "counted_capacity",
    "inflight_capacity",
    "shards_for",
]

SHARD_SIGNS = 32_768
"""Signs per batch per shard when ``shards = 0``: ~0.3 ms of kernel time, far above dispatch."""
MAX_AUTO_SHARDS = 16
"""The most shards ``shards = 0`` gives a table."""
MIN_AUTO_CAPACITY, MAX_AUTO_CAPACITY = 1024, 4_000_000
"""The bounds of a ``capacity = 0`` table sized from its variable's vocabulary."""
FILE_CAPACITY = 1 << 20
"""Rows of a table when the data does not say how many distinct signs a variable has, and
nothing counted them."""
COUNT_HEADROOM = 1.25
"""Rows per distinct sign counted in the data: the count is an estimate (within about 2%), a
shard's share of the signs varies around its share of the rows, and rows past the signs in
use stay untouched pages (only the index pays for them, about 17 bytes each)."""


def auto_shards(signs_per_batch: int) -> int:
    """Shards of a table with ``shards = 0``: one per :data:`SHARD_SIGNS` signs per batch."""
    return max(1, min(MAX_AUTO_SHARDS, signs_per_batch // SHARD_SIGNS))


def auto_capacity(vocabulary: int | None) -> int:
    """Rows of a table with ``capacity = 0``: its variable's distinct signs, clamped, when the
    data knows them (``None`` or 0 when not: :data:`FILE_CAPACITY`)."""
    if not vocabulary:
        return FILE_CAPACITY
    return min(max(MIN_AUTO_CAPACITY, vocabulary), MAX_AUTO_CAPACITY)


def counted_capacity(distinct: int) -> int:
    """Rows of a table with ``capacity = 0`` whose variable has about ``distinct`` signs,
    counted in the data (:func:`sniper.data.count_distinct_signs`): with
    :data:`COUNT_HEADROOM`, clamped as :func:`auto_capacity` clamps."""
    return auto_capacity(max(1, math.ceil(distinct * COUNT_HEADROOM)))


INFLIGHT_HEADROOM = 1.125
"""Rows per distinct sign of the batches in flight, measured on the data's first window of
them (:func:`inflight_capacity`): on seed_ctr's data (scale 0.02) one window of 21 batches
holds within 1% of another's distinct signs; the rest is for data less even (an eighth: exact
in binary, so the least is the same on every machine)."""


def inflight_capacity(signs: NDArray[np.uint64], shards: int, vocabulary: int | None = None) -> int:
    """The least rows a table of ``shards`` shards needs when ``signs`` (every sign of the
    batches in flight at once) are pinned: with :data:`INFLIGHT_HEADROOM`, room in every shard
    for its share of their distinct signs.

    A ps maps a fed batch's signs to rows and keeps them until its push, so that no eviction
    moves a row a gradient is on its way to; a shard whose rows the batches in flight hold,
    every one, refuses the next batch (RESOURCE_EXHAUSTED) and the job stops part way. The
    rows split evenly between the shards, so the fullest shard sets the size. A one-shard
    table that holds the variable's whole ``vocabulary`` (when known) never evicts at all.
    """
    distinct = np.unique(signs)
    per_shard = np.bincount(shard_of(distinct, shards), minlength=shards)
    least = shards * max(1, math.ceil(int(per_shard.max()) * INFLIGHT_HEADROOM))
    return min(least, vocabulary) if shards == 1 and vocabulary else least


def shards_for(spec: VariableSpec) -> int:
    """Shards of a workload's variable: the rule ``sniper train`` uses (:func:`auto_shards`)."""
    return auto_shards(spec.signs_per_batch)


def capacity_for(spec: VariableSpec) -> int:
    """Rows of a workload's variable on a benchmark's ps: room for many batches of distinct
    signs, bounded so 76 tables fit in a few GB (every table of the workload in one process)."""
    return int(min(spec.vocabulary, max(65_536, 16 * spec.signs_per_batch), 2_000_000))
