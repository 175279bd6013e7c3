"""The host's share of the machine during a run (steal), from the kernel's CPU counters."""

from __future__ import annotations

from pathlib import Path

from sniper._bench._host import STAT, cpu_jiffies, describe_steal, steal_during


def test_the_first_cpu_line_gives_steal_and_every_tick_counted() -> None:
    """This machine's own counters (Linux): steal is one of the ticks, and they only grow."""
    first = cpu_jiffies()
    assert first is not None and 0 <= first[0] <= first[1]
    assert STAT.read_text().startswith("cpu ")
    later = cpu_jiffies()
    assert later is not None and later[0] >= first[0] and later[1] >= first[1]


def test_steal_is_the_host_s_share_of_the_ticks_that_passed(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 20 800 10 1 2 30 7 0\ncpu0 50 2 10 400 5 0 1 15 3 0\n")
    assert cpu_jiffies(stat) == (30, 968)  # guest ticks are in user's already: not added

    def run() -> str:
        # 200 more ticks: 150 user, 50 stolen.
        stat.write_text("cpu  250 5 20 800 10 1 2 80 7 0\n")
        return "done"

    assert steal_during(run, stat) == ("done", 0.25)
    assert describe_steal(0.25) == "25.0%" and describe_steal(None) == "-"


def test_without_counters_or_ticks_there_is_no_figure(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    assert cpu_jiffies(missing) is None
    assert steal_during(lambda: 1, missing) == (1, None)
    old = tmp_path / "old"
    old.write_text("cpu  1 2 3 4 5 6 7\n")  # a kernel from before steal was counted
    assert cpu_jiffies(old) is None
    garbled = tmp_path / "garbled"
    garbled.write_text("cpu  1 2 x 4 5 6 7 8\n")
    assert cpu_jiffies(garbled) is None
    still = tmp_path / "still"
    still.write_text("cpu  1 2 3 4 5 6 7 8\n")
    assert steal_during(lambda: 2, still) == (2, None)  # no tick passed: no share
