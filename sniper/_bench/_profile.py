"""``sniper bench profile``: py-spy on every process of one training job, and where a batch's
time goes in each role.

The job is ``sniper bench e2e``'s (the workload's synthetic batches written as Parquet, 2 ps and
1 hub as processes, the trainer in the launching one; ``--launcher inprocess``: all in that
one process), with the trainer's metrics endpoint on. Once ``sniper train`` prints that
endpoint, training has begun; its ``sniper_trainer_steps`` is read until ``warmup`` batches
are trained, which leaves start-up out (imports, creating variables, numba loading its cached
kernels and compiling what it did not cache). Then one ``py-spy record`` attaches to each
role's process, and all are stopped when the trainer logs its per-op statistics, the first
thing it does after its last batch, before the servers stop. The ps and hub processes are
found by the ports ``sniper train`` prints for them.

The budget (``sniper._bench._budget``) divides that window by the batches trained in it (the
held-out batch of every ``eval_every`` is part of their cost, as in examples/s). CPU time
comes from ``/proc``, per process and per thread; py-spy's samples (of runnable threads only:
no ``--idle``, so a role blocked on the network adds nothing) say what each thread spent it on
(``sniper._bench._stacks``).

py-spy pauses a process for each sample (unless ``--nonblocking``) and itself takes CPU, on a
machine the job already fills. So the report says how busy the machine's cores were over the
window and who used them (the job, py-spy, anything else), and ``--unprofiled`` first runs the
same job without py-spy, for the examples/s py-spy costs. Shares within a role hold up under
that load better than milliseconds do.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from prometheus_client.parser import text_string_to_metric_families

from sniper._bench._budget import RoleBudget, Table, budget_of, budget_tables, ops_table
from sniper._bench._e2e import EVAL_EVERY, write_job
from sniper._bench._flamegraph import write_flamegraph
from sniper._bench._stacks import read_collapsed
from sniper._table import markdown_table, print_table
from sniper.cluster import read_report
from sniper.data import SyntheticCtr, Workload
from sniper.roles import TrainReport
from sniper.runtime import (
    busy_share,
    children,
    cpu_seconds,
    listening_pid,
    machine_cpu_seconds,
    thread_cpu_seconds,
    thread_names,
)

__all__ = ["ProfilerMissing", "Sampling", "find_py_spy", "run", "trained_steps"]

INSTALL_HINT = "pip install 'sniper[profile]' (or pip install py-spy)"
LAUNCHERS = ("local", "inprocess")
STARTED = re.compile(r"^started \d+ (?P<role>ps|hub\(s\)) on \S+ ports (?P<ports>.*)$")
"""``sniper train``'s lines naming the ports of the ps and hubs it started."""
TRAINER_METRICS = "metrics of the trainer on "
"""``sniper train``'s line naming the trainer's metrics endpoint, as training begins."""
POLL_SECONDS = 0.05
TRAINING_DONE = "sniper.trainer: Ops"
"""The trainer's per-op statistics, logged after its last batch (and every ``stats_interval``
seconds, which the profiled job sets to :data:`NEVER`)."""
NEVER = 1e9
ONE_PROCESS = "all roles (one process)"


class ProfilerMissing(LookupError):
    """py-spy is not installed; the message says how to install it."""


