"""Latency histograms with geometric buckets, cheap enough to record once per task or per RPC.

Every value is recorded as a duration in **seconds** (a ``float``, as ``time.perf_counter()``
differences are). What a histogram reports is one :class:`LatencySummary`, in **microseconds**
(the unit the original system printed, and the one every report of sniper uses): the same type
for a trainer's ops, a ps's calls and stages (its Stats answer) and a scheduler's queue waits,
with a ``_us`` suffix on every field so a reader cannot mistake the unit.

Buckets grow geometrically by ``ratio`` (1.5 by default, as in the original system): bucket 0
holds ``[0, lowest]`` and bucket ``i >= 1`` holds ``(lowest * ratio**(i-1), lowest * ratio**i]``;
the last bucket is open-ended. A percentile is reported as the upper bound of its bucket,
clamped to the largest recorded value, so it never under-reports and over-reports by less than
one bucket ratio. Fixed buckets make :meth:`Histogram.merge` exact, which is what lets per-task
or per-thread histograms be combined into one report.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from math import ceil, log

__all__ = ["Histogram", "LatencySummary"]


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """A latency distribution read at one moment, in microseconds (:meth:`Histogram.summary`).

    Its fields are the keys of every op in ``sniper train``'s JSON report (``ops``, ``ps_ops``)
    and of the ``LatencySummary`` message of a ps's Stats answer.
    """

    count: int
    """Number of recorded values."""
    p50_us: float
    """Median, within one bucket ratio above the true value (0.0 when empty)."""
    p95_us: float
    """95th percentile, within one bucket ratio above the true value (0.0 when empty)."""
    p99_us: float
    """99th percentile, within one bucket ratio above the true value (0.0 when empty)."""
    max_us: float
    """Largest recorded value, exact (0.0 when empty)."""


class Histogram:
    """A thread-safe histogram of durations in seconds.

    ``record`` costs one logarithm and one uncontended lock, so it can sit on a per-task path.
    The defaults cover 1 µs to about a day in 64 buckets.
    """

    __slots__ = (
        "_count",
        "_counts",
        "_inv_log_ratio",
        "_last",
        "_lock",
        "_lowest",
        "_max",
        "_ratio",
        "_sum",
    )

    def __init__(
        self, *, lowest_seconds: float = 1e-6, ratio: float = 1.5, buckets: int = 64
    ) -> None:
        if not lowest_seconds > 0:
            raise ValueError(f"lowest_seconds should be positive, got {lowest_seconds!r}")
        if not ratio > 1:
            raise ValueError(f"ratio should be greater than 1, got {ratio!r}")
        if buckets < 2:
            raise ValueError(f"buckets should be at least 2, got {buckets!r}")
        self._lowest = float(lowest_seconds)
        self._ratio = float(ratio)
        self._inv_log_ratio = 1.0 / math.log(ratio)
        self._counts = [0] * buckets
        self._last = buckets - 1
        self._count = 0
        self._sum = 0.0
        self._max = 0.0
        self._lock = threading.Lock()

    def record(self, seconds: float) -> None:
        """Add one duration; a negative or NaN duration is a caller bug and raises ValueError."""
        # Plain comparisons instead of min()/max(): a builtin call is a third of this path.
        if seconds > self._lowest:
            index = ceil(log(seconds / self._lowest) * self._inv_log_ratio)
            if index > self._last:  # noqa: PLR1730
                index = self._last
        elif seconds >= 0:
            index = 0
        else:
            raise ValueError(
                f"a duration should be a non-negative number of seconds, got {seconds}"
            )
        with self._lock:
            self._counts[index] += 1
            self._count += 1
            self._sum += seconds
            if seconds > self._max:  # noqa: PLR1730
                self._max = seconds

    def merge(self, other: Histogram) -> None:
        """Add every value recorded in ``other`` to this histogram (``other`` is unchanged).

        Both must have the same bucket layout, otherwise the counts cannot be added exactly.
        """
        if (other._lowest, other._ratio, len(other._counts)) != (
            self._lowest,
            self._ratio,
            len(self._counts),
        ):
            raise ValueError(
                "cannot merge histograms with different bucket layouts; "
                "create both with the same lowest_seconds, ratio and buckets"
            )
        # Copy under other's lock, add under ours: never holding both avoids a deadlock when
        # two threads merge a into b and b into a at once.
        with other._lock:
            counts = list(other._counts)
            count, total, largest = other._count, other._sum, other._max
        with self._lock:
            for index, n in enumerate(counts):
                self._counts[index] += n
            self._count += count
            self._sum += total
            self._max = max(self._max, largest)

    @property
    def count(self) -> int:
        """Number of recorded values."""
        return self._count

    @property
    def max(self) -> float:
        """Largest recorded value in seconds, 0.0 when empty."""
        return self._max

    @property
    def sum_seconds(self) -> float:
        """Sum of the recorded values in seconds; ``sum_seconds / count`` is the mean."""
        with self._lock:
            return self._sum

    def cumulative(self, every: int = 1) -> tuple[list[tuple[float, int]], float]:
        """``([(upper bound, values at or below it), ...], sum)``, every ``every``-th bucket
        bound and +Inf last, read at one moment: a Prometheus histogram's buckets, exact
        because the bounds are bucket edges."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        buckets, seen = [], 0
        for index, n in enumerate(counts):
            seen += n
            if index < self._last and index % every == every - 1:
                buckets.append((self._upper_bound(index), seen))
        buckets.append((math.inf, seen))
        return buckets, total

    def percentile(self, q: float) -> float:
        """Return the ``q``-th percentile (``0 <= q <= 100``) in seconds, 0.0 when empty.

        The rank is ``ceil(q / 100 * count)``, numpy's ``method="inverted_cdf"``.
        """
        if not 0 <= q <= 100:
            raise ValueError(f"q should be between 0 and 100, got {q!r}")
        with self._lock:
            return self._percentile_locked(q)

    def summary(self) -> LatencySummary:
        """Count, p50, p95, p99 and max in microseconds, all read at the same moment."""
        with self._lock:
            return LatencySummary(
                count=self._count,
                p50_us=self._percentile_locked(50) * 1e6,
                p95_us=self._percentile_locked(95) * 1e6,
                p99_us=self._percentile_locked(99) * 1e6,
                max_us=self._max * 1e6,
            )

    def _percentile_locked(self, q: float) -> float:
        if self._count == 0:
            return 0.0
        rank = max(1, math.ceil(q / 100 * self._count))
        seen = 0
        for index, n in enumerate(self._counts):
            seen += n
            if seen >= rank:
                return min(self._upper_bound(index), self._max)
        raise AssertionError("unreachable: bucket counts sum to count")

    def _upper_bound(self, index: int) -> float:
        if index == self._last:
            return math.inf
        return self._lowest * self._ratio**index

    def __repr__(self) -> str:
        s = self.summary()
        return (
            f"<Histogram count={s.count} p50={s.p50_us:.6g}us p99={s.p99_us:.6g}us "
            f"max={s.max_us:.6g}us>"
        )
