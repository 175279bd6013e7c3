"""How a ps scales past 2 cores: ``sniper bench scheduler`` and ``sniper bench e2e`` with 1, 2,
4, 8 and 16 ps worker threads, in one command, for a machine with the cores to show it.

A 2-core machine cannot: one lock cost the seed systems 50x on 60-core ps and costs 1.25x
here. For each count N up to the machine's cores it runs ``sniper bench scheduler --workers
N`` (the ps's step through every scheduler backend) and ``sniper bench e2e --workers N
--threads N`` against TorchRec at full shape in one process (the job's ps on N threads, the
peer on N), from ``/tmp`` so that the installed or ``PYTHONPATH`` tree is the one measured.
Each run's whole output goes to ``OUT/scheduler-N.txt`` and ``OUT/e2e-N.txt``; the rows that
carry the figures (each backend's, sniper's and the peer's, the kernel-bound limit) are printed
as they come. No run starts once ``--budget`` seconds have gone, so that a lent machine's time
is not overrun: the counts run smallest first, and each pair together.

Usage: ``SNIPER_TORCHREC_PYTHON=.venv-torchrec/bin/python python benchmarks/cores.py OUT``
with ``--counts 1,2,4,8,16``, ``--budget SECONDS``, ``--scale`` and ``--batches`` (e2e's,
default 1.0 and 60) and ``--steps`` (the scheduler's, default 20).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

SCHEDULER_ROWS = ("inline ", "adaptive ", "per_variable ", "thread_pool ", "work_stealing ")
E2E_ROWS = ("sniper, ", "TorchRec fused, one process", "  1 ps in one process: ")
"""How the lines with the figures begin: the scheduler's backend rows; e2e's result rows and
its kernel-bound limit."""


def counts(text: str) -> list[int]:
    """``1,2,4`` as worker counts, smallest first, each at least 1."""
    values = sorted({int(part) for part in text.split(",") if part.strip()})
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"expected counts of at least 1, got {text!r}")
    return values


def run_bench(args: list[str], out: Path, rows: tuple[str, ...]) -> bool:
    """Run ``sniper bench ARGS`` from /tmp, keep its output in ``out``, print its figures;
    whether it exited 0."""
    command = [sys.executable, "-m", "sniper", "bench", *args]
    done = subprocess.run(command, cwd="/tmp", capture_output=True, text=True, check=False)
    out.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        print(f"  failed (exit {done.returncode}), see {out}", flush=True)
        return False
    for line in done.stdout.splitlines():
        if line.startswith(rows):
            print(f"  {line.rstrip()}", flush=True)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory for each run's whole output")
    parser.add_argument("--counts", type=counts, default=counts("1,2,4,8,16"))
    parser.add_argument("--budget", type=float, default=float("inf"), help="seconds")
    parser.add_argument("--scale", default="1.0")
    parser.add_argument("--batches", default="60")
    parser.add_argument("--steps", default="20")
    options = parser.parse_args()
    options.out.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    started = time.monotonic()
    print(f"{cores} cores; worker counts {[n for n in options.counts if n <= cores]}", flush=True)
    for n in (n for n in options.counts if n <= cores):
        if time.monotonic() - started > options.budget:
            print(f"budget of {options.budget:.0f} s spent: stopped before {n} workers")
            return
        print(f"\n{n} worker threads", flush=True)
        scheduler = ["scheduler", "--workers", str(n), "--steps", options.steps]
        run_bench(scheduler, options.out / f"scheduler-{n}.txt", SCHEDULER_ROWS)
        e2e = [
            *("e2e", "--peer", "torchrec", "--launcher", "inprocess"),
            *("--scale", options.scale, "--batches", options.batches),
            *("--workers", str(n), "--threads", str(n)),
        ]
        run_bench(e2e, options.out / f"e2e-{n}.txt", E2E_ROWS)


if __name__ == "__main__":
    main()
