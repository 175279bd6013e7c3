"""The checks every "by name, with params" config of the store shares (optimizers and
initializers): one wording for a wrong name and for a parameter the named thing does not take,
naming the field of the caller's input it came from."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["check_named"]


def check_named(
    name: str,
    choices: Iterable[str],
    params: Mapping[str, float],
    takes: Iterable[str],
    *,
    name_field: str,
    params_field: str,
) -> None:
    """``ValueError`` unless ``name`` is one of ``choices`` and every key of ``params`` is one
    ``name`` takes (``takes``, listed in the message in this order)."""
    choices = list(choices)
    if name not in choices:
        raise ValueError(f"{name_field} must be one of {', '.join(choices)}, got {name!r}")
    takes = list(takes)
    unknown = sorted(set(params) - set(takes))
    if unknown:
        raise ValueError(
            f"{params_field} has {', '.join(map(repr, unknown))}, which {name} does not "
            f"take; it takes {', '.join(takes)}"
        )
