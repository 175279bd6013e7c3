"""Alternated ``sniper train`` runs of one job on several worktrees.

The finest comparisons in docs/benchmarks.md are not ``sniper bench e2e`` (whose peer moves
as much as sniper does) but one job trained by each commit in turn, its own examples/s
compared. This script writes the job ``sniper bench e2e`` trains: the workload's synthetic
batches as Parquet (``sniper data convert synthetic``) and a config with ``launcher``
``inprocess`` (one process) or ``local`` (processes over gRPC). It then runs ``sniper train
--config`` on each tree in turn, ROUNDS times, from ``/tmp`` with ``PYTHONPATH`` set to the
tree, and prints each run's examples/s and the medians. The data is written once, by the first
tree, so every run trains the same batches.

Usage: ``python benchmarks/ab_train.py --workload criteo --batches 200 ROUNDS TREE [TREE ...]``
(seed_ctr at ``--scale 0.02 --batches 200`` and ``--scale 1.0 --batches 60`` are the
bench's other jobs). ``--setting FLAGS`` (repeatable) alternates settings instead of, or as
well as, commits: each tree runs with each, ``""`` for none (``--setting "" --setting
"--small-request-signs 131072"``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def sniper(tree: Path, *args: str) -> None:
    """Run the ``sniper`` command of ``tree`` from /tmp, quietly; exit with its log if it fails."""
    env = os.environ | {"PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-m", "sniper", *args],
        cwd="/tmp",
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"sniper {' '.join(args)} failed on {tree}:\n{done.stderr[-4000:]}")


def write_job(tree: Path, directory: Path, options: argparse.Namespace) -> Path:
    """The job's data and config under ``directory``: the config's path."""
    data = directory / "data.parquet"
    sniper(
        tree,
        "data",
        "convert",
        "synthetic",
        str(data),
        "--source",
        options.workload,
        "--num-batches",
        str(options.batches),
        "--scale",
        str(options.scale),
        "--seed",
        "0",
    )
    config = directory / "job.toml"
    config.write_text(
        f'workload = "{options.workload}"\n'
        f'data = "parquet:{data}"\n'
        f"num_batches = {options.batches}\n"
        "seed = 0\n"
        f'output = "{directory / "report.json"}"\n'
        f'launcher = "{options.launcher}"\n'
    )
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int)
    parser.add_argument("trees", type=Path, nargs="+", help="worktrees of the commits compared")
    parser.add_argument("--workload", default="seed_ctr")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--launcher", choices=["inprocess", "local"], default="inprocess")
    parser.add_argument("--setting", action="append", help="sniper train flags (repeatable)")
    options = parser.parse_args()
    trees = [tree.resolve() for tree in options.trees]
    arms = [(tree, setting) for tree in trees for setting in options.setting or [""]]
    rates: dict[tuple[Path, str], list[float]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        config = write_job(trees[0], directory, options)
        for _ in range(options.rounds):
            for tree, setting in arms:
                sniper(tree, "train", "--config", str(config), "--quiet", *shlex.split(setting))
                report = json.loads((directory / "report.json").read_text())
                rates[tree, setting].append(report["examples_per_second"])
                rate = report["examples_per_second"]
                print(f"{tree.name} {setting}: {rate:,.0f} examples/s", flush=True)
    for (tree, setting), runs in rates.items():
        median = statistics.median(runs)
        print(f"{tree.name} {setting}: median {median:,.0f} examples/s over {len(runs)}")


if __name__ == "__main__":
    main()
