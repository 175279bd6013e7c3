"""What ``/proc`` says about the processes of a job: CPU time (per process and per thread), a
process's children and descendants, its command line, and which process listens on a port.

The one reader of ``/proc`` (Linux only): ``sniper experiment`` samples the CPU time of a
job's roles with it, ``sniper bench profile`` divides a profiled job's CPU by process and
thread, the trainer reports how busy its machine's cores were while it trained, and ``sniper
bench e2e`` how much of the machine its host took during each run (steal).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = [
    "busy_share",
    "children",
    "command_line",
    "cpu_seconds",
    "descendants",
    "listening_pid",
    "machine_cpu_reading",
    "machine_cpu_seconds",
    "machine_steal_reading",
    "thread_cpu_seconds",
    "thread_names",
]

PROC = Path("/proc")


def _after_name(stat: Path) -> list[str]:
    """The fields of a ``stat`` file after the command name (which may hold spaces and
    parentheses): the first is proc(5)'s field 3, the state."""
    return stat.read_text().rpartition(")")[2].split()


def _stat_cpu(stat: Path) -> float:
    fields = _after_name(stat)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _parent_cpu_start(pid: int) -> tuple[int, float, int] | None:
    """``(ppid, utime + stime in seconds, start ticks)`` of ``pid``; None once it is gone."""
    try:
        fields = _after_name(PROC / str(pid) / "stat")
    except OSError:
        return None
    ppid, utime, stime, start = int(fields[1]), int(fields[11]), int(fields[12]), int(fields[19])
    return ppid, (utime + stime) / os.sysconf("SC_CLK_TCK"), start


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far: every thread, exited ones too."""
    return _stat_cpu(PROC / str(pid) / "stat")


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """User + system CPU time of each live thread of process ``pid`` so far, by thread id."""
    seconds = {}
    for task in (PROC / str(pid) / "task").iterdir():
        with contextlib.suppress(OSError):  # the thread exited while we looked
            seconds[int(task.name)] = _stat_cpu(task / "stat")
    return seconds


def thread_names(pid: int) -> dict[int, str]:
    """The name of each live thread of process ``pid`` (Python's thread names, truncated to 15
    characters; a native thread's is its creator's or the process's)."""
    names = {}
    for task in (PROC / str(pid) / "task").iterdir():
        with contextlib.suppress(OSError):
            names[int(task.name)] = (task / "comm").read_text().strip()
    return names


def _cpu_ticks(stat: Path) -> list[int]:
    """The counters of ``stat``'s first line (``/proc/stat``'s ``cpu`` line: every core's
    ticks since boot, in the kernel's order: user, nice, system, idle, iowait, irq, softirq,
    steal, then guest time, which user already counts)."""
    with stat.open() as lines:
        first = lines.readline().split()
    if not first or first[0] != "cpu":
        raise ValueError(f"{stat} does not start with its cpu line")
    return [int(value) for value in first[1:]]


def machine_cpu_seconds() -> tuple[float, float]:
    """CPU seconds of all cores since boot: (busy, busy + idle). Busy is user, nice, system
    and interrupts; steal (another tenant's VM running on our core) counts as neither."""
    user, nice, system, idle, iowait, irq, softirq = _cpu_ticks(PROC / "stat")[:7]
    busy = user + nice + system + irq + softirq
    tick = os.sysconf("SC_CLK_TCK")
    return busy / tick, (busy + idle + iowait) / tick


def machine_cpu_reading() -> tuple[float, float] | None:
    """:func:`machine_cpu_seconds`, or None where ``/proc/stat`` cannot be read (not Linux):
    for figures worth having where they can be had."""
    try:
        return machine_cpu_seconds()
    except (OSError, ValueError):
        return None


def machine_steal_reading(stat: Path | None = None) -> tuple[int, int] | None:
    """``(steal, all)`` ticks of every core since boot, from user to steal: the time the
    machine's host (a hypervisor running other work on our cores) took, and all there was;
    None where ``stat`` (None: ``/proc/stat``) cannot be read or counts no steal."""
    try:
        ticks = _cpu_ticks(PROC / "stat" if stat is None else stat)
    except (OSError, ValueError):
        return None
    if len(ticks) < 8:
        return None
    return ticks[7], sum(ticks[:8])


def busy_share(before: tuple[float, float], after: tuple[float, float]) -> float:
    """The busy part, in [0, 1], of the machine's CPU time that passed between two
    :func:`machine_cpu_seconds` readings. A share of what passed, not busy seconds over wall
    seconds: each count moves in ticks of 10 ms per core, and steal moves neither."""
    total = after[1] - before[1]
    if total <= 0:
        return 0.0
    return min(1.0, max(0.0, (after[0] - before[0]) / total))  # ticks turned seconds can round


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):  # exited while we looked
                if int(_after_name(entry / "stat")[1]) == pid:
                    found.append(int(entry.name))
    return found


def descendants(root: int) -> dict[int, tuple[float, int]]:
    """``root`` and every process below it: pid -> (CPU-seconds, start ticks).

    It walks every process's parent link (``stat`` field 4) down from ``root``; the start
    ticks (field 22, clock ticks after boot) tell a reused pid from the process seen before.
    """
    stats = {}
    for entry in os.scandir(PROC):
        if entry.name.isdigit() and (stat := _parent_cpu_start(int(entry.name))) is not None:
            stats[int(entry.name)] = stat
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = {}, [root]
    while stack:
        pid = stack.pop()
        if pid in stats:
            found[pid] = (stats[pid][1], stats[pid][2])
            stack.extend(children.get(pid, []))
    return found


def command_line(pid: int) -> list[str]:
    """The argv of process ``pid`` (``OSError`` once it is gone); words that are not UTF-8 are
    decoded with replacement characters."""
    argv = (PROC / str(pid) / "cmdline").read_bytes().removesuffix(b"\0").split(b"\0")
    return [word.decode(errors="replace") for word in argv]


def _listening_inode(port: int) -> str:
    for table in ("tcp", "tcp6"):
        for line in (PROC / "net" / table).read_text().splitlines()[1:]:
            fields = line.split()
            listening = fields[3] == "0A"
            if listening and int(fields[1].rpartition(":")[2], 16) == port:
                return fields[9]
    raise RuntimeError(f"no socket listens on port {port}: did its server exit?")


def listening_pid(port: int, candidates: list[int]) -> int:
    """Which of ``candidates`` holds the socket listening on ``port``."""
    socket = f"socket:[{_listening_inode(port)}]"
    for pid in candidates:
        # A process that exits while its fds are read is not the one listening: skip it.
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) == socket for fd in (PROC / str(pid) / "fd").iterdir()):
                return pid
    raise RuntimeError(f"none of the processes {candidates} listens on port {port}")
