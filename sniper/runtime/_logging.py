"""The log format every ``sniper`` server and launcher writes to standard error."""

from __future__ import annotations

import logging
import sys

__all__ = ["log_to_stderr"]


def log_to_stderr() -> None:
    """INFO and above to standard error, with time, level and logger: one format for the ps,
    the hub, ``sniper train`` and ``sniper eval``, so their lines interleave readably."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
