"""``sniper bench chaos``: kill random roles of small local jobs at random moments; did each
job hold?

Each trial runs ``sniper train --launcher local --checkpoint-dir`` on a small synthetic job and,
at one or two random moments of it, kills a random role (a ps or a hub) with SIGKILL. The job
held when it ended by itself with exit status 0, trained the same steps and examples as an
uninterrupted run of the same job (run first), and left none of its roles running; otherwise it
broke, and the trial's failure is quoted by its first line (``sniper: error: ...``, or the
exception a traceback ends with). A moment before the victim's role has started kills the first
role that starts; one after the job has ended kills nothing. Every choice is drawn from one
``random.Random(seed)``, so a trial replays with the same seed (on a machine as loaded).

:class:`RunningJob` is the harness: a ``sniper train`` process whose output lines are kept as
they come, the roles it started found by their config files, and a kill by role name. The
tests of supervision (``tests/cluster/test_kill_anytime.py``) use it to kill at named phases.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RunningJob", "Trial", "run"]

_POLL = 0.005
"""Seconds between looks at the job's output, its roles or its checkpoint directory."""


class RunningJob:
    """``sniper train ARGS`` in ``cwd``, its standard output and error kept line by line."""

    def __init__(self, cwd: Path, *args: str, new_session: bool = False) -> None:
        """``new_session``: the job leads a session (and process group) of its own, which a
        test may signal as a terminal's Ctrl-C signals its foreground group."""
        self.cwd = cwd
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-m", "sniper", "train", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=new_session,
        )
        self.lines: list[str] = []
        """Every line so far, both streams, in the order they were read."""
        self.stderr: list[str] = []
        self._pumps = [
            threading.Thread(target=self._pump, args=(stream, is_err), daemon=True)
            for stream, is_err in ((self.process.stdout, False), (self.process.stderr, True))
        ]
        for pump in self._pumps:
            pump.start()
        self.seen: set[int] = set()
        """Every role process seen so far (pids), killed or not."""

    def _pump(self, stream: Any, is_err: bool) -> None:
        for line in stream:
            self.lines.append(line)
            if is_err:
                self.stderr.append(line)

    def count(self, text: str) -> int:
        """How many lines so far hold ``text``."""
        return sum(text in line for line in list(self.lines))

    def wait_until(self, done: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
        """Poll ``done()`` until it holds; AssertionError if the job ends or time runs out."""
        deadline = time.monotonic() + timeout
        while not done():
            if self.process.poll() is not None:
                raise AssertionError(f"the job ended before {what}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout:.0f} s:\n{self.tail()}")
            time.sleep(_POLL)

    def wait_for(self, text: str, count: int = 1, timeout: float = 120.0) -> None:
        """Until ``count`` lines hold ``text``."""
        self.wait_until(lambda: self.count(text) >= count, f"line {count} with {text!r}", timeout)

    def roles(self) -> dict[str, int]:
        """The role processes the job runs now, by name (``"ps 0"``, ``"hub 0"``, ``"trainer
        1"``): its children serving ``ps.toml`` (in the order they started) or ``hub-N.toml``,
        or training as rank N from ``trainer-N.toml``."""
        ps: list[tuple[int, int]] = []
        hubs: dict[str, int] = {}
        for pid, start, command in _children(self.process.pid):
            if not {"serve", "train"} & set(command) or "sniper-train-" not in " ".join(command):
                continue
            config = Path(command[-1]).name if command else ""
            if config == "ps.toml":
                ps.append((start, pid))
            elif config.startswith("hub-") and config.endswith(".toml"):
                hubs[f"hub {config[4:-5]}"] = pid
            elif config.startswith("trainer-") and config.endswith(".toml"):
                hubs[f"trainer {config[8:-5]}"] = pid
        found = {f"ps {i}": pid for i, (_, pid) in enumerate(sorted(ps))} | hubs
        self.seen.update(found.values())
        return found

    def kill(self, role: str, signum: int = signal.SIGKILL) -> int:
        """SIGKILL ``role`` (``"ps 1"``, or ``"ps"`` / ``"hub"`` for the first one running),
        or send it ``signum`` (SIGSTOP: a server that stops answering); its pid."""
        running = self.roles()
        pid = running.get(role) or next(
            (p for name, p in running.items() if name.split()[0] == role), None
        )
        if pid is None:
            raise LookupError(f"no {role} runs now (running: {', '.join(running) or 'none'})")
        os.kill(pid, signum)
        return pid

    def finish(self, timeout: float = 300.0) -> int:
        """Wait for the job to end; its exit status (killed, and -9, if it outlives
        ``timeout``)."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for pump in self._pumps:
            pump.join(timeout=10)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        return self.process.returncode

    def stop(self) -> None:
        """Kill the job if it still runs (a test's way out)."""
        if self.process.poll() is None:
            self.process.kill()
        self.finish()

    def failure(self) -> str:
        """The first line that says why the job failed."""
        errors = [line for line in self.stderr if line.startswith("sniper: error:")]
        if errors:
            return errors[0].strip()
        for line in reversed(self.stderr):
            if line.strip() and not line.startswith(" "):
                return line.strip()
        return f"exit status {self.process.returncode}"

    def tail(self, lines: int = 30) -> str:
        return "".join(self.lines[-lines:])

    def survivors(self) -> list[int]:
        """Role processes this job started that still run (none should, once it ended)."""
        return [pid for pid in sorted(self.seen) if _alive(pid)]


def _children(parent: int) -> list[tuple[int, int, list[str]]]:
    """(pid, start time in clock ticks, argv) of each child of ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_text().split("\0")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == parent:
            found.append((int(entry.name), int(fields[19]), [c for c in command if c]))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


JOB = """\
scale = {scale}
num_batches = {batches}
num_ps = 2
hidden = [16]
progress = false
checkpoint_every = {every}
"""


@dataclass
class Trial:
    """One trial: what it killed and when, and how the job ended."""

    number: int
    kills: list[str] = field(default_factory=list)
    """``"ps 1 at 7.2 s"``, one per kill made."""
    status: int | None = None
    restarts: int | None = None
    seconds: float = 0.0
    failure: str | None = None
    """None: the job held."""


def _report(path: Path) -> dict[str, Any] | None:
    try:
        loaded: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return loaded


def _reference(root: Path) -> tuple[dict[str, Any], float]:
    job = RunningJob(
        root,
        *("--config", "job.toml", "--launcher", "local"),
        *("--checkpoint-dir", "reference", "--output", "ref.json"),
    )
    status = job.finish()
    report = _report(root / "ref.json")
    if status != 0 or report is None:
        raise RuntimeError(f"the uninterrupted run failed: {job.failure()}")
    return report, time.monotonic() - job.started


def _trial(
    number: int, root: Path, rng: random.Random, reference: dict[str, Any], span: float
) -> Trial:
    """Run the job, killing one or two random roles at random moments of ``span`` seconds."""
    trial = Trial(number)
    out = f"trial-{number}"
    moments = sorted(rng.uniform(0, span) for _ in range(rng.choice((1, 2))))
    victims = [(rng.choice(("ps", "ps", "hub")), rng.random()) for _ in moments]
    job = RunningJob(
        root,
        *("--config", "job.toml", "--launcher", "local"),
        *("--checkpoint-dir", out, "--output", f"{out}.json"),
    )
    try:
        for moment, (victim, pick) in zip(moments, victims, strict=True):
            while time.monotonic() - job.started < moment and job.process.poll() is None:
                time.sleep(_POLL)
            killed = _kill_some(job, victim, pick)
            if killed is not None:
                trial.kills.append(f"{killed} at {time.monotonic() - job.started:.1f} s")
        trial.status = job.finish()
    finally:
        job.stop()
    trial.seconds = time.monotonic() - job.started
    report = _report(root / f"{out}.json")
    if report is not None:
        trial.restarts = report.get("restarts")
    trial.failure = _why_broken(job, report, reference)
    return trial


def _kill_some(job: RunningJob, victim: str, pick: float) -> str | None:
    """Kill a running ``victim`` (``"ps"``/``"hub"``; ``pick`` in [0, 1) says which), else
    whatever role runs first; None if the job ended first."""
    while job.process.poll() is None:
        running = job.roles()
        named = [name for name in running if name.split()[0] == victim] or list(running)
        if named:
            name = named[int(pick * len(named))]
            with contextlib.suppress(ProcessLookupError):
                os.kill(running[name], signal.SIGKILL)
                return name
        time.sleep(_POLL)
    return None


def _why_broken(job: RunningJob, report: dict[str, Any] | None, ref: dict[str, Any]) -> str | None:
    if job.process.returncode != 0:
        return job.failure()
    if report is None:
        return "exit status 0 but no report written"
    for key in ("steps", "examples"):
        if report.get(key) != ref.get(key):
            return f"{key} {report.get(key)} where the uninterrupted run had {ref.get(key)}"
    if job.survivors():
        return f"roles still running after the job ended: pids {job.survivors()}"
    return None


def run(
    trials: int,
    seed: int = 0,
    scale: float = 0.005,
    batches: int = 60,
    checkpoint_every: int = 20,
) -> list[Trial]:
    """Run the trials and print each, then the held and broke counts with each failure."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="sniper-chaos-") as where:
        root = Path(where)
        (root / "job.toml").write_text(
            JOB.format(scale=scale, batches=batches, every=checkpoint_every)
        )
        reference, span = _reference(root)
        print(
            f"uninterrupted: {reference['steps']} steps, {reference['examples']:,} examples "
            f"in {span:.1f} s; killing roles at random moments of it (seed {seed})",
            flush=True,
        )
        done = []
        for number in range(1, trials + 1):
            trial = _trial(number, root, rng, reference, span)
            done.append(trial)
            outcome = "held" if trial.failure is None else "BROKE"
            kills = ", ".join(trial.kills) or "nothing (the job ended first)"
            print(
                f"trial {number}: killed {kills}: {outcome} (exit {trial.status}, "
                f"{trial.restarts if trial.restarts is not None else '?'} restart(s), "
                f"{trial.seconds:.1f} s)",
                flush=True,
            )
    _summary(done)
    return done


def _summary(trials: Sequence[Trial]) -> None:
    broke = [t for t in trials if t.failure is not None]
    print(f"held {len(trials) - len(broke)} of {len(trials)}, broke {len(broke)}")
    for trial in broke:
        print(f"  trial {trial.number} ({', '.join(trial.kills)}): {trial.failure}")
