"""Argument checks shared by the readers and metrics; the error names the argument."""

from __future__ import annotations

__all__ = ["check_int"]


def check_int(name: str, value: object, minimum: int = 1) -> None:
    """Validate an integer argument such as ``batch_size``; the error names it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
