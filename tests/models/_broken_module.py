"""A user's model module that fails as it is imported (not an ImportError: its own bug)."""

from __future__ import annotations

RATIO = 1 / 0