def find_py_spy() -> str:
    """The py-spy executable: beside this Python (a virtual environment's bin) or on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("py-spy")
    if found is None:
        raise ProfilerMissing(f"sniper bench profile needs py-spy: {INSTALL_HINT}")
    return found


@dataclass(frozen=True)
class Sampling:
    """How py-spy records each role, and where its files go."""

    out: Path
    rate: int = 100
    """Samples per second."""
    native: bool = False
    """Also C frames (``--native``): slower to take, and the budget does not need them (a
    kernel's time goes to the Python function that called it)."""
    nonblocking: bool = False
    """Read stacks without pausing the process: less overhead, an occasional torn stack."""

    def __post_init__(self) -> None:
        if not 1 <= self.rate <= 1000:
            raise ValueError(f"--rate is py-spy's samples per second: 1 to 1000, got {self.rate}")
        if self.native and self.nonblocking:
            raise ValueError(
                "--native and --nonblocking do not go together: py-spy reads C frames only "
                "from a process it pauses; drop one"
            )

    def describe(self) -> str:
        """How the samples were taken, for the report's title."""
        extras = [f for f, on in (("native", self.native), ("nonblocking", self.nonblocking)) if on]
        return f"py-spy at {self.rate} Hz{''.join(f', --{e}' for e in extras)}"

    def command(self, py_spy: str, pid: int, raw: Path) -> list[str]:
        """``py-spy record`` of process ``pid`` into ``raw`` (collapsed stacks, thread ids)."""
        command = [py_spy, "record", "--pid", str(pid), "--rate", str(self.rate)]
        command += ["--format", "raw", "--threads", "--output", str(raw)]
        return command + ["--native"] * self.native + ["--nonblocking"] * self.nonblocking


class _Job:
    """``sniper train --config CONFIG`` running, its stdout and stderr lines read as they come."""

    def __init__(self, config: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sniper", "train", "--config", str(config), "--quiet"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.last_line = ""
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._streams = [self.process.stdout, self.process.stderr]
        self._readers = [
            threading.Thread(target=self._read, args=(stream,), daemon=True)
            for stream in self._streams
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def lines(self, tick: float | None = None) -> Iterator[str]:
        """The lines of both streams as they come, until both end; with ``tick``, also ""
        whenever ``tick`` seconds pass without one."""
        ended = 0
        while ended < len(self._streams):
            try:
                line = self._lines.get(timeout=tick)
            except queue.Empty:
                yield ""
                continue
            if line is None:
                ended += 1
            else:
                self.last_line = line.strip() or self.last_line
                yield line

    def finish(self) -> None:
        """Wait for the run to end (it stops its servers); raise when it failed."""
        for _ in self.lines():
            pass
        if self.process.wait() != 0:
            raise RuntimeError(f"sniper train failed: {self.last_line}")

    def stop(self) -> None:
        """SIGTERM, on which ``sniper train`` stops its servers, and wait."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for reader, stream in zip(self._readers, self._streams, strict=True):
            reader.join(timeout=10)  # the job is gone: its pipes are at their end
            if stream is not None and not reader.is_alive():
                stream.close()


@dataclass
class _Spy:
    """One ``py-spy record`` on one role's process, and that process's CPU time."""

    role: str
    pid: int
    raw: Path
    log: Path
    process: subprocess.Popen[bytes]
    cpu_start: float
    threads_start: dict[int, float]
    cpu_end: float = 0.0
    threads_end: dict[int, float] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    """Each thread's name at the end of the window."""
    own_cpu: float = 0.0
    """py-spy's own CPU seconds."""

    def read_end(self) -> None:
        """The role's CPU (and py-spy's) at the end of the window."""
        self.threads_end = thread_cpu_seconds(self.pid)
        self.names = thread_names(self.pid)
        self.cpu_end = cpu_seconds(self.pid)
        self.own_cpu = cpu_seconds(self.process.pid)

    def thread_cpu(self) -> dict[int, float]:
        """Each thread's CPU seconds over the window (the threads alive at its end)."""
        return {t: end - self.threads_start.get(t, 0.0) for t, end in self.threads_end.items()}

    def budget(self, wall_seconds: float, batches: int) -> RoleBudget:
        """This role's budget per batch over a window of ``wall_seconds``."""
        cpu = self.cpu_end - self.cpu_start
        stacks = read_collapsed(self.raw)
        return budget_of(self.role, stacks, self.thread_cpu(), cpu, wall_seconds, batches)


def _start_spy(py_spy: str, sampling: Sampling, role: str, pid: int, stack: ExitStack) -> _Spy:
    name = re.sub(r"[^a-z0-9]+", "-", role).strip("-")
    raw, log = sampling.out / f"{name}.txt", sampling.out / f"{name}.py-spy.log"
    cpu, threads = cpu_seconds(pid), thread_cpu_seconds(pid)
    log_file = stack.enter_context(log.open("w"))
    process = subprocess.Popen(
        sampling.command(py_spy, pid, raw), stdout=log_file, stderr=subprocess.STDOUT
    )
    stack.callback(_kill, process)
    return _Spy(role, pid, raw, log, process, cpu, threads)


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


def _stop_spies(spies: list[_Spy]) -> None:
    """Read every role's CPU, then SIGINT every py-spy (it writes its file) and wait."""
    for spy in spies:
        if spy.process.poll() is not None:
            # The machine's (ptrace refused, the process gone), not sniper's: one line, no
            # "a bug in sniper".
            raise OSError(
                f"py-spy on {spy.role} (pid {spy.pid}) stopped early: {_last_line(spy.log)}; "
                "py-spy needs ptrace (run as root, or set kernel.yama.ptrace_scope = 0)"
            )
        spy.read_end()
    for spy in spies:
        spy.process.send_signal(signal.SIGINT)
    for spy in spies:
        if spy.process.wait(timeout=60) != 0 or not spy.raw.is_file():
            raise RuntimeError(f"py-spy on {spy.role} failed: {_last_line(spy.log)}")


def _last_line(path: Path) -> str:
    lines = path.read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no output"


def _role_pids(job: _Job, ports: dict[str, list[int]]) -> dict[str, int]:
    """Each role's process: the trainer is the job's, each server the child on its port."""
    if not ports:
        return {ONE_PROCESS: job.process.pid}  # launcher inprocess: no servers
    started = children(job.process.pid)
    pids = {"trainer": job.process.pid}
    for kind, kind_ports in ports.items():
        for index, port in enumerate(kind_ports):
            pids[f"{kind} {index}"] = listening_pid(port, started)
    return pids


def trained_steps(url: str) -> int:
    """``sniper_trainer_steps`` from the trainer's metrics endpoint."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "sniper_trainer_steps":
            return int(family.samples[0].value)
    raise RuntimeError(f"the trainer's metrics at {url} have no sniper_trainer_steps")


@dataclass(frozen=True)
class _Window:
    """The part of a run that was measured."""

    spies: list[_Spy]
    seconds: float
    first_step: int
    """Batches trained before the window opened."""
    machine_busy: float
    """The share of all the machine's cores busy over the window, whoever used them."""


Attach = Callable[[_Job, dict[str, list[int]], ExitStack], list[_Spy]]
"""Starts measuring a job (its ps and hub ports by kind): the spies, or none."""


def _watch(job: _Job, warmup: int, attach: Attach, stack: ExitStack) -> _Window:
    """Open the window once ``warmup`` batches are trained, close it when training ends."""
    ports: dict[str, list[int]] = {}
    metrics = ""
    opened: tuple[float, float, float] | None = None
    spies: list[_Spy] = []
    first_step = 0
    for line in job.lines(tick=POLL_SECONDS):
        if match := STARTED.match(line):
            kind = "ps" if match["role"] == "ps" else "hub"
            ports[kind] = [int(port) for port in match["ports"].split(",")]
        if line.startswith(TRAINER_METRICS):
            metrics = line.removeprefix(TRAINER_METRICS)
        if TRAINING_DONE in line:
            if opened is None:
                raise ValueError(
                    f"training ended before --warmup {warmup} batches were trained (every "
                    f"{EVAL_EVERY}th batch is held out): give more --batches or less --warmup"
                )
            seconds = time.perf_counter() - opened[0]
            _stop_spies(spies)
            share = busy_share(opened[1:], machine_cpu_seconds())
            return _Window(spies, seconds, first_step, share)
        if metrics and opened is None and (first_step := trained_steps(metrics)) >= warmup:
            opened = (time.perf_counter(), *machine_cpu_seconds())
            spies = attach(job, ports, stack)
    raise RuntimeError(f"sniper train ended before its training did: {job.last_line}")


def _spy_on_every_role(py_spy: str, sampling: Sampling) -> Attach:
    def attach(job: _Job, ports: dict[str, list[int]], stack: ExitStack) -> list[_Spy]:
        pids = _role_pids(job, ports)
        return [_start_spy(py_spy, sampling, role, pid, stack) for role, pid in pids.items()]

    return attach


def _run_job(
    config: Path, output: Path, warmup: int, attach: Attach
) -> tuple[_Window, TrainReport]:
    """Run the job, measuring from ``warmup`` batches to its end; the window and its report."""
    with ExitStack() as stack:
        job = _Job(config)
        stack.callback(job.stop)
        window = _watch(job, warmup, attach, stack)
        job.finish()
    return window, read_report(output).report


def run(
    workload: Workload,
    *,
    scale: float,
    batches: int,
    warmup: int = 10,
    launcher: str = "local",
    rate: int = 100,
    native: bool = False,
    nonblocking: bool = False,
    unprofiled: bool = False,
    out: str = "sniper-profile",
    markdown: bool = False,
    seed: int = 0,
) -> None:
    """Profile one training job; print each role's time budget per batch, and write the raw
    stacks, an icicle graph per role and the budget (``budget.md``, ``budget.json``) to
    ``out``. With ``unprofiled``, run the job once without py-spy first, for its examples/s."""
    if not scale > 0:
        raise ValueError(f"--scale must be positive, got {scale}")
    if not 0 <= warmup < batches:
        raise ValueError(f"--warmup must be 0 or more and below --batches, got {warmup}")
    if launcher not in LAUNCHERS:
        raise ValueError(f"--launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    sampling = Sampling(Path(out), rate, native, nonblocking)
    py_spy = find_py_spy()
    sampling.out.mkdir(parents=True, exist_ok=True)
    title = (
        f"sniper bench profile: {workload.name} at scale {scale} ({batches} batches of "
        f"{workload.batch_size}), launcher {launcher}, {sampling.describe()} on every role"
    )
    print(title, flush=True)
    data = SyntheticCtr(workload, num_batches=batches, scale=scale, seed=seed)
    plain: tuple[_Window, TrainReport] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        settings = {"stats_interval": NEVER, "metrics_port": 0}
        config, output = write_job(Path(tmp), workload, data, seed, launcher, settings)
        if unprofiled:
            plain = _run_job(config, output, warmup, lambda job, ports, stack: [])
        window, report = _run_job(config, output, warmup, _spy_on_every_role(py_spy, sampling))
    trained = report.steps - window.first_step
    budgets = [spy.budget(window.seconds, trained) for spy in window.spies]
    heading = _heading(workload, window, report, budgets, plain)
    tables = [*budget_tables(budgets), ops_table(report)]
    _print(heading, tables, markdown)
    _write(sampling.out, f"{title}\n\n{heading}", tables, budgets, window, report)


def _examples_per_second(workload: Workload, window: _Window, report: TrainReport) -> float:
    return float(report.steps - window.first_step) * workload.batch_size / window.seconds


def _heading(
    workload: Workload,
    window: _Window,
    report: TrainReport,
    budgets: list[RoleBudget],
    plain: tuple[_Window, TrainReport] | None,
) -> str:
    """What was measured, how fast it ran, and how busy the machine was meanwhile."""
    cores = os.cpu_count() or 1
    job = sum(b.cpu_ms for b in budgets) / 1e3 * (report.steps - window.first_step)
    spies = sum(spy.own_cpu for spy in window.spies)
    rate = _examples_per_second(workload, window, report)
    lines = [
        f"batches {window.first_step + 1} to {report.steps} (of {report.steps} trained) "
        f"in a {window.seconds:.1f} s window: {rate:,.0f} examples/s under py-spy",
        f"the machine's {cores} cores were {window.machine_busy:.0%} busy: this job "
        f"{job / window.seconds / cores:.0%}, py-spy {spies / window.seconds / cores:.0%}, "
        f"anything else {window.machine_busy - (job + spies) / window.seconds / cores:.0%}",
    ]
    if plain is not None:
        alone = _examples_per_second(workload, *plain)
        lines.append(
            f"the same batches without py-spy (the run before): {alone:,.0f} examples/s, "
            f"machine {plain[0].machine_busy:.0%} busy; under py-spy {rate / alone:.2f}x that"
        )
    return "\n".join(lines)


def _print(heading: str, tables: list[Table], markdown: bool) -> None:
    print(f"\n{heading}\n")
    for headers, rows in tables:
        if markdown:
            print(markdown_table(headers, rows))
        else:
            print_table(headers, rows)
            print()


def _write(
    out: Path,
    heading: str,
    tables: list[Table],
    budgets: list[RoleBudget],
    window: _Window,
    report: TrainReport,
) -> None:
    """budget.md (the tables), budget.json (the figures and the trainer's report) and an
    icicle graph per role beside its raw stacks."""
    markdown = "\n".join(markdown_table(headers, rows) for headers, rows in tables)
    (out / "budget.md").write_text(f"{heading}\n\n{markdown}")
    figures = {
        "heading": heading,
        "window_seconds": window.seconds,
        "roles": {
            b.role: {"wall_ms": b.wall_ms, "cpu_ms": b.cpu_ms, "category_ms": b.category_ms}
            for b in budgets
        },
        "thread_cpu_seconds": {
            spy.role: {f"{t} {spy.names.get(t, '')}": s for t, s in spy.thread_cpu().items()}
            for spy in window.spies
        },
        "trainer_report": report.to_dict(),
    }
    (out / "budget.json").write_text(json.dumps(figures, indent=1, default=str))
    for spy in window.spies:
        write_flamegraph(read_collapsed(spy.raw), spy.raw.with_suffix(".svg"), spy.role)
    print(f"raw stacks (.txt), icicle graphs (.svg), budget.md and budget.json in {out}/")
