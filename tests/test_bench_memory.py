"""``sniper bench memory``: the target it measures against, its refusals, and a small real run
(a ps process filled through gRPC; benchmarks' figures are not asserted)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sniper._bench._memory import check_rows, rss_bytes, target_bytes_per_row
from sniper.store import Adagrad


def test_the_target_is_a_quarter_over_weights_and_state_plus_16_bytes() -> None:
    # dim 16: 64 bytes of weights and 64 of Adagrad's accumulator a row.
    assert target_bytes_per_row(16, Adagrad()) == 1.25 * 128 + 16 == 176


def test_a_table_over_the_ps_budget_is_refused_before_any_ps_starts() -> None:
    with pytest.raises(
        ValueError,
        match=r"^--rows 200,000,000 needs about 30\.\d GiB of table, but a ps preallocates at "
        r"most 16\.0 GiB \(--max-table-gb\); lower --rows$",
    ):
        check_rows(200_000_000, 16, Adagrad())


def test_rss_of_a_process_that_is_not_there_says_why() -> None:
    assert rss_bytes() > 0
    with pytest.raises(OSError, match="reads RSS from /proc"):
        rss_bytes("not-a-pid")


def test_a_small_table_is_measured_in_a_real_ps() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sniper", "bench", "memory", "--rows", "20000"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "filled 20,000 rows in 8 shards" in done.stdout
    for row in ("sniper ps: RSS growth", "sniper table: preallocated (nbytes)"):
        assert f"{row} " in done.stdout
    assert "target 176 bytes a row" in done.stdout
