"""Initial values of new rows: a pure function of (seed, sign).

A sign's first row must not depend on which process, shard or moment inserted it: a sign that
is evicted and comes back, or that moves to another ps, starts from the same value again, and a
checkpoint restored elsewhere agrees with a fresh table about every row it does not hold. So
the initializer draws from a counter-based generator keyed by the sign (splitmix64 of
``sign ^ mix(seed)`` and the coordinate), never from a stateful RNG.

This module is the one place a name becomes an initializer: a config's ``initializer`` and
``init`` keys (:func:`make_initializer`), and CreateVariable's ``InitializerConfig``, whose
``(kind, a, b)`` are :meth:`Initializer.args` (:meth:`Initializer.from_args` reads them back).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from sniper.store import _kernels
from sniper.store._named import check_named

__all__ = [
    "DEFAULT_INITIALIZER",
    "INITIALIZERS",
    "Initializer",
    "constant",
    "make_initializer",
    "normal",
    "uniform",
    "zeros",
]

INITIALIZERS: dict[str, dict[str, float]] = {
    "normal": {"mean": 0.0, "std": 0.01},
    "uniform": {"low": -0.01, "high": 0.01},
    "constant": {"value": 0.0},
}
"""Each initializer by name, with its parameters by name and their defaults."""

_KINDS = {
    "constant": _kernels.INIT_CONSTANT,
    "uniform": _kernels.INIT_UNIFORM,
    "normal": _kernels.INIT_NORMAL,
}


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

    @property
    def name(self) -> str:
        """``constant``, ``uniform`` or ``normal``: its key in :data:`INITIALIZERS`."""
        return next(name for name, kind in _KINDS.items() if kind == self.kind)

    def args(self) -> tuple[str, float, float]:
        """``(name, a, b)``: the form CreateVariable's ``InitializerConfig`` carries (normal's
        ``a`` is its mean and ``b`` its std; uniform's are low and high; constant's ``a``)."""
        return (self.name, self.a, self.b)

    @classmethod
    def from_args(
        cls, name: str, a: float, b: float, *, name_field: str = "initializer.kind"
    ) -> Initializer:
        """The initializer :meth:`args` gave; an empty ``name`` is :data:`DEFAULT_INITIALIZER`,
        and ``ValueError`` names ``name_field`` when the name is none of :data:`INITIALIZERS`."""
        if not name:
            return DEFAULT_INITIALIZER
        if name == "constant":
            return constant(a)
        if name == "uniform":
            return uniform(a, b)
        if name == "normal":
            return normal(b, mean=a)
        raise ValueError(f"{name_field} must be one of {', '.join(INITIALIZERS)}, got {name!r}")

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


DEFAULT_INITIALIZER = normal(INITIALIZERS["normal"]["std"], mean=INITIALIZERS["normal"]["mean"])
"""What a new row starts from when nothing names an initializer: ``normal(0.01)``."""


def make_initializer(
    name: str,
    params: Mapping[str, float],
    *,
    name_field: str = "initializer",
    params_field: str = "init",
    value_prefix: str = "",
) -> Initializer:
    """The initializer ``name`` with ``params`` (missing ones take their defaults in
    :data:`INITIALIZERS`); ``ValueError`` names a wrong name or parameter.

    As :func:`~sniper.store.make_optimizer` does, ``name_field`` and ``params_field`` are what
    the caller's input calls them, and ``value_prefix`` starts the initializer's own complaints
    about a value (``uniform initializer needs low < high``).
    """
    check_named(
        name,
        INITIALIZERS,
        params,
        INITIALIZERS.get(name, {}),
        name_field=name_field,
        params_field=params_field,
    )
    defaults = INITIALIZERS[name]
    values = defaults | dict(params)
    try:
        if name == "normal":
            return normal(values["std"], mean=values["mean"])
        if name == "uniform":
            return uniform(values["low"], values["high"])
        return constant(values["value"])
    except ValueError as exc:
        raise ValueError(f"{value_prefix}{exc}") from None
