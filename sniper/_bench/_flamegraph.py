"""An icicle graph (a flame graph with the outermost frame on top) of collapsed stacks, as SVG.

py-spy writes either its SVG or the raw stacks in one run, not both; the raw stacks are what
the budget is computed from, so the picture is drawn here from the same samples. Each frame is
coloured by the category its own module falls in (``sniper._bench._stacks``), so the budget's
categories can be found in the picture; hovering a box shows its frame and samples.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from sniper._bench._stacks import OTHER, Frame, Stack, category_of

__all__ = ["write_flamegraph"]

WIDTH = 1200.0
ROW = 16
CHAR = 7.0
"""About the width of one character of the 11px labels: a box shows as much as fits."""
MIN_WIDTH = 0.5
"""Boxes narrower than this many pixels are left out (they would not be visible)."""


@dataclass
class _Node:
    frame: Frame | None
    samples: int = 0
    children: dict[Frame, _Node] = field(default_factory=dict)


def _tree(stacks: Iterable[Stack]) -> _Node:
    root = _Node(None)
    for stack in stacks:
        node = root
        node.samples += stack.samples
        for frame in stack.frames:
            node = node.children.setdefault(frame, _Node(frame))
            node.samples += stack.samples
    return root


def _colour(frame: Frame) -> str:
    """A stable hue per category; frames of no category are grey."""
    category = category_of([frame])
    if category == OTHER:
        return "hsl(0, 0%, 78%)"
    hue = int(hashlib.md5(category.encode()).hexdigest()[:4], 16) % 360
    return f"hsl({hue}, 65%, 72%)"


def _boxes(node: _Node, x: float, depth: int, scale: float, out: list[str]) -> int:
    """Append the SVG of ``node``'s children at ``depth``; the deepest row drawn."""
    deepest = depth
    for child in node.children.values():
        width = child.samples * scale
        if width >= MIN_WIDTH and child.frame is not None:
            label = f"{child.frame.function} ({child.frame.file})"
            tooltip = f"{label}: {child.samples:,} samples, {category_of([child.frame])}"
            text = label[: int(width / CHAR)] if width > 3 * CHAR else ""
            y = depth * ROW
            out.append(
                f'<g><title>{escape(tooltip)}</title><rect x="{x:.1f}" y="{y}" '
                f'width="{width:.1f}" height="{ROW - 1}" fill="{_colour(child.frame)}"/>'
                f'<text x="{x + 2:.1f}" y="{y + ROW - 4}">{escape(text)}</text></g>'
            )
            deepest = max(deepest, _boxes(child, x, depth + 1, scale, out))
        x += width
    return deepest


def write_flamegraph(stacks: Iterable[Stack], path: Path, title: str) -> None:
    """Write the icicle graph of ``stacks`` to ``path``."""
    root = _tree(stacks)
    boxes: list[str] = []
    rows = _boxes(root, 0.0, 1, WIDTH / max(root.samples, 1), boxes) + 1
    heading = f"{title}: {root.samples:,} samples of running threads"
    path.write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH:.0f}" height="{rows * ROW}" '
        'font-family="monospace" font-size="11">'
        f'<text x="2" y="{ROW - 4}">{escape(heading)}</text>{"".join(boxes)}</svg>\n'
    )
