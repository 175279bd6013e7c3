"""Run the ``sniper`` command as a user does, in a test's directory."""

from __future__ import annotations

import json
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


def two_ranks_trained(report_file: Path, steps: int) -> None:
    """The report of a job of two trainer ranks: ``steps`` steps, each rank's examples, their
    sum the job's, and gradients all-reduced."""
    report = json.loads(report_file.read_text())
    assert report["config"]["num_trainers"] == 2
    assert report["steps"] == steps
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert all(r["examples"] > 0 for r in report["ranks"])
    assert report["examples"] == sum(r["examples"] for r in report["ranks"])
    assert report["allreduce_bytes"] > 0
