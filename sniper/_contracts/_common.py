"""What the contract checks share: the failure they raise, and how they run a property."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = ["ContractViolation", "require", "run_property"]

T = TypeVar("T")


class ContractViolation(AssertionError):
    """An implementation under check broke a promise of the contract it claims to keep.

    An ``AssertionError``, so test runners report it as a failed check, not as an error.
    """


def require(condition: bool, message: str) -> None:
    """Raise :class:`ContractViolation` with ``message`` unless ``condition`` holds.

    An explicit raise, not ``assert``: the checks must also hold under ``python -O``.
    """
    if not condition:
        raise ContractViolation(message)


def run_property(strategy: SearchStrategy[T], examples: int, body: Callable[[T], None]) -> None:
    """Run ``body`` on ``examples`` values drawn from ``strategy``, shrinking any failure.

    The hypothesis test is built here, at call time, so that hypothesis is imported only when
    a check runs. Examples have no deadline: each one opens real schedulers or tables.
    """
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(strategy)
    def check(value: T) -> None:
        body(value)

    check()
