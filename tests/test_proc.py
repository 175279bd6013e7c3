"""What ``/proc`` says about processes (``sniper.runtime``): CPU time, children and
descendants, command lines, and which process listens on a port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sniper.runtime import (
    _proc,
    busy_share,
    children,
    command_line,
    cpu_seconds,
    descendants,
    listening_pid,
    machine_cpu_reading,
    machine_cpu_seconds,
    machine_steal_reading,
    thread_cpu_seconds,
    thread_names,
)


def test_proc_readings_of_this_process() -> None:
    assert cpu_seconds(os.getpid()) > 0
    assert threading.get_native_id() in thread_cpu_seconds(os.getpid())
    assert thread_names(os.getpid())[threading.get_native_id()]
    busy, total = machine_cpu_seconds()
    assert 0 < busy < total
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert listening_pid(port, [os.getpid()]) == os.getpid()
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as child:
        try:
            assert child.pid in children(os.getpid())
        finally:
            child.kill()


def test_the_busy_share_counts_a_busy_thread_and_the_reading_is_none_without_proc(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """This thread's 0.3 s of CPU is in the machine's busy time between two readings, so its
    share of what passed is at least that over every core's time (other work only adds);
    where ``/proc/stat`` cannot be read, the reading is None, not an error.

    Two things the thread's own clock counts and the machine's busy time does not are allowed
    for: steal (the host ran another tenant while the thread thought it ran) and the kernel's
    sampling of whole ticks, a few of them either way."""
    before, steal_before = machine_cpu_reading(), machine_steal_reading()
    assert before is not None and steal_before is not None
    spun = time.thread_time() + 0.3
    deadline = time.perf_counter() + 30  # a backstop: the CPU time always comes
    while time.thread_time() < spun and time.perf_counter() < deadline:
        pass
    after, steal_after = machine_cpu_reading(), machine_steal_reading()
    assert after is not None and steal_after is not None
    tick = os.sysconf("SC_CLK_TCK")
    stolen = (steal_after[0] - steal_before[0]) / tick
    share = busy_share(before, after)
    assert (0.3 - stolen - 4 / tick) / (after[1] - before[1]) <= share <= 1
    assert busy_share(before, before) == 0.0  # no time passed: no share, not a division by 0
    monkeypatch.setattr(_proc, "PROC", tmp_path)  # a /proc without a stat file
    assert machine_cpu_reading() is None


def test_descendants_and_their_command_lines() -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(30)", "a word"]
    with subprocess.Popen(argv) as child:
        try:
            below = descendants(os.getpid())
            assert {os.getpid(), child.pid} <= set(below)
            seconds, start = below[os.getpid()]
            assert seconds > 0 and 0 < start <= below[child.pid][1]
            assert command_line(child.pid) == argv
        finally:
            child.kill()
    assert descendants(2**22 + 1) == {}  # no such process: nothing below it
