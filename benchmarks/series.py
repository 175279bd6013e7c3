"""Rounds of ``sniper bench e2e`` commands, each run on every worktree in turn.

This is how the figures of docs/benchmarks.md were taken: a round runs the reference loop,
then each command on each tree given, alternated, so that the machine's drift falls on every
tree alike. Every run starts from ``/tmp`` with ``PYTHONPATH`` set to its tree: ``python -m``
run inside a checkout would put that checkout first on ``sys.path`` and shadow the tree under
test. Each run's whole output goes to ``OUT/TREE.COMMAND.ROUND.txt``; the results table's rows
(sniper's and the peer's examples/s and their ratio) are printed as they come. Set
``SNIPER_TORCHREC_PYTHON`` to TorchRec's interpreter (``make bench`` makes
``.venv-torchrec``) for the ``--peer torchrec`` commands.

Usage: ``python benchmarks/series.py ROUNDS OUT TREE [TREE ...]`` with ``--torch`` to add the
two one-process commands against plain torch (scale 1.0 and 0.02).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from reference_loop import reference_seconds

COMMANDS = {
    "criteo": ["--workload", "criteo", "--batches", "200"],
    "torchrec-0.02": ["--peer", "torchrec", "--scale", "0.02", "--batches", "200"],
    "torchrec-1.0": ["--peer", "torchrec", "--scale", "1.0", "--batches", "60"],
}
TORCH_COMMANDS = {
    "torch-1.0": ["--scale", "1.0", "--batches", "60", "--launcher", "inprocess"],
    "torch-0.02": ["--scale", "0.02", "--batches", "200", "--launcher", "inprocess"],
}
RESULT_ROWS = ("sniper, ", "torch, one process", "TorchRec fused, one process")
"""How the rows of ``sniper bench e2e``'s results table begin."""


def run_bench(tree: Path, args: list[str], out: Path) -> None:
    """Run ``sniper bench e2e ARGS`` on ``tree`` from /tmp, keep its output, print its rows."""
    env = os.environ | {"PYTHONPATH": str(tree)}
    command = [sys.executable, "-m", "sniper", "bench", "e2e", *args]
    done = subprocess.run(command, cwd="/tmp", env=env, capture_output=True, text=True, check=False)
    out.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        print(f"  {tree.name}: failed (exit {done.returncode}), see {out}")
        return
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_ROWS):
            print(f"  {tree.name}: {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int)
    parser.add_argument("out", type=Path)
    parser.add_argument("trees", type=Path, nargs="+", help="worktrees of the commits compared")
    parser.add_argument("--torch", action="store_true", help="add the torch commands")
    options = parser.parse_args()
    commands = COMMANDS | (TORCH_COMMANDS if options.torch else {})
    options.out.mkdir(parents=True, exist_ok=True)
    trees = [tree.resolve() for tree in options.trees]
    for round_ in range(1, options.rounds + 1):
        print(f"round {round_}: ref loop {reference_seconds():.2f}s")
        for name, args in commands.items():
            print(f" sniper bench e2e {' '.join(args)}")
            for tree in trees:
                run_bench(tree, args, options.out / f"{tree.name}.{name}.{round_}.txt")


if __name__ == "__main__":
    main()
