# Kernel bodies are typed by numba, whose scalars (np.int64, np.bool_) mypy does not equate with
# Python's int and bool; the signatures still document what each kernel takes and returns.
# mypy: disable-error-code="no-any-return,return-value,assignment"
"""Numba kernels of the embedding store.

Every kernel is ``@njit(nogil=True, cache=True, error_model="numpy")`` (see :func:`kernel`): it
releases the GIL, so scheduler threads run kernels of different shards in parallel, and its
machine code is cached next to this file, so only the very first process pays compilation.
Kernels are compiled lazily on first call, never at import, so ``import sniper.store`` stays
cheap.

Memory layout (one table, ``C`` rows split into shard ranges, ``D`` = dim):

- ``weights[C, D]`` float32 and ``state[C, K, D]`` float32 (``K`` optimizer slots), plus
  ``steps[C]`` int32 (Adam's per-row step count; empty for other optimizers).
- ``slots[S, 3]`` uint32: the open-addressing index, ``(sign_lo, sign_hi, word)`` side by side
  (12 bytes) so that one cache line usually answers a probe. ``word`` holds the row in its low
  30 bits and the CLOCK reference bit (``REF``) in bit 30: a lookup that finds its sign marks
  it referenced in the cache line it has just read, instead of touching a per-row array (a
  second, dependent cache miss per cold sign). ``word == EMPTY`` marks a free slot. Shard
  ``s`` owns a contiguous slot range and a contiguous row range; its rows are allocated in
  order and, once full, recycled by CLOCK eviction. Linear probing with backward-shift
  deletion (no tombstones); at most 75% of slots are used.
- ``slot_of_row[C]`` uint32: where a row's sign sits in ``slots``, so eviction finds it without
  rehashing; kept exact when backward shifts move entries. While a push deduplicates its rows
  (under the index lock, when no eviction can run) it briefly holds ``MARK | compact id``
  instead, and is restored before the lock is released: deduplication costs no memory per row.
- ``stamps[C]`` uint16: the sequence number of the last call that mapped the row. Every call
  that maps rows in a shard takes the shard's next number, and is *pending* from then until
  it ends; a fed batch stays pending from FeedSample until its PushGrad or release, so the
  rows it mapped stay where they are for its lookup and push. CLOCK never evicts a row whose
  stamp is at least the oldest pending number (``low_water``): every row a pending call
  mapped has such a stamp. This over-protects rows stamped by later calls that already ended,
  never under-protects, and costs one store per sign to pin and nothing to unpin (an exact
  count per row measured 47% more store time a batch). Rows can only be evicted once a shard
  is full, so until a call could fill it, nothing is stamped, pins included; the first call
  that could evict stamps every pinned batch's rows first. When the protected rows fill a
  shard, they are stamped again from the pinned batches alone, which is exact. Numbers start
  again after 65,534 calls on a shard (see ``EmbeddingTable._begin``).
- ``meta[num_shards, META_FIELDS]`` int64 and ``counters[num_shards, COUNTERS]`` int64.

The probe position is ``fastrange(mix(sign) >> 32, nslots)``, the shard is
``mix(sign) % num_shards`` (the same mix as :func:`sniper.hashing.shard_of`); the two use
different bits of the mix, so sharding does not skew slot positions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
from numba import njit
from numba.np.numpy_support import carray

from sniper.store._pointers import (
    float32_at,
    float64_at,
    int32_at,
    int64_at,
    uint16_at,
    uint32_at,
    uint64_at,
)
from sniper.store._prefetch import GATHER_PREFETCH_DISTANCE, PREFETCH_DISTANCE, prefetch
from sniper.store._simd import LANES, add16, load16, store16

# map_rows keeps the hashes of the signs between a probe and its prefetch; a power of two.
_RING = 2 * PREFETCH_DISTANCE
_RING_MASK = _RING - 1
if _RING & _RING_MASK:
    raise RuntimeError(f"PREFETCH_DISTANCE must be a power of two, got {PREFETCH_DISTANCE}")

EMPTY = np.uint32(0xFFFFFFFF)
MAX_TABLE_SHARDS = 65536  # shard ids of a split are uint16
MARK = np.uint32(0x80000000)
LOW_MASK = np.uint32(0x7FFFFFFF)
_LOW32 = np.uint64(0xFFFFFFFF)
ROW_BITS = np.uint32(0x3FFFFFFF)  # a table has fewer than 2**30 rows
REF = np.uint32(0x40000000)
NO_PENDING = 1 << 16
"""``low_water`` when no call is pending in a shard: above every stamp, so nothing is held."""

_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S32 = np.uint64(32)
_S11 = np.uint64(11)
_TWO_POW_MINUS_53 = 1.0 / 9007199254740992.0

# meta columns
ROW_START = 0
ROW_CAPACITY = 1
ROWS_USED = 2
CLOCK_HAND = 3
SLOT_START = 4
SLOT_COUNT = 5
META_FIELDS = 6

# counter columns
INSERTS = 0
EVICTIONS = 1
HITS = 2
MISSES = 3
ADMITTED = 4
REJECTED = 5
DROPPED_GRADIENTS = 6
NONFINITE_UPDATES = 7
COUNTERS = 8

FLOAT32_MAX = float(np.finfo(np.float32).max)

# initializer kinds
INIT_CONSTANT = 0
INIT_UNIFORM = 1
INIT_NORMAL = 2

# map_rows results besides a row id
NOT_ADMITTED = -1
NO_ROW_FREE = -2

_F = TypeVar("_F", bound=Callable[..., Any])


def kernel(function: _F) -> _F:
    """Compile ``function`` lazily, without the GIL, with an on-disk cache.

    ``error_model="numpy"``: a float division by zero gives inf or nan, as in numpy, instead of
    raising. Python's model puts a zero check before every division, and that branch stops
    LLVM from vectorizing the optimizers' per-coordinate loops (measured: Adagrad on cached
    rows of dim 16 took 42 ns a row with it, 6 ns without). No kernel divides by zero on
    valid input: the optimizers refuse settings whose float32 denominators could be 0.
    """
    return cast(_F, njit(nogil=True, cache=True, error_model="numpy")(function))


def inline_kernel(function: _F) -> _F:
    """A :func:`kernel` inlined into its callers in numba's IR, so that a loop calling it
    still vectorizes: for arithmetic one formula shares between two loops."""
    return cast(_F, njit(nogil=True, cache=True, error_model="numpy", inline="always")(function))


@kernel
def mix64(x: np.uint64) -> np.uint64:
    """splitmix64 finalizer; must equal :func:`sniper.hashing.splitmix64_mix`."""
    z = (x ^ (x >> _S30)) * _MUL1
    z = (z ^ (z >> _S27)) * _MUL2
    return z ^ (z >> _S31)


@kernel
def _shard_of(h: np.uint64, n: np.uint64) -> np.int64:
    """``h % n``; a mask when ``n`` is a power of two: the same value without a 64-bit
    division, which costs more than the rest of a split together."""
    if n & (n - np.uint64(1)) == 0:
        return np.int64(h & (n - np.uint64(1)))
    return np.int64(h % n)


@kernel
def shard_ids(signs: np.ndarray, num_shards: int) -> np.ndarray:
    """Shard of every sign (the numba twin of :func:`sniper.hashing.shard_of`)."""
    out = np.empty(signs.shape[0], dtype=np.int64)
    n = np.uint64(num_shards)
    for i in range(signs.shape[0]):
        out[i] = _shard_of(mix64(signs[i]), n)
    return out


@kernel
def first_decrease(offsets: np.ndarray) -> int:
    """Index ``i`` of the first ``offsets[i] < offsets[i - 1]``, or -1 if none: a batch's
    offsets validated in one pass (numpy's ``any(diff(offsets) < 0)`` allocates twice and
    took 8 of the 17 us a small variable's split cost)."""
    for i in range(1, offsets.shape[0]):
        if offsets[i] < offsets[i - 1]:
            return i
    return -1


@kernel
def split_by_shard(
    signs: np.ndarray, offsets: np.ndarray, num_shards: int, values: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stable-partition a ragged batch by shard.

    Returns ``(signs_out, shard_offsets, values_out)`` where shard ``s``'s signs of example
    ``b`` are ``signs_out[shard_offsets[s, b]:shard_offsets[s, b + 1]]``; examples keep their
    order inside a shard, so every per-shard kernel sees an ordinary ragged batch.
    ``values`` (``[n, k]`` float32, or None) are per-sign values that move with their signs
    (a weighted bag's weights and scales) into ``values_out``; without them ``values_out`` is
    empty, and numba compiles the kernel without their branch (it prunes ``is None`` tests
    of an argument typed None), so an unweighted batch runs the loop it always ran.
    """
    batch = offsets.shape[0] - 1
    n = np.uint64(num_shards)
    # Shard ids first, in a loop of their own that LLVM vectorizes; two bytes per sign (a table
    # has at most MAX_TABLE_SHARDS) keep the later passes' reads small.
    shard = np.empty(signs.shape[0], dtype=np.uint16)
    for j in range(signs.shape[0]):
        shard[j] = _shard_of(mix64(signs[j]), n)
    # counts[b, s]: example-major, so one example's counters share a cache line. The same
    # array then serves as the scatter cursors. (40% faster than shard-major counters.)
    counts = np.zeros((batch, num_shards), dtype=np.int64)
    for b in range(batch):
        for j in range(offsets[b], offsets[b + 1]):
            counts[b, shard[j]] += 1
    shard_offsets = np.empty((num_shards, batch + 1), dtype=np.int64)
    position = 0
    for s in range(num_shards):
        shard_offsets[s, 0] = position
        for b in range(batch):
            counts[b, s], position = position, position + counts[b, s]
            shard_offsets[s, b + 1] = position
    signs_out = np.empty_like(signs)
    values_out = np.empty((0, 0), dtype=np.float32)
    if values is not None:
        values_out = np.empty((signs.shape[0], values.shape[1]), dtype=np.float32)
    for b in range(batch):
        for j in range(offsets[b], offsets[b + 1]):
            s = shard[j]
            p = counts[b, s]
            signs_out[p] = signs[j]
            if values is not None:
                values_out[p] = values[j]
            counts[b, s] = p + 1
    return signs_out, shard_offsets, values_out


# How a weighted or normalized bag scales its rows (:func:`bag_scales`).
BAG_SUM = 0
BAG_MEAN = 1
BAG_SQRTN = 2


@kernel
def bag_scales(offsets: np.ndarray, weights: np.ndarray, mode: int) -> np.ndarray:
    """Each sign's factor in its example's pool: ``weights[j] / divisor(b)``, where the
    divisor is 1 (``BAG_SUM``), the bag's weight sum (``BAG_MEAN``) or the root of its squared
    weights' sum (``BAG_SQRTN``), and a zero divisor gives 0 (TensorFlow's
    ``embedding_lookup_sparse`` combiners, with its ``div_no_nan``). A pool is then
    ``sum(scales[j] * row_j)`` and sign ``j``'s gradient ``grad[b] * scales[j]``."""
    scales = np.empty(weights.shape[0], dtype=np.float32)
    for b in range(offsets.shape[0] - 1):
        total = 0.0
        for j in range(offsets[b], offsets[b + 1]):
            w = np.float64(weights[j])
            total += w if mode == BAG_MEAN else w * w
        if mode == BAG_SQRTN:
            total = math.sqrt(total)
        factor = 1.0 if mode == BAG_SUM else (1.0 / total if total != 0.0 else 0.0)
        for j in range(offsets[b], offsets[b + 1]):
            scales[j] = np.float32(np.float64(weights[j]) * factor)
    return scales


@kernel
def _home(h: np.uint64, slot_count: int) -> int:
    return np.int64(((h >> _S32) * np.uint64(slot_count)) >> _S32)


@kernel
def sign_at(slots: np.ndarray, slot: int) -> np.uint64:
    """The sign stored in ``slot``."""
    return np.uint64(slots[slot, 0]) | (np.uint64(slots[slot, 1]) << _S32)


@kernel
def find_slot(slots: np.ndarray, meta: np.ndarray, shard: int, sign: np.uint64) -> int:
    """Slot holding ``sign`` in ``shard``, or ``-1 - free_slot`` when it is absent."""
    return _probe(slots, meta[shard, SLOT_START], meta[shard, SLOT_COUNT], sign, mix64(sign))


@kernel
def _probe(slots: np.ndarray, start: int, count: int, sign: np.uint64, h: np.uint64) -> int:
    """:func:`find_slot` for a shard's slot range and the sign's hash ``h``, already known."""
    lo = np.uint32(sign & _LOW32)
    hi = np.uint32(sign >> _S32)
    i = _home(h, count)
    while True:
        slot = start + i
        if slots[slot, 2] == EMPTY:
            return -1 - slot
        if slots[slot, 0] == lo and slots[slot, 1] == hi:
            return slot
        i += 1
        if i == count:
            i = 0


@kernel
def _delete_slot(
    slots: np.ndarray, slot_of_row: np.ndarray, meta: np.ndarray, shard: int, hole: int
) -> None:
    """Free ``hole`` and shift later entries of its probe run back (no tombstones)."""
    start = meta[shard, SLOT_START]
    count = meta[shard, SLOT_COUNT]
    i = hole - start
    j = i
    while True:
        j += 1
        if j == count:
            j = 0
        if slots[start + j, 2] == EMPTY:
            break
        home = _home(mix64(sign_at(slots, start + j)), count)
        # The entry at j may move to the hole at i only if i lies on its probe path [home, j].
        if (j > i and (home <= i or home > j)) or (j < i and (home <= i and home > j)):
            slots[start + i, 0] = slots[start + j, 0]
            slots[start + i, 1] = slots[start + j, 1]
            slots[start + i, 2] = slots[start + j, 2]
            slot_of_row[slots[start + i, 2] & ROW_BITS] = start + i
            i = j
    slots[start + i, 2] = EMPTY


@kernel
def _claim_row(
    slots: np.ndarray,
    slot_of_row: np.ndarray,
    stamps: np.ndarray,
    low_water: int,
    meta: np.ndarray,
    counters: np.ndarray,
    shard: int,
) -> int:
    """A free row of ``shard``: the next unused one, else a CLOCK victim; -1 if a pending call
    (this one, or a fed batch) holds every row."""
    row_start = meta[shard, ROW_START]
    capacity = meta[shard, ROW_CAPACITY]
    used = meta[shard, ROWS_USED]
    if used < capacity:
        meta[shard, ROWS_USED] = used + 1
        return row_start + used
    hand = meta[shard, CLOCK_HAND]
    for _ in range(2 * capacity + 1):
        row = row_start + hand
        hand += 1
        if hand == capacity:
            hand = 0
        if np.int64(stamps[row]) >= low_water:
            continue
        slot = slot_of_row[row]
        word = slots[slot, 2]
        if word & REF:
            slots[slot, 2] = word & ROW_BITS
            continue
        meta[shard, CLOCK_HAND] = hand
        _delete_slot(slots, slot_of_row, meta, shard, slot)
        counters[shard, EVICTIONS] += 1
        return row
    meta[shard, CLOCK_HAND] = hand
    return -1


def _ziggurat(layers: int, r: float, v: float) -> tuple[np.ndarray, np.ndarray]:
    """Marsaglia and Tsang's ziggurat for the normal, as Doornik's ZIGNOR lays it out: ``x[i]``
    the right edge of layer ``i`` (``x[0] = v / f(r)`` is the base layer's notional width,
    ``x[1] = r`` where the tail starts, ``x[layers] = 0``) and ``ratio[i] = x[i + 1] / x[i]``,
    the share of layer ``i`` that lies wholly under the density."""
    x = np.zeros(layers + 1)
    f = math.exp(-0.5 * r * r)
    x[0], x[1] = v / f, r
    for i in range(2, layers):
        x[i] = math.sqrt(-2.0 * math.log(v / x[i - 1] + f))
        f = math.exp(-0.5 * x[i] * x[i])
    return x, x[1:] / x[:-1]


_ZIG_LAYERS = 128
_ZIG_R = 3.442619855899  # where the tail starts, for 128 layers of equal area:
_ZIG_AREA = 9.91256303526217e-3
_ZIG_X, _ZIG_RATIO = _ziggurat(_ZIG_LAYERS, _ZIG_R, _ZIG_AREA)
_ZIG_MASK = np.uint64(_ZIG_LAYERS - 1)


@kernel
def _uniform01(x: np.uint64) -> float:
    """The top 53 bits of ``x`` as a double in [0, 1)."""
    return np.float64(x >> _S11) * _TWO_POW_MINUS_53


@kernel
def _normal_tail(state: np.uint64, negative: bool) -> float:
    """A draw of the normal beyond ``±_ZIG_R`` (Marsaglia's tail method) from ``state``'s
    stream."""
    while True:
        state += _GOLDEN
        tail = math.log(_uniform01(mix64(state))) / _ZIG_R
        state += _GOLDEN
        if -2.0 * math.log(_uniform01(mix64(state))) >= tail * tail:
            return tail - _ZIG_R if negative else _ZIG_R - tail


@kernel
def _ziggurat_first(x: np.uint64) -> tuple[float, bool]:
    """The ziggurat's first try on draw ``x``: a standard normal value, and whether it stands.

    The draw's top 53 bits are the position ``u`` in the layer and its low 7 bits the layer,
    so the two are independent (Doornik's fix of the original). 97.2% of first tries stand:
    the mean of the layers' ratios (the top layer's is 0, its every try goes on to the wedge).
    """
    u = 2.0 * _uniform01(x) - 1.0
    i = np.int64(x & _ZIG_MASK)
    return u * _ZIG_X[i], abs(u) < _ZIG_RATIO[i]


@kernel
def _ziggurat_rest(x: np.uint64) -> float:
    """The ziggurat's draw for a coordinate whose first try, draw ``x``, did not stand: that
    try goes on to the wedge test or the tail, and later tries take ``mix64(x + k * golden)``
    for k = 1, 2, ... (each coordinate its own stream, so the first tries of a row are
    independent of each other and computed together)."""
    state = x
    while True:
        u = 2.0 * _uniform01(x) - 1.0
        i = np.int64(x & _ZIG_MASK)
        if abs(u) < _ZIG_RATIO[i]:
            return u * _ZIG_X[i]
        if i == 0:
            return _normal_tail(state, u < 0.0)
        z = u * _ZIG_X[i]
        f0 = math.exp(-0.5 * (_ZIG_X[i] * _ZIG_X[i] - z * z))
        f1 = math.exp(-0.5 * (_ZIG_X[i + 1] * _ZIG_X[i + 1] - z * z))
        state += _GOLDEN
        if f1 + _uniform01(mix64(state)) * (f0 - f1) < 1.0:
            return z
        state += _GOLDEN
        x = mix64(state)


@kernel
def initial_row(
    out: np.ndarray, sign: np.uint64, seed_key: np.uint64, kind: int, a: float, b: float
) -> None:
    """Write the initial value of ``sign`` into ``out[:]``: a pure function of (seed, sign)."""
    base = mix64(sign ^ seed_key)
    if kind == INIT_NORMAL:
        # The ziggurat (Marsaglia and Tsang): one 64-bit draw, a table lookup and a comparison
        # per coordinate, almost always; the rare try that does not stand is finished after.
        # Where this took 91 ns of CPU a row of 16, Marsaglia's polar method (a log and a sqrt
        # per pair) took 208 and Box-Muller 360. Of its 66 ns a row (CHANGELOG.md, 2026-11-28),
        # the first tries alone take 14; keeping their verdict in that loop 12 more (it no
        # longer vectorizes); finishing the 0.44 coordinates a row that do not stand 12 (27
        # each); the rest is the second pass over the 36% of rows that have one.
        settled = True
        for d in range(out.shape[0]):
            z, stands = _ziggurat_first(mix64(base + np.uint64(d + 1) * _GOLDEN))
            out[d] = a + b * z
            settled &= stands
        if not settled:
            for d in range(out.shape[0]):
                x = mix64(base + np.uint64(d + 1) * _GOLDEN)
                if not _ziggurat_first(x)[1]:
                    out[d] = a + b * _ziggurat_rest(x)
        return
    for d in range(out.shape[0]):
        x = mix64(base + np.uint64(d + 1) * _GOLDEN)
        if kind == INIT_CONSTANT:
            out[d] = a
        else:
            out[d] = a + (b - a) * _uniform01(x)


@kernel
def _admitted(sketch: np.ndarray, shard: int, sign: np.uint64, min_count: int, count: bool) -> bool:
    """Whether ``sign`` has been seen ``min_count`` times in the shard's count-min sketch;
    with ``count``, this sighting is added first (lookups count, pushes only ask)."""
    depth = sketch.shape[1]
    width = sketch.shape[2]
    h = mix64(sign ^ _GOLDEN)
    estimate = np.uint32(0xFFFFFFFF)
    for k in range(depth):
        h = mix64(h + np.uint64(k + 1))
        column = _home(h, width)
        value = sketch[shard, k, column]
        if count and value < np.uint32(0xFFFFFFFF):
            value += np.uint32(1)
            sketch[shard, k, column] = value
        estimate = min(estimate, value)
    return np.int64(estimate) >= min_count


@kernel
def map_rows(
    shard: int,
    signs: np.ndarray,
    rows: np.ndarray,
    count_sighting: bool,
    seq: int,
    low_water: int,
    stamp: bool,
    slots: np.ndarray,
    slot_of_row: np.ndarray,
    stamps: np.ndarray,
    meta: np.ndarray,
    counters: np.ndarray,
    sketch: np.ndarray,
    min_count: int,
    weights: np.ndarray,
    state: np.ndarray,
    state_init: np.ndarray,
    steps: np.ndarray,
    seed_key: np.uint64,
    init_kind: int,
    init_a: float,
    init_b: float,
) -> int:
    """Find or insert the row of every sign in ``signs`` (all of shard ``shard``).

    Writes ``rows``: a row id, or ``NOT_ADMITTED`` for a sign the admission filter
    still holds back. A new row gets the sign's initial value and fresh optimizer state. Every
    row touched is marked referenced for CLOCK and, with ``stamp``, stamped with ``seq`` (this
    call's pending number, at least ``low_water``): a later insert of the same call, or of any
    call while this one is pending, cannot evict it. The caller stamps when the shard is full
    enough for this call to evict (see ``EmbeddingTable._map_rows``). Returns ``NO_ROW_FREE``
    if the shard has fewer rows free or evictable than the batch has distinct signs, else 0.
    """
    status = 0
    admission = min_count > 1
    stamp_value = np.uint16(seq)
    hits = 0
    misses = 0
    n = signs.shape[0]
    slot_start = meta[shard, SLOT_START]
    slot_count = meta[shard, SLOT_COUNT]
    # Each sign is hashed once, PREFETCH_DISTANCE signs ahead, for its prefetch and its probe.
    hashes = np.empty(_RING, dtype=np.uint64)
    for j in range(min(PREFETCH_DISTANCE, n)):
        hashes[j] = mix64(signs[j])
    for j in range(n):
        ahead = j + PREFETCH_DISTANCE
        if ahead < n:
            h = mix64(signs[ahead])
            hashes[ahead & _RING_MASK] = h
            prefetch(slots, (slot_start + _home(h, slot_count)) * 3)
        sign = signs[j]
        h = hashes[j & _RING_MASK]
        found = _probe(slots, slot_start, slot_count, sign, h)
        if found >= 0:
            word = slots[found, 2]
            if not word & REF:  # no store, and no dirty cache line, for hot rows
                slots[found, 2] = word | REF
            row = np.int64(word & ROW_BITS)
            if stamp:
                stamps[row] = stamp_value
            hits += 1
            rows[j] = row
            continue
        misses += 1
        if admission:
            passed = _admitted(sketch, shard, sign, min_count, count_sighting)
            if not passed:
                if count_sighting:  # a push's unadmitted sign is counted as a dropped gradient
                    counters[shard, REJECTED] += 1
                rows[j] = NOT_ADMITTED
                continue
            counters[shard, ADMITTED] += 1
        # Once a claim found every row held, so would every later one of this call (it frees
        # none): not scanning the shard again for each sign keeps a full shard's map O(n).
        row = -1
        if status != NO_ROW_FREE:
            row = _claim_row(slots, slot_of_row, stamps, low_water, meta, counters, shard)
        if row < 0:
            rows[j] = NO_ROW_FREE
            status = NO_ROW_FREE
            continue
        # Eviction may have shifted entries, so the free slot is searched again.
        slot = -1 - _probe(slots, slot_start, slot_count, sign, h)
        slots[slot, 0] = np.uint32(sign & _LOW32)
        slots[slot, 1] = np.uint32(sign >> _S32)
        slots[slot, 2] = np.uint32(row) | REF
        slot_of_row[row] = slot
        if stamp:
            stamps[row] = stamp_value
        initial_row(weights[row], sign, seed_key, init_kind, init_a, init_b)
        for k in range(state.shape[1]):
            state[row, k, :] = state_init[k]
        if steps.shape[0] > row:  # only Adam keeps per-row steps; others pass a dummy
            steps[row] = 0
        counters[shard, INSERTS] += 1
        rows[j] = row
    counters[shard, HITS] += hits
    counters[shard, MISSES] += misses
    return status


@kernel
def find_rows(
    shard_of_sign: np.ndarray, signs: np.ndarray, slots: np.ndarray, meta: np.ndarray
) -> np.ndarray:
    """Row of every sign, or -1 for an absent one; never inserts and never touches CLOCK."""
    rows = np.empty(signs.shape[0], dtype=np.int64)
    for j in range(signs.shape[0]):
        found = find_slot(slots, meta, shard_of_sign[j], signs[j])
        rows[j] = np.int64(slots[found, 2] & ROW_BITS) if found >= 0 else -1
    return rows


@kernel
def pool_rows(
    weights: np.ndarray,
    rows: np.ndarray,
    offsets: np.ndarray,
    out: np.ndarray,
    add: bool = True,
    col: int = 0,
) -> None:
    """``out[b, col:col + dim] += sum(weights[rows[j]] for j in example b)``, skipping negative
    rows; with ``add=False``, what those columns held is ignored (a lookup hands in
    ``np.empty``, or the trainer a model input reused from an earlier batch, where zeroing
    first with ``np.zeros`` cost a small variable's lookup 2-8 us holding the GIL).
    Dim 16 starts each sum from zero in registers: zeroing the block first was a second pass
    over its strided rows (1024 examples of one sign from a 64k-row table: 13-14 us into the
    trainer's 1229-column model input, 25-28 us with the pass; 8 and 11 us into an array of
    its own).

    ``weights`` and ``out`` are C-contiguous; ``out`` may be wider than ``dim``, so a lookup
    can write each variable's block straight into the trainer's model input (``col``: where
    the block starts) instead of into an array of its own that is then copied there. Rows of
    dim 16 are summed in registers (:func:`pool_rows16`), any other dim by
    :func:`pool_rows_any`; both add an example's rows to ``out[b]`` one at a time in the order
    of its signs, so their results are the same bits.
    """
    dim = weights.shape[1]
    if dim == LANES:
        pool_rows16(weights, rows, offsets, out, col, add)
        return
    if not add:
        out[:, col : col + dim] = 0
    pool_rows_any(weights, rows, offsets, out, col)


@kernel
def pool_rows16(
    weights: np.ndarray,
    rows: np.ndarray,
    offsets: np.ndarray,
    out: np.ndarray,
    col: int = 0,
    add: bool = True,
) -> None:
    """:func:`pool_rows` for dim 16: each example's sum is a ``<16 x float>`` in registers,
    started from ``out[b]`` (``add``) or from zero, and written back after its last row."""
    n = rows.shape[0]
    width = out.shape[1]
    zero = np.zeros(LANES, dtype=np.float32)
    for b in range(offsets.shape[0] - 1):
        at = b * width + col
        total = load16(out, at) if add else load16(zero, 0)
        for j in range(offsets[b], offsets[b + 1]):
            if j + GATHER_PREFETCH_DISTANCE < n:
                ahead = rows[j + GATHER_PREFETCH_DISTANCE]
                if ahead >= 0:
                    prefetch(weights, ahead * LANES)
            row = rows[j]
            if row >= 0:
                total = add16(total, load16(weights, row * LANES))
        store16(out, at, total)


@kernel
def pool_rows_any(
    weights: np.ndarray, rows: np.ndarray, offsets: np.ndarray, out: np.ndarray, col: int = 0
) -> None:
    """:func:`pool_rows` for any dim: the sum goes through ``out[b]`` in memory."""
    # The prefetch is written out here and in pool_rows16: as one inlined helper the fed
    # lookup of the huge variable took 2.36 ms instead of 0.49 (`sniper bench store`).
    dim = weights.shape[1]
    n = rows.shape[0]
    for b in range(offsets.shape[0] - 1):
        for j in range(offsets[b], offsets[b + 1]):
            if j + GATHER_PREFETCH_DISTANCE < n:
                ahead = rows[j + GATHER_PREFETCH_DISTANCE]
                if ahead >= 0:
                    prefetch(weights, ahead * dim)
            row = rows[j]
            if row >= 0:
                for d in range(dim):
                    out[b, col + d] += weights[row, d]


@kernel
def pool_rows_scaled(
    weights: np.ndarray,
    rows: np.ndarray,
    scales: np.ndarray,
    offsets: np.ndarray,
    out: np.ndarray,
    col: int = 0,
) -> None:
    """``out[b, col:col + dim] = sum(scales[j] * weights[rows[j]] for j in example b)``,
    skipping negative rows: a weighted, mean or sqrtn bag (:func:`bag_scales`). A kernel of
    its own, so that plain sums keep :func:`pool_rows` as it is."""
    dim = weights.shape[1]
    n = rows.shape[0]
    out[:, col : col + dim] = 0
    for b in range(offsets.shape[0] - 1):
        for j in range(offsets[b], offsets[b + 1]):
            if j + GATHER_PREFETCH_DISTANCE < n:
                ahead = rows[j + GATHER_PREFETCH_DISTANCE]
                if ahead >= 0:
                    prefetch(weights, ahead * dim)
            row = rows[j]
            if row >= 0:
                scale = scales[j]
                for d in range(dim):
                    out[b, col + d] += scale * weights[row, d]


@kernel
def gather_rows(weights: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``[n, dim]`` copy of ``weights[rows]``, zeros for negative rows: the first half of
    lookup-then-pool, which materializes every occurrence's row (the seeds' Embedding op)."""
    dim = weights.shape[1]
    out = np.zeros((rows.shape[0], dim), dtype=np.float32)
    for j in range(rows.shape[0]):
        row = rows[j]
        if row >= 0:
            for d in range(dim):
                out[j, d] = weights[row, d]
    return out


@kernel
def pool_gathered(gathered: np.ndarray, offsets: np.ndarray, out: np.ndarray) -> None:
    """``out[b] += sum(gathered[j] for j in example b)``: the second half (SeqPool)."""
    for b in range(offsets.shape[0] - 1):
        for j in range(offsets[b], offsets[b + 1]):
            for d in range(gathered.shape[1]):
                out[b, d] += gathered[j, d]


@kernel
def sum_by_row(
    rows: np.ndarray,
    offsets: np.ndarray,
    grads: np.ndarray,
    row_stride: int,
    col_stride: int,
    dim: int,
    slot_of_row: np.ndarray,
    counters: np.ndarray,
    shard: int,
    hits: int,
    scales: Any = None,
) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Sum the gradients of each distinct row of a ragged batch, in one pass.

    Sign ``j`` of example ``b`` (row ``rows[j]``) contributes example ``b``'s gradient (times
    ``scales[j]`` where given: a weighted, mean or sqrtn bag; without them numba compiles
    this kernel without that branch, so a plain sum runs the loop it always ran),
    ``grads[b * row_stride + d * col_stride]`` for ``d < dim``: the gradients come as the flat
    memory of a strided matrix (the trainer's are blocks of one transposed product, pushed
    without a copy each; a C-contiguous matrix has strides ``dim`` and 1). Returns
    ``(unique_rows, summed, n, largest)``: the first ``n`` entries of both are the distinct
    rows, in the order they first appear, and their summed gradients; ``largest`` is the
    largest ``|summed|`` (NaN if any is NaN), which tells the optimizer whether its update
    needs the finite check (found here, without the GIL, over the summed rows alone: as a
    separate call over all of ``grads`` it cost a small variable's push 6 us). A sign
    without a row (-1: not admitted) has its gradient dropped and counted, and ``hits`` is
    added to the shard's hit count (a push that reuses its batch's mapping counts its signs
    here, where the counters are at hand, rather than in a separate numpy call).

    Each distinct row's position in ``summed`` lives in ``slot_of_row`` (tagged with ``MARK``)
    while the call runs, and the saved slots are put back before it returns, so deduplication
    costs no memory per table row, but the caller must hold the shard's index lock.
    """
    n_signs = rows.shape[0]
    unique_rows = np.empty(n_signs, dtype=np.int64)
    saved = np.empty(n_signs, dtype=np.uint32)
    summed = np.empty((n_signs, dim), dtype=np.float32)
    # Each example's gradient is gathered here once, so that the loops over its signs read a
    # contiguous row and vectorize whatever the strides.
    g = np.empty(dim, dtype=np.float32)
    example = np.empty(dim, dtype=np.float32)
    n = 0
    dropped = 0
    for b in range(offsets.shape[0] - 1):
        if offsets[b] == offsets[b + 1]:
            continue
        for d in range(dim):
            g[d] = grads[b * row_stride + d * col_stride]
        if scales is not None:
            example[:] = g
        for j in range(offsets[b], offsets[b + 1]):
            if j + PREFETCH_DISTANCE < n_signs and rows[j + PREFETCH_DISTANCE] >= 0:
                prefetch(slot_of_row, rows[j + PREFETCH_DISTANCE])
            row = rows[j]
            if row < 0:
                dropped += 1
                continue
            if scales is not None:
                scale = scales[j]
                for d in range(dim):
                    g[d] = example[d] * scale
            tagged = slot_of_row[row]
            if tagged & MARK:
                position = np.int64(tagged & LOW_MASK)
                for d in range(dim):
                    summed[position, d] += g[d]
                continue
            saved[n] = tagged
            slot_of_row[row] = MARK | np.uint32(n)
            unique_rows[n] = row
            for d in range(dim):
                summed[n, d] = g[d]
            n += 1
    for i in range(n):
        slot_of_row[unique_rows[i]] = saved[i]
    counters[shard, DROPPED_GRADIENTS] += dropped
    counters[shard, HITS] += hits
    return unique_rows, summed, n, max_abs(summed[:n].reshape(-1))


@kernel
def _row_size(array: np.ndarray) -> int:
    """Elements per row of a C-contiguous array (its flat stride along axis 0)."""
    size = 1
    for extent in array.shape[1:]:
        size *= extent
    return size


# The optimizers below work on row views (``weights[row]``, ``state[row, k]``), so that LLVM
# vectorizes the loop over coordinates, and each prefetches the row it will update
# PREFETCH_DISTANCE steps later. The prefetch is written out in every loop: moved into a
# helper kernel, it made Adagrad 4x slower on cached rows (27 ns a row instead of 6.5).
#
# Non-finite rows. A finite but huge gradient can overflow an optimizer's state (g*g past
# 3.4e38), and a row once NaN or Inf would be served to every later lookup. With ``guard``,
# each row's new values are computed first and written only if all are finite; a row that
# fails keeps its values and is counted (the kernels return how many). The check costs a
# second pass over the row (measured on 60k random rows of 5M: Adagrad 68 -> 92 ns a row), so
# ``Optimizer.apply`` asks for it only when a gradient is large enough to overflow in one step
# (``max_abs``); below that bound every value a step changes moves by less than half a float32
# ulp at the top of the range, so no finite value can round to Inf. Each optimizer's
# arithmetic is one ``inline_kernel`` that both passes call.


@kernel
def max_abs(values: np.ndarray) -> float:
    """The largest ``|x|`` of a contiguous 1-D float32 array (NaN if any is NaN). Found as an
    integer max over the bit patterns, which order like the magnitudes and which LLVM
    vectorizes (0.2 ns a value; a float max does not vectorize without fast-math). NaN's bit
    patterns lie above Inf's, so a NaN anywhere gives NaN."""
    return _as_float32(_top_bits(values.view(np.uint32)))


@kernel
def _top_bits(bits: np.ndarray) -> np.uint32:
    """The largest of contiguous float32 bit patterns with the sign cleared."""
    top = np.uint32(0)
    for j in range(bits.shape[0]):
        top = max(top, bits[j] & np.uint32(0x7FFFFFFF))
    return top


@kernel
def max_abs_strided(
    values: np.ndarray, rows: int, cols: int, row_stride: int, col_stride: int
) -> float:
    """:func:`max_abs` of the ``[rows, cols]`` matrix whose element ``[r, c]`` is
    ``values[r * row_stride + c * col_stride]`` in the flat ``values`` (a matrix that is not
    contiguous in memory: one that is goes to :func:`max_abs` whole, vectorized).

    A block of a wider matrix has one stride of 1: its runs along that axis are read as
    contiguous runs, which LLVM vectorizes (a seed_ctr batch's 76 ``[1024, 16]`` column
    blocks of a torch model's ``[1024, 1229]`` gradient: 1.10 ms a push with the general
    loop, which does not vectorize, 0.5-0.7 ms so)."""
    bits = values.view(np.uint32)
    top = np.uint32(0)
    if col_stride == 1 or row_stride == 1:
        runs, run, step = (rows, cols, row_stride) if col_stride == 1 else (cols, rows, col_stride)
        for i in range(runs):
            top = max(top, _top_bits(bits[i * step : i * step + run]))
        return _as_float32(top)
    for r in range(rows):
        for c in range(cols):
            top = max(top, bits[r * row_stride + c * col_stride] & np.uint32(0x7FFFFFFF))
    return _as_float32(top)


@kernel
def _as_float32(bits: np.uint32) -> float:
    out = np.empty(1, dtype=np.uint32)
    out[0] = bits
    return float(out.view(np.float32)[0])


@inline_kernel
def _finite(x: Any) -> Any:
    return 1 if abs(x) <= FLOAT32_MAX else 0


@inline_kernel
def _sgd_step(w: Any, gd: Any, lr32: Any) -> Any:
    return w - lr32 * gd


@kernel
def sgd_update(weights: np.ndarray, rows: np.ndarray, g: np.ndarray, lr: float, guard: bool) -> int:
    lr32 = np.float32(lr)
    w_size, n, dim = _row_size(weights), g.shape[0], weights.shape[1]
    skipped = 0
    for i in range(n):
        if i + PREFETCH_DISTANCE < n:
            prefetch(weights, rows[i + PREFETCH_DISTANCE] * w_size)
        w = weights[rows[i]]
        gi = g[i]
        if guard:
            finite = 0
            for d in range(dim):
                finite += _finite(_sgd_step(w[d], gi[d], lr32))
            if finite < dim:
                skipped += 1
                continue
        for d in range(dim):
            w[d] = _sgd_step(w[d], gi[d], lr32)
    return skipped


@inline_kernel
def _adagrad_step(w: Any, a: Any, gd: Any, lr32: Any, eps32: Any) -> tuple[Any, Any]:
    a = a + gd * gd
    return w - lr32 * gd / (np.sqrt(a) + eps32), a


@kernel
def adagrad_update(
    weights: np.ndarray,
    state: np.ndarray,
    rows: np.ndarray,
    g: np.ndarray,
    lr: float,
    eps: float,
    guard: bool,
) -> int:
    """``acc += g*g; w -= lr * g / (sqrt(acc) + eps)`` in float32, as torch.optim.Adagrad."""
    lr32 = np.float32(lr)
    eps32 = np.float32(eps)
    w_size, s_size, n, dim = _row_size(weights), _row_size(state), g.shape[0], weights.shape[1]
    skipped = 0
    for i in range(n):
        if i + PREFETCH_DISTANCE < n:
            ahead = rows[i + PREFETCH_DISTANCE]
            prefetch(weights, ahead * w_size)
            prefetch(state, ahead * s_size)
        row = rows[i]
        w = weights[row]
        acc = state[row, 0]
        gi = g[i]
        if guard:
            finite = 0
            for d in range(dim):
                new_w, new_a = _adagrad_step(w[d], acc[d], gi[d], lr32, eps32)
                finite += _finite(new_w) + _finite(new_a)
            if finite < 2 * dim:
                skipped += 1
                continue
        for d in range(dim):
            w[d], acc[d] = _adagrad_step(w[d], acc[d], gi[d], lr32, eps32)
    return skipped


@inline_kernel
def _adam_step(
    w: Any,
    m: Any,
    v: Any,
    gd: Any,
    b1: Any,
    b2: Any,
    step: Any,
    c2: Any,
    eps: Any,
) -> tuple[Any, Any, Any]:
    """One coordinate of Adam: ``step`` is lr over the first bias correction, ``c2`` the
    square root of the second."""
    m = b1 * m + (np.float32(1.0) - b1) * gd
    v = b2 * v + (np.float32(1.0) - b2) * gd * gd
    return w - step * m / (np.sqrt(v) / c2 + eps), m, v


@kernel
def adam_update(
    weights: np.ndarray,
    state: np.ndarray,
    steps: np.ndarray,
    rows: np.ndarray,
    g: np.ndarray,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    guard: bool,
) -> int:
    """Adam with a per-row step count, in torch's form (bias corrections outside the sqrt)."""
    b1 = np.float32(beta1)
    b2 = np.float32(beta2)
    eps32 = np.float32(eps)
    w_size, s_size, n, dim = _row_size(weights), _row_size(state), g.shape[0], weights.shape[1]
    skipped = 0
    for i in range(n):
        if i + PREFETCH_DISTANCE < n:
            ahead = rows[i + PREFETCH_DISTANCE]
            prefetch(weights, ahead * w_size)
            prefetch(state, ahead * s_size)
        row = rows[i]
        t = steps[row] + 1
        step = np.float32(lr / (1.0 - beta1**t))
        c2 = np.float32(math.sqrt(1.0 - beta2**t))
        w = weights[row]
        m_row = state[row, 0]
        v_row = state[row, 1]
        gi = g[i]
        if guard:
            finite = 0
            for d in range(dim):
                new_w, new_m, new_v = _adam_step(
                    w[d], m_row[d], v_row[d], gi[d], b1, b2, step, c2, eps32
                )
                finite += _finite(new_w) + _finite(new_m) + _finite(new_v)
            if finite < 3 * dim:
                skipped += 1
                continue
        steps[row] = t
        for d in range(dim):
            w[d], m_row[d], v_row[d] = _adam_step(
                w[d], m_row[d], v_row[d], gi[d], b1, b2, step, c2, eps32
            )
    return skipped


@inline_kernel
def _ftrl_step(
    w: Any, z: Any, n: Any, gd: Any, alpha: Any, beta: Any, l1: Any, l2: Any
) -> tuple[Any, Any, Any]:
    """One coordinate of FTRL-proximal, in float64; the caller stores float32."""
    g64 = np.float64(gd)
    n_old = np.float64(n)
    n_new = n_old + g64 * g64
    sigma = (math.sqrt(n_new) - math.sqrt(n_old)) / alpha
    z_new = np.float64(z) + g64 - sigma * np.float64(w)
    if abs(z_new) <= l1:
        return 0.0, z_new, n_new
    sign_z = 1.0 if z_new > 0 else -1.0
    return (sign_z * l1 - z_new) / ((beta + math.sqrt(n_new)) / alpha + l2), z_new, n_new


@kernel
def ftrl_update(
    weights: np.ndarray,
    state: np.ndarray,
    rows: np.ndarray,
    g: np.ndarray,
    alpha: float,
    beta: float,
    l1: float,
    l2: float,
    guard: bool,
) -> int:
    """FTRL-proximal (McMahan et al. 2013) per coordinate; state[:, 0] is z, state[:, 1] is n."""
    w_size, s_size, n, dim = _row_size(weights), _row_size(state), g.shape[0], weights.shape[1]
    skipped = 0
    for i in range(n):
        if i + PREFETCH_DISTANCE < n:
            ahead = rows[i + PREFETCH_DISTANCE]
            prefetch(weights, ahead * w_size)
            prefetch(state, ahead * s_size)
        row = rows[i]
        w = weights[row]
        z_row = state[row, 0]
        n_row = state[row, 1]
        gi = g[i]
        if guard:
            finite = 0
            for d in range(dim):
                new_w, new_z, new_n = _ftrl_step(
                    w[d], z_row[d], n_row[d], gi[d], alpha, beta, l1, l2
                )
                # Stored as float32: a float64 past float32's range would become Inf.
                finite += _finite(new_w) + _finite(new_z) + _finite(new_n)
            if finite < 3 * dim:
                skipped += 1
                continue
        for d in range(dim):
            w[d], z_row[d], n_row[d] = _ftrl_step(
                w[d], z_row[d], n_row[d], gi[d], alpha, beta, l1, l2
            )
    return skipped


# -- grouped kernels: many tables' shards in one call (see sniper.store._grouped) ------------
#
# They read each table's arrays by address (sniper.store._pointers) and live here, not beside
# the Python that plans them: numba's cache is keyed by each source file, so a kernel in
# another file would keep the old code of these kernels after they change.

# Columns of a grouped pool's plan (sniper.store._grouped: one int64 row per shard): the
# table's, then the shard's.
_P_WEIGHTS, _P_CAPACITY, _P_DIM, _P_SEPARATE = range(4)
_P_ROWS, _P_SIGNS, _P_OFFSETS, _P_BATCH, _P_OUT, _P_WIDTH, _P_COL, _P_SCALES = range(4, 12)

# Columns of a grouped push's plan: the table's, then the shard's.
_U_WEIGHTS, _U_CAPACITY, _U_DIM, _U_KIND, _U_PARAMS, _U_STATE, _U_SLOTS = range(7)
_U_STEPS, _U_STEP_COUNT, _U_SLOT_OF_ROW, _U_COUNTERS, _U_NUM_SHARDS = range(7, 12)
_U_ROWS, _U_SIGNS, _U_OFFSETS, _U_BATCH, _U_SHARD, _U_HITS = range(12, 18)
_U_GRADS, _U_ROW_STRIDE, _U_COL_STRIDE, _U_GRADS_SIZE, _U_SCALES = range(18, 23)
# Columns of a grouped map's plan (pins): the table's, then the shard's.
_M_SLOTS, _M_SLOT_TOTAL, _M_SLOT_OF_ROW, _M_STAMPS, _M_CAPACITY, _M_META = range(6)
_M_COUNTERS, _M_NUM_SHARDS, _M_SKETCH, _M_DEPTH, _M_WIDTH, _M_MIN_COUNT = range(6, 12)
_M_WEIGHTS, _M_DIM, _M_STATE, _M_STATE_SLOTS, _M_STATE_INIT, _M_STEPS = range(12, 18)
_M_STEP_COUNT, _M_SEED, _M_INIT_KIND, _M_INIT_PARAMS = range(18, 22)
_M_SHARD, _M_SIGNS_AT, _M_SIGNS, _M_ROWS, _M_SEQ, _M_LOW_WATER, _M_STAMP = range(22, 29)
POOL_PLAN_COLUMNS = _P_SCALES + 1
PUSH_PLAN_COLUMNS = _U_SCALES + 1
MAP_PLAN_COLUMNS = _M_STAMP + 1


# optimizer kinds: which update :func:`update_rows` applies
OPT_SGD = 0
OPT_ADAGRAD = 1
OPT_ADAM = 2
OPT_FTRL = 3


@kernel
def update_rows(
    kind: int,
    params: np.ndarray,
    weights: np.ndarray,
    state: np.ndarray,
    steps: np.ndarray,
    rows: np.ndarray,
    g: np.ndarray,
    guard: bool,
) -> int:
    """The update of optimizer ``kind`` (``OPT_*``) with its ``params`` (float64, in the
    order of :attr:`~sniper.store.Optimizer.kernel_params`): one entry point, so that a
    kernel updating many tables in one call applies each table's own optimizer."""
    if kind == OPT_SGD:
        return sgd_update(weights, rows, g, params[0], guard)
    if kind == OPT_ADAGRAD:
        return adagrad_update(weights, state, rows, g, params[0], params[1], guard)
    if kind == OPT_ADAM:
        return adam_update(
            weights, state, steps, rows, g, params[0], params[1], params[2], params[3], guard
        )
    return ftrl_update(weights, state, rows, g, params[0], params[1], params[2], params[3], guard)


@kernel
def initial_rows(
    signs: np.ndarray, dim: int, seed_key: np.uint64, kind: int, a: float, b: float
) -> np.ndarray:
    """The initial value of every sign, as a ``[n, dim]`` float32 array."""
    out = np.empty((signs.shape[0], dim), dtype=np.float32)
    for j in range(signs.shape[0]):
        initial_row(out[j], signs[j], seed_key, kind, a, b)
    return out


@kernel
def pool_many(plan: np.ndarray) -> None:
    """Pool each planned shard into its block (:func:`~sniper.store._kernels.pool_rows`, or
    gathered first then summed for ``pooling="separate"``; a shard with per-sign scales, a
    weighted or normalized bag, by :func:`pool_rows_scaled`)."""
    for p in range(plan.shape[0]):
        weights = carray(float32_at(plan[p, _P_WEIGHTS]), (plan[p, _P_CAPACITY], plan[p, _P_DIM]))
        rows = carray(int64_at(plan[p, _P_ROWS]), plan[p, _P_SIGNS])
        offsets = carray(int64_at(plan[p, _P_OFFSETS]), plan[p, _P_BATCH] + 1)
        out = carray(float32_at(plan[p, _P_OUT]), (plan[p, _P_BATCH], plan[p, _P_WIDTH]))
        col = plan[p, _P_COL]
        if plan[p, _P_SCALES]:
            scales = carray(float32_at(plan[p, _P_SCALES]), plan[p, _P_SIGNS])
            pool_rows_scaled(weights, rows, scales, offsets, out, col)
        elif plan[p, _P_SEPARATE]:
            block = out[:, col : col + plan[p, _P_DIM]]
            block[...] = 0
            pool_gathered(gather_rows(weights, rows), offsets, block)
        else:
            pool_rows(weights, rows, offsets, out, False, col)


@kernel
def push_many(plan: np.ndarray) -> None:
    """For each planned shard: sum its gradients by row (counting dropped ones and the
    mapping's hits), then apply its optimizer, checking rows only where a summed gradient
    could overflow (``params[4]``: the optimizer's unchecked bound)."""
    for p in range(plan.shape[0]):
        params = carray(float64_at(plan[p, _U_PARAMS]), 5)
        capacity, dim = plan[p, _U_CAPACITY], plan[p, _U_DIM]
        batch = plan[p, _U_BATCH]
        shard = plan[p, _U_SHARD]
        weights = carray(float32_at(plan[p, _U_WEIGHTS]), (capacity, dim))
        state = carray(float32_at(plan[p, _U_STATE]), (capacity, plan[p, _U_SLOTS], dim))
        steps = carray(int32_at(plan[p, _U_STEPS]), plan[p, _U_STEP_COUNT])
        slot_of_row = carray(uint32_at(plan[p, _U_SLOT_OF_ROW]), capacity)
        counters = carray(int64_at(plan[p, _U_COUNTERS]), (plan[p, _U_NUM_SHARDS], COUNTERS))
        rows = carray(int64_at(plan[p, _U_ROWS]), plan[p, _U_SIGNS])
        offsets = carray(int64_at(plan[p, _U_OFFSETS]), batch + 1)
        grads = carray(float32_at(plan[p, _U_GRADS]), plan[p, _U_GRADS_SIZE])
        row_stride, col_stride, hits = (
            plan[p, _U_ROW_STRIDE],
            plan[p, _U_COL_STRIDE],
            plan[p, _U_HITS],
        )
        if plan[p, _U_SCALES]:
            scales = carray(float32_at(plan[p, _U_SCALES]), plan[p, _U_SIGNS])
            unique_rows, summed, n, largest = sum_by_row(
                rows,
                offsets,
                grads,
                row_stride,
                col_stride,
                dim,
                slot_of_row,
                counters,
                shard,
                hits,
                scales,
            )
        else:
            unique_rows, summed, n, largest = sum_by_row(
                rows,
                offsets,
                grads,
                row_stride,
                col_stride,
                dim,
                slot_of_row,
                counters,
                shard,
                hits,
            )
        guard = not largest <= params[4]  # NaN: check
        left = update_rows(
            plan[p, _U_KIND], params, weights, state, steps, unique_rows[:n], summed[:n], guard
        )
        counters[shard, NONFINITE_UPDATES] += left


@kernel
def map_many(plan: np.ndarray, status: np.ndarray) -> None:
    """:func:`map_rows` of each planned shard, counting sightings (a feed's pins): its
    status (0 or ``NO_ROW_FREE``) into ``status[p]``."""
    for p in range(plan.shape[0]):
        capacity, shards, dim = plan[p, _M_CAPACITY], plan[p, _M_NUM_SHARDS], plan[p, _M_DIM]
        state_slots, n = plan[p, _M_STATE_SLOTS], plan[p, _M_SIGNS]
        init = carray(float64_at(plan[p, _M_INIT_PARAMS]), 2)
        status[p] = map_rows(
            plan[p, _M_SHARD],
            carray(uint64_at(plan[p, _M_SIGNS_AT]), n),
            carray(int64_at(plan[p, _M_ROWS]), n),
            True,
            plan[p, _M_SEQ],
            plan[p, _M_LOW_WATER],
            plan[p, _M_STAMP] != 0,
            carray(uint32_at(plan[p, _M_SLOTS]), (plan[p, _M_SLOT_TOTAL], 3)),
            carray(uint32_at(plan[p, _M_SLOT_OF_ROW]), capacity),
            carray(uint16_at(plan[p, _M_STAMPS]), capacity),
            carray(int64_at(plan[p, _M_META]), (shards, META_FIELDS)),
            carray(int64_at(plan[p, _M_COUNTERS]), (shards, COUNTERS)),
            carray(uint32_at(plan[p, _M_SKETCH]), (shards, plan[p, _M_DEPTH], plan[p, _M_WIDTH])),
            plan[p, _M_MIN_COUNT],
            carray(float32_at(plan[p, _M_WEIGHTS]), (capacity, dim)),
            carray(float32_at(plan[p, _M_STATE]), (capacity, state_slots, dim)),
            carray(float32_at(plan[p, _M_STATE_INIT]), state_slots),
            carray(int32_at(plan[p, _M_STEPS]), plan[p, _M_STEP_COUNT]),
            np.uint64(plan[p, _M_SEED]),
            plan[p, _M_INIT_KIND],
            init[0],
            init[1],
        )


@kernel
def max_abs_many(plan: np.ndarray, out: np.ndarray) -> None:
    """The largest ``|x|`` of each planned float32 matrix into ``out[p]`` (NaN if any is NaN):
    a plan row is ``(address, rows, cols, row stride, col stride)`` in elements. A matrix
    contiguous in memory, in either order, goes to :func:`max_abs` whole, vectorized."""
    for p in range(plan.shape[0]):
        at, rows, cols = plan[p, 0], plan[p, 1], plan[p, 2]
        row_stride, col_stride = plan[p, 3], plan[p, 4]
        if rows == 0 or cols == 0:
            out[p] = 0.0
        elif (row_stride == cols and col_stride == 1) or (row_stride == 1 and col_stride == rows):
            out[p] = max_abs(carray(float32_at(at), rows * cols))
        else:
            size = (rows - 1) * row_stride + (cols - 1) * col_stride + 1
            values = carray(float32_at(at), size)
            out[p] = max_abs_strided(values, rows, cols, row_stride, col_stride)
