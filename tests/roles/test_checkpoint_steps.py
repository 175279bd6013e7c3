"""Checkpoints "every N steps" land on multiples of N: the pipeline reads no batch past the
next checkpoint's step (they landed ``prefetch`` steps late: 104, 204, 304 for every 100)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster._sniper import sniper


@pytest.mark.parametrize(("every", "prefetch"), [(10, 4), (7, 8)])
def test_checkpoints_land_on_the_step_they_name(tmp_path: Path, every: int, prefetch: int) -> None:
    done = sniper(
        tmp_path,
        *("train", "--quiet", "--scale", "0.001", "--num-batches", "60"),
        *("--checkpoint-dir", "ck", "--checkpoint-every", str(every)),
        *("--keep-checkpoints", "20", "--prefetch", str(prefetch)),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    steps = sorted(int(p.name.removeprefix("step-")) for p in (tmp_path / "ck").glob("step-*"))
    trained = 54  # 60 batches, every tenth held out
    assert steps == [*range(every, trained, every), trained]
