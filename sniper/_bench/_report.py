"""Timing and plain-text tables shared by every bench."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sniper._table import print_table

__all__ = [
    "Comparison",
    "PeerMissing",
    "median_seconds",
    "print_comparisons",
    "print_table",
]


class PeerMissing(LookupError):
    """The peer a bench compares against is not installed; the message says how to get it.

    A ``LookupError``: the user's environment lacks what was looked for, which the command line
    reports as one line (exit status 2), not as a traceback.
    """


def median_seconds(call: Callable[[int], object], repeats: int, warmup: int = 1) -> float:
    """Median wall time of ``call(i)`` over ``repeats`` runs, after ``warmup`` unmeasured ones."""
    for i in range(warmup):
        call(i)
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


@dataclass(frozen=True)
class Comparison:
    """One line of a bench: sniper against a peer on the same work."""

    case: str
    work: int
    """Units of work per call (signs, bytes, examples), for the throughput columns."""
    sniper_s: float
    peer_s: float
    target: float
    """The speedup (peer time / sniper time) the project aims for."""

    @property
    def ratio(self) -> float:
        return self.peer_s / self.sniper_s


def verdict(value: float, target: float) -> str:
    """``meets`` or ``MISSES``: how every bench marks a figure against its target."""
    return "meets" if value >= target else "MISSES"


def print_comparisons(title: str, peer: str, unit: str, items: Sequence[Comparison]) -> None:
    """Print comparisons with throughput in millions of ``unit`` per second and the ratio."""
    print(f"\n{title}")
    rows = [
        [
            c.case,
            f"{c.work:,}",
            f"{c.sniper_s * 1e3:.2f}",
            f"{c.peer_s * 1e3:.2f}",
            f"{c.work / c.sniper_s / 1e6:.1f}",
            f"{c.work / c.peer_s / 1e6:.1f}",
            f"{c.ratio:.2f}x",
            f">= {c.target:g}x",
            verdict(c.ratio, c.target),
        ]
        for c in items
    ]
    headers = [
        "case",
        unit,
        "sniper ms",
        f"{peer} ms",
        f"sniper M{unit}/s",
        f"{peer} M{unit}/s",
        "ratio",
        "target",
        "",
    ]
    print_table(headers, rows)
