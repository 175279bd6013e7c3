"""CPU time of a job's processes, from ``/proc``, while the job runs.

A ``sniper train`` run starts its ps and hubs as child processes and stops them before it
exits, so their CPU time cannot be read afterwards (``wait4`` gives the launcher's children
only, summed). Instead a thread samples ``/proc`` every quarter second: it walks every
process's parent link (``/proc/PID/stat`` field 4) down from the train process
(:func:`sniper.runtime.descendants`), and keeps the last ``utime + stime`` it saw of each. A
process's final quarter second is lost, which is far below the differences the experiments look
for (the seeds' ps at 59% against 10%).

Roles come from each process's command line, the way ``sniper train`` starts them: the train
process is the trainer; ``sniper serve --config DIR/ps.toml`` is a ps (every ps shares one
``ps.toml``, so they are numbered by start time, field 22, which is the order they were
started in: the cluster's order); ``DIR/hub-N.toml`` is hub N.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field

from sniper.runtime import command_line, descendants

__all__ = ["CpuSampler", "CpuUsage", "ProcessCpu"]

_HUB = re.compile(r"hub-(\d+)\.toml$")


@dataclass
class ProcessCpu:
    """One process as last seen."""

    pid: int
    start_ticks: int
    """When it started, in clock ticks after boot (``/proc/PID/stat`` field 22)."""
    cpu_seconds: float
    role: str
    """``trainer``, ``ps``, ``hub N`` or ``other``."""


@dataclass(frozen=True)
class CpuUsage:
    """CPU-seconds per role of one run."""

    trainer: float
    ps: list[float]
    """Each ps, in start order (the cluster's order)."""
    hubs: list[float]
    other: float
    """Descendants that are none of the roles (a helper a library spawned)."""

    def ps_ratio(self) -> float | None:
        """The busiest ps' CPU over the idlest's (None without two ps that used any)."""
        if len(self.ps) < 2 or min(self.ps) <= 0:
            return None
        return max(self.ps) / min(self.ps)

    def metrics(self) -> dict[str, float | None]:
        """The columns of ``results.csv``."""
        row: dict[str, float | None] = {
            "cpu_trainer_s": self.trainer,
            "cpu_ps_s": sum(self.ps),
            "cpu_hub_s": sum(self.hubs),
            "cpu_other_s": self.other,
            "ps_cpu_ratio": self.ps_ratio(),
        }
        row |= {f"cpu_ps{index}_s": seconds for index, seconds in enumerate(self.ps)}
        return row


def _role(pid: int, root: int) -> str:
    if pid == root:
        return "trainer"
    try:
        words = command_line(pid)
    except OSError:
        return "other"
    if "serve" not in words or "--config" not in words:
        return "other"
    config = words[words.index("--config") + 1] if words[-1] != "--config" else ""
    if config.endswith("/ps.toml") or config == "ps.toml":
        return "ps"
    if (hub := _HUB.search(config)) is not None:
        return f"hub {hub.group(1)}"
    return "other"


@dataclass
class CpuSampler:
    """Samples the CPU time of ``root`` and its descendants until :meth:`stop`."""

    root: int
    interval: float = 0.25
    seen: dict[int, ProcessCpu] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> CpuSampler:
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval):
                return

    def sample(self) -> None:
        """Record every live descendant's CPU time now (a process keeps its last figure)."""
        for pid, (seconds, start) in descendants(self.root).items():
            known = self.seen.get(pid)
            if known is not None and known.start_ticks == start:
                known.cpu_seconds = seconds
                if known.role == "other":  # seen between fork and exec: the parent's argv
                    known.role = _role(pid, self.root)
            else:  # new, or a reused pid
                self.seen[pid] = ProcessCpu(pid, start, seconds, _role(pid, self.root))

    def stop(self) -> CpuUsage:
        """Stop sampling; the CPU-seconds per role."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.usage()

    def usage(self) -> CpuUsage:
        processes = sorted(self.seen.values(), key=lambda p: (p.start_ticks, p.pid))
        hubs: dict[int, float] = {}
        for process in processes:
            if process.role.startswith("hub "):
                index = int(process.role.split()[1])
                hubs[index] = hubs.get(index, 0.0) + process.cpu_seconds
        return CpuUsage(
            trainer=sum(p.cpu_seconds for p in processes if p.role == "trainer"),
            ps=[p.cpu_seconds for p in processes if p.role == "ps"],
            hubs=[hubs[index] for index in sorted(hubs)],
            other=sum(p.cpu_seconds for p in processes if p.role == "other"),
        )
