"""The host's share of the machine during a run (steal), from the kernel's CPU counters."""

from __future__ import annotations

from pathlib import Path

from sniper._bench._host import describe_steal, steal_during
from sniper.runtime import machine_steal_reading


def test_the_first_cpu_line_gives_steal_and_every_tick_counted() -> None:
    """This machine's own counters (Linux): steal is one of the ticks, and they only grow."""
    first = machine_steal_reading()
    assert first is not None and 0 <= first[0] <= first[1]
    later = machine_steal_reading()
    assert later is not None and later[0] >= first[0] and later[1] >= first[1]
    _, share = steal_during(lambda: sum(range(3_000_000)))  # long enough for a tick to pass
    assert share is not None and 0 <= share <= 1


def test_steal_is_the_host_s_share_of_the_ticks_that_passed(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 20 800 10 1 2 30 7 0\ncpu0 50 2 10 400 5 0 1 15 3 0\n")
    assert machine_steal_reading(stat) == (30, 968)  # guest ticks are in user's: not added

    def run() -> str:
        # 200 more ticks: 150 user, 50 stolen.
        stat.write_text("cpu  250 5 20 800 10 1 2 80 7 0\n")
        return "done"

    assert steal_during(run, stat) == ("done", 0.25)
    assert describe_steal(0.25) == "25.0%" and describe_steal(None) == "-"


def test_without_counters_ticks_or_sane_counters_there_is_no_figure(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    assert machine_steal_reading(missing) is None
    assert steal_during(lambda: 1, missing) == (1, None)
    for name, text in [
        ("old", "cpu  1 2 3 4 5 6 7\n"),  # a kernel from before steal was counted
        ("garbled", "cpu  1 2 x 4 5 6 7 8\n"),
        ("other", "intr 1 2 3 4 5 6 7 8\n"),  # not the cpu line first
    ]:
        (tmp_path / name).write_text(text)
        assert machine_steal_reading(tmp_path / name) is None, name
    counters = tmp_path / "counters"
    counters.write_text("cpu  1 2 3 4 5 6 7 8\n")
    assert steal_during(lambda: 2, counters) == (2, None)  # no tick passed: no share

    def steal_back() -> None:  # a counter that went back (a migrated VM's)
        counters.write_text("cpu  101 2 3 4 5 6 7 0\n")

    assert steal_during(steal_back, counters) == (None, None)

    def steal_jump() -> None:  # more stolen than passed (user's count went back meanwhile)
        counters.write_text("cpu  1 2 3 4 5 6 7 500\n")

    assert steal_during(steal_jump, counters) == (None, None)
