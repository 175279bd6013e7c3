"""``sniper experiment``: run a seed log's experiment, a sweep of training runs, or list them."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sniper.cli._parsing import Commands

__all__ = ["add_parser", "run_list", "run_run"]


def add_parser(commands: Commands) -> None:
    """Add ``sniper experiment`` and its actions to ``commands``."""
    experiment = commands.add_parser(
        "experiment", help="run a seed log's experiment: a sweep of local-cluster training runs"
    )
    actions = experiment.add_subparsers(dest="experiment_command", required=True, metavar="ACTION")
    run = actions.add_parser(
        "run", help="run every point of an experiment TOML; write results.csv, summary.md, plots"
    )
    run.add_argument("file", help="an experiment TOML (experiments/NAME.toml)")
    run.add_argument(
        "--quick", action="store_true", help="apply the file's [quick] overrides (small shapes)"
    )
    run.add_argument(
        "--out", default=None, help="output directory (default: experiments/results/NAME)"
    )
    run.set_defaults(run=run_run)
    listing = actions.add_parser(
        "list", help="the experiments in a directory and the seed finding each reproduces"
    )
    listing.add_argument("directory", nargs="?", default="experiments", help="default: experiments")
    listing.set_defaults(run=run_list)


def run_run(args: argparse.Namespace) -> int:
    """Run every point of the experiment file."""
    from pathlib import Path

    from sniper.experiment import load_experiment, run_experiment

    # A bad experiment file raises ValueError before any point runs: exit status 2.
    experiment = load_experiment(Path(args.file))
    return run_experiment(experiment, quick=args.quick, out=Path(args.out) if args.out else None)


def run_list(args: argparse.Namespace) -> int:
    """Print the experiments of a directory."""
    from pathlib import Path

    from sniper.experiment import print_experiments

    print_experiments(Path(args.directory))
    return 0
