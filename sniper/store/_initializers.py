"""Initial values of new rows: a pure function of (seed, sign).

A sign's first row must not depend on which process, shard or moment inserted it: a sign that
is evicted and comes back, or that moves to another ps, starts from the same value again, and a
checkpoint restored elsewhere agrees with a fresh table about every row it does not hold. So
the initializer draws from a counter-based generator keyed by the sign (splitmix64 of
``sign ^ mix(seed)`` and the coordinate), never from a stateful RNG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sniper.store import _kernels

__all__ = ["Initializer", "constant", "normal", "uniform", "zeros"]


@dataclass(frozen=True)
class Initializer:
    """How a new row is filled: ``constant(a)``, ``uniform(a, b)`` or ``normal(mean=a, std=b)``."""

    kind: int
    a: float
    b: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.a) and math.isfinite(self.b)):
            raise ValueError(f"initializer parameters must be finite, got {self.a}, {self.b}")
        if self.kind == _kernels.INIT_UNIFORM and not self.a < self.b:
            raise ValueError(f"uniform initializer needs low < high, got [{self.a}, {self.b})")
        if self.kind == _kernels.INIT_NORMAL and self.b < 0:
            raise ValueError(f"normal initializer needs std >= 0, got {self.b}")

    def __repr__(self) -> str:
        if self.kind == _kernels.INIT_CONSTANT:
            return f"constant({self.a})"
        if self.kind == _kernels.INIT_UNIFORM:
            return f"uniform({self.a}, {self.b})"
        return f"normal(mean={self.a}, std={self.b})"


def constant(value: float) -> Initializer:
    """Every coordinate equals ``value``."""
    return Initializer(_kernels.INIT_CONSTANT, float(value), 0.0)


def zeros() -> Initializer:
    """All-zero rows (useful for FTRL and for tests)."""
    return constant(0.0)


def uniform(low: float, high: float) -> Initializer:
    """Independent uniform draws in ``[low, high)``."""
    return Initializer(_kernels.INIT_UNIFORM, float(low), float(high))


def normal(std: float, mean: float = 0.0) -> Initializer:
    """Independent normal draws (Marsaglia and Tsang's ziggurat); the default is
    ``normal(0.01)``."""
    return Initializer(_kernels.INIT_NORMAL, float(mean), float(std))
