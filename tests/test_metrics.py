"""The latency histogram against numpy's exact percentiles, merging, and the empty case."""

from __future__ import annotations

import math
import re
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sniper._metrics import Histogram, LatencySummary

RATIO = 1.5
SLACK = 1e-9
"""Relative slack for a value that sits on a bucket boundary up to floating-point rounding."""


def assert_within_one_bucket(estimate: float, exact: float) -> None:
    """The histogram reports a bucket's upper bound: never below the truth, under 1.5x above."""
    assert exact * (1 - SLACK) <= estimate <= max(exact * RATIO, 1e-6) * (1 + SLACK)


@pytest.mark.parametrize("seed", range(5))
def test_percentiles_match_numpy_within_one_bucket(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.lognormal(mean=-7, sigma=2, size=5000)  # ~1 µs .. ~1 s, like task latencies
    histogram = Histogram()
    for value in values:
        histogram.record(float(value))
    for q in (0, 1, 50, 90, 95, 99, 99.9, 100):
        exact = float(np.percentile(values, q, method="inverted_cdf"))
        assert_within_one_bucket(histogram.percentile(q), exact)
    assert histogram.count == len(values)
    assert histogram.max == float(values.max())
    assert histogram.percentile(100) == histogram.max


@settings(max_examples=200)
@given(
    st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=200),
    st.floats(0, 100),
)
def test_any_percentile_is_within_one_bucket(values: list[float], q: float) -> None:
    histogram = Histogram()
    for value in values:
        histogram.record(value)
    exact = float(np.percentile(np.array(values), q, method="inverted_cdf"))
    assert_within_one_bucket(histogram.percentile(q), exact)


def test_merge_equals_recording_everything_in_one() -> None:
    rng = np.random.default_rng(7)
    first, second, combined = Histogram(), Histogram(), Histogram()
    for value in rng.exponential(0.01, size=1000):
        first.record(float(value))
        combined.record(float(value))
    for value in rng.exponential(0.5, size=300):
        second.record(float(value))
        combined.record(float(value))
    first.merge(second)
    assert first.sum_seconds == pytest.approx(combined.sum_seconds)  # summed in another order
    assert first.summary() == combined.summary()
    assert second.count == 300, "merge leaves its argument alone"


def test_merge_refuses_a_different_layout() -> None:
    with pytest.raises(ValueError, match="different bucket layouts"):
        Histogram().merge(Histogram(ratio=2.0))


def test_an_empty_histogram_reports_zeros() -> None:
    histogram = Histogram()
    assert histogram.count == 0
    assert histogram.max == 0.0
    assert histogram.percentile(99) == 0.0
    assert histogram.summary() == LatencySummary(0, 0.0, 0.0, 0.0, 0.0)
    assert histogram.sum_seconds == 0.0
    histogram.merge(Histogram())
    assert histogram.count == 0


def test_values_beyond_the_last_bucket_report_the_max() -> None:
    histogram = Histogram(buckets=4)
    histogram.record(1e6)
    assert histogram.percentile(50) == 1e6


@pytest.mark.parametrize("bad", [-1.0, math.nan])
def test_a_negative_or_nan_duration_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="non-negative number of seconds"):
        Histogram().record(bad)


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match=re.escape("q should be between 0 and 100, got 101")):
        Histogram().percentile(101)
    with pytest.raises(ValueError, match="ratio should be greater than 1"):
        Histogram(ratio=1.0)
    with pytest.raises(ValueError, match="lowest_seconds should be positive"):
        Histogram(lowest_seconds=0)
    with pytest.raises(ValueError, match="buckets should be at least 2"):
        Histogram(buckets=1)


def test_concurrent_records_are_all_counted() -> None:
    histogram = Histogram()

    def record_many() -> None:
        for i in range(10_000):
            histogram.record(i * 1e-6)

    threads = [threading.Thread(target=record_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive()
    summary = histogram.summary()
    assert summary.count == 40_000
    assert histogram.sum_seconds == pytest.approx(4 * sum(i * 1e-6 for i in range(10_000)))
    assert summary.max_us == pytest.approx(9_999)
    assert repr(histogram).startswith("<Histogram count=40000 ")
