"""Run the ``sniper`` command as a user does, in a test's directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def sniper(cwd: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``python -m sniper ARGS`` in ``cwd``, its output captured (status not checked)."""
    return subprocess.run(
        [sys.executable, "-m", "sniper", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
