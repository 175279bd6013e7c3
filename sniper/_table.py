"""Plain-text tables for the command line: what ``sniper train`` and ``sniper bench`` print."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["print_table"]


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a left-aligned table with a rule under the header."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
