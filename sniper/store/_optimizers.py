"""Sparse optimizers: the per-row update a ps applies when gradients arrive.

Each optimizer is a frozen, validated dataclass that says how many float32 state slots a row
needs (``slots``), their initial values, and applies one update to a set of distinct rows. The
table keeps the state in preallocated ``[capacity, slots, dim]`` arrays beside the weights, so a
row costs no Python object. Gradients of a sign repeated in a batch are summed by the table
before ``apply`` runs, so every row is updated exactly once per push.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from sniper.store import _kernels
from sniper.store._named import check_named

__all__ = ["OPTIMIZERS", "SGD", "Adagrad", "Adam", "Ftrl", "Optimizer", "make_optimizer"]


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


_F32 = np.finfo(np.float32)
_F32_TINY, _F32_MAX = float(_F32.tiny), float(_F32.max)


def _positive(name: str, value: float) -> None:
    """The kernels compute in float32, where 1e-50 is 0 and 1e40 is inf: either would put a
    division by zero or an inf into every row it updates, so such values are refused here."""
    _require(
        math.isfinite(value) and _F32_TINY <= value <= _F32_MAX,
        f"{name} must be a positive number within float32's range "
        f"[{_F32_TINY:.3g}, {_F32_MAX:.3g}], got {value}",
    )


def _non_negative(name: str, value: float) -> None:
    _require(math.isfinite(value) and value >= 0, f"{name} must be >= 0, got {value}")


class Optimizer(ABC):
    """A sparse optimizer: state layout plus an update over distinct rows.

    The update itself is a kernel (``sniper.store._kernels.update_rows``) picked by
    :attr:`kind` with :attr:`kernel_params`, not a method: a push applies many tables'
    optimizers in one kernel call, which cannot call back into Python.
    """

    kind: ClassVar[int]
    """Which update the kernels apply (``sniper.store._kernels.OPT_*``)."""
    slots: int = 0
    """Float32 state arrays per row, each of ``dim`` values."""
    uses_steps: bool = False
    """Whether the row needs its own int32 step count (Adam's bias correction)."""

    def state_init(self) -> NDArray[np.float32]:
        """Initial value of each state slot for a new row."""
        return np.zeros(self.slots, dtype=np.float32)

    def apply(
        self,
        weights: NDArray[np.float32],
        state: NDArray[np.float32],
        steps: NDArray[np.int32],
        rows: NDArray[np.int64],
        grads: NDArray[np.float32],
        *,
        largest: float | None = None,
    ) -> int:
        """Update ``weights[rows[i]]`` (and its state) with the summed gradient ``grads[i]``.

        A row whose new values would not all be finite keeps its old ones; returns how many
        rows were left so. Rows are checked only when some gradient may exceed
        :attr:`unchecked_gradient` (see ``sniper.store._kernels``): the check is a second pass.
        ``largest`` is a bound on ``|grads|`` the caller already knows (else it is found).
        """
        if largest is None:
            largest = _kernels.max_abs(np.ascontiguousarray(grads).reshape(-1))
        guard = not largest <= self.unchecked_gradient  # NaN: check
        return int(
            _kernels.update_rows(
                self.kind, self.kernel_array[:4], weights, state, steps, rows, grads, guard
            )
        )

    @property
    @abstractmethod
    def kernel_params(self) -> tuple[float, float, float, float]:
        """The update's parameters in the order its kernel takes them (unused ones 0)."""

    @cached_property
    def kernel_array(self) -> NDArray[np.float64]:
        """:attr:`kernel_params` then :attr:`unchecked_gradient`, as one float64 array: what
        a grouped push copies into its plan for this optimizer's table."""
        return np.array([*self.kernel_params, self.unchecked_gradient], dtype=np.float64)

    @property
    def unchecked_gradient(self) -> float:
        """The largest ``|gradient|`` whose step cannot take any finite row to NaN or Inf:
        every value it changes moves by less than half a float32 ulp at the top of the range
        (1e31), so nothing can round past the largest float32. 0: always check."""
        return 0.0


_SMALL_STEP = 1e15
"""A gradient bound whose square (1e30) is under half an ulp of float32's top binade."""


@dataclass(frozen=True)
class SGD(Optimizer):
    """Plain gradient descent: ``w -= lr * g``."""

    lr: float = 0.01
    kind = _kernels.OPT_SGD

    def __post_init__(self) -> None:
        _positive("lr", self.lr)

    @property
    def unchecked_gradient(self) -> float:
        return 1e30 / max(self.lr, 1.0)  # w moves by lr * g

    @property
    def kernel_params(self) -> tuple[float, float, float, float]:
        return (self.lr, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class Adagrad(Optimizer):
    """``acc += g*g; w -= lr * g / (sqrt(acc) + eps)``, identical to ``torch.optim.Adagrad``."""

    lr: float = 0.01
    initial_accumulator_value: float = 0.0
    eps: float = 1e-10
    slots = 1
    kind = _kernels.OPT_ADAGRAD

    def __post_init__(self) -> None:
        _positive("lr", self.lr)
        _non_negative("initial_accumulator_value", self.initial_accumulator_value)
        _positive("eps", self.eps)

    def state_init(self) -> NDArray[np.float32]:
        return np.array([self.initial_accumulator_value], dtype=np.float32)

    @property
    def unchecked_gradient(self) -> float:
        # acc moves by g*g; w by at most lr (acc >= g*g), after lr * g is formed.
        return _SMALL_STEP if self.lr <= 1e20 else 0.0

    @property
    def kernel_params(self) -> tuple[float, float, float, float]:
        return (self.lr, self.eps, 0.0, 0.0)


@dataclass(frozen=True)
class Adam(Optimizer):
    """Adam with a per-row step count: a row's bias correction counts only its own updates."""

    lr: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    slots = 2
    uses_steps = True
    kind = _kernels.OPT_ADAM

    def __post_init__(self) -> None:
        _positive("lr", self.lr)
        _require(0.0 <= self.beta1 < 1.0, f"beta1 must be in [0, 1), got {self.beta1}")
        _require(0.0 <= self.beta2 < 1.0, f"beta2 must be in [0, 1), got {self.beta2}")
        _positive("eps", self.eps)

    @property
    def unchecked_gradient(self) -> float:
        # m and v are convex mixes of g and g*g; w moves by a bounded multiple of lr.
        return _SMALL_STEP if self.lr <= 1e20 else 0.0

    @property
    def kernel_params(self) -> tuple[float, float, float, float]:
        return (self.lr, self.beta1, self.beta2, self.eps)


@dataclass(frozen=True)
class Ftrl(Optimizer):
    """FTRL-proximal, per coordinate, with L1 and L2 regularization.

    State slot 0 is ``z`` and slot 1 is ``n`` (the sum of squared gradients, starting at
    ``initial_accumulator_value``). A row starts from its initializer's value, which enters the
    first ``z`` update, as in TensorFlow's and Keras' Ftrl.
    """

    alpha: float = 0.05
    beta: float = 1.0
    l1: float = 0.0
    l2: float = 0.0
    initial_accumulator_value: float = 0.1
    slots = 2
    kind = _kernels.OPT_FTRL

    def __post_init__(self) -> None:
        _positive("alpha", self.alpha)
        _non_negative("beta", self.beta)
        _non_negative("l1", self.l1)
        _non_negative("l2", self.l2)
        _non_negative("initial_accumulator_value", self.initial_accumulator_value)
        _require(
            self.beta > 0 or self.l2 > 0 or self.initial_accumulator_value >= _F32_TINY,
            "Ftrl needs beta > 0, l2 > 0 or initial_accumulator_value > 0: with all three 0, "
            "a row whose gradients are all 0 divides by zero",
        )

    def state_init(self) -> NDArray[np.float32]:
        return np.array([0.0, self.initial_accumulator_value], dtype=np.float32)

    @property
    def kernel_params(self) -> tuple[float, float, float, float]:
        return (self.alpha, self.beta, self.l1, self.l2)


OPTIMIZERS: dict[str, type[Optimizer]] = {
    "sgd": SGD,
    "adagrad": Adagrad,
    "adam": Adam,
    "ftrl": Ftrl,
}
"""Every optimizer by the name configs and CreateVariable use."""


def make_optimizer(
    name: str,
    params: Mapping[str, float],
    *,
    name_field: str = "optimizer",
    params_field: str = "params",
    value_prefix: str = "",
) -> Optimizer:
    """The optimizer ``name`` with ``params``; ``ValueError`` names a wrong name or parameter.

    The one place a name becomes an optimizer, for the ps (CreateVariable) and for configs
    checked before any process starts; ``name_field`` and ``params_field`` are what the caller's
    input calls them, and ``value_prefix`` starts the optimizer's own complaints about a value
    (``lr must be positive``), so that the error points into the caller's input.
    """
    cls = OPTIMIZERS.get(name)
    known = sorted(f.name for f in dataclasses.fields(cls)) if cls is not None else []  # type: ignore[arg-type]
    check_named(name, OPTIMIZERS, params, known, name_field=name_field, params_field=params_field)
    assert cls is not None
    try:
        return cls(**params)
    except ValueError as exc:
        raise ValueError(f"{value_prefix}{exc}") from None
