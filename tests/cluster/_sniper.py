"""Run the ``sniper`` command as a user does, in a test's directory."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def reaped(process: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """``process``, killed and waited for on the way out if it is still running: a child that
    hangs fails its own test instead of outliving it (a hung ``sniper train`` once failed the
    next test on its open pipes)."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
