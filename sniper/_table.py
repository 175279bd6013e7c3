"""Plain-text tables for the command line: what ``sniper train`` and ``sniper bench`` print."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["markdown_table", "print_table"]


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a left-aligned table with a rule under the header (just those without rows)."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """The same table in Markdown (``docs/benchmarks.md``'s style), ending in a newline."""
    rule = "|" + "---|" * len(headers)
    return "\n".join([_markdown_row(headers), rule, *map(_markdown_row, rows)]) + "\n"


def _markdown_row(cells: Sequence[str]) -> str:
    return f"| {' | '.join(cells)} |"
