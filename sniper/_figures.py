"""Figures that may not exist: an AUC of a job without a binary label, of a stream that held
one class only, of held-out batches there were none of.

Such a figure is None, never a placeholder: 0.0 reads as a real, awful AUC, and NaN is no
JSON (``json.dumps`` writes a bare ``NaN`` that strict parsers refuse). Reports write it as
``null`` (:func:`json_ready`) and print it as ``-`` (:func:`shown`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["existing", "existing_figures", "json_ready", "shown"]


def existing(value: float | None) -> float | None:
    """``value``, or None where it is None, NaN or infinite (a figure with nothing behind it)."""
    return value if value is not None and math.isfinite(value) else None


def existing_figures(figures: Mapping[str, float]) -> dict[str, float]:
    """``figures`` (by name) but those that do not exist: a table of figures leaves them out."""
    return {name: value for name, value in figures.items() if existing(value) is not None}


def json_ready(value: Any) -> Any:
    """``value`` (JSON-ready data: dicts, lists, numbers...) with every float that is not
    finite replaced by None, so that ``json.dumps`` writes strict JSON."""
    if isinstance(value, float):
        return existing(value)
    if isinstance(value, Mapping):
        return {key: json_ready(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(item) for item in value]
    return value


def shown(value: float | None, digits: int = 4) -> str:
    """``value`` for a printed table: ``-`` where it does not exist."""
    figure = existing(value)
    return "-" if figure is None else f"{figure:.{digits}f}"
