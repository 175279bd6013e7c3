"""``sniper bench chaos``: two small jobs, each with random roles killed at random moments,
both held; the command says what it killed in each trial and counts held and broke."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def test_two_trials_hold_and_are_counted(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "sniper", "bench", "chaos", "--trials", "2", "--seed", "3"),
            *("--batches", "30", "--checkpoint-every", "8"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert re.fullmatch(r"uninterrupted: \d+ steps, [\d,]+ examples in .*\(seed 3\)", lines[0])
    for number, line in enumerate(lines[1:3], start=1):
        assert re.fullmatch(
            rf"trial {number}: killed (nothing \(the job ended first\)|((ps|hub) \d at "
            r"[\d.]+ s(, )?)+): held \(exit 0, \d+ restart\(s\), [\d.]+ s\)",
            line,
        ), line
    assert lines[3:] == ["held 2 of 2, broke 0"]
    assert list(tmp_path.iterdir()) == []  # its jobs ran in a temporary directory
