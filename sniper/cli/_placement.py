"""``sniper placement``: which ps owns each variable, of a workload, a running job or a job
checkpoint."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sniper.cli._parsing import add_workload, positive_int

if TYPE_CHECKING:
    from sniper.cli._parsing import Commands

__all__ = ["add_parser", "run"]


def add_parser(commands: Commands) -> None:
    """Add ``sniper placement`` to ``commands``."""
    parser = commands.add_parser(
        "placement",
        help="show which ps owns each variable: of a workload as a fresh job places it, of a "
        "running job (--ps) or of a job checkpoint (--checkpoint)",
    )
    add_workload(parser)
    parser.add_argument("--num-ps", type=positive_int, default=4)
    parser.add_argument(
        "--policy",
        choices=("balanced", "hash"),
        default="balanced",
        help="the train config's placement key: balanced (its default) or hash",
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="the train config's scale: the synthetic data's signs per batch and vocabulary",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--ps", metavar="HOST:PORT,...", help="ask these running ps (in job order) instead"
    )
    where.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="the placement a job checkpoint (DIR or DIR/step-N) recorded",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the placement the arguments name."""
    from pathlib import Path

    from sniper.cluster import (
        parse_addresses,
        print_checkpoint_placement,
        print_live_placement,
        print_placement,
    )

    if args.ps:
        print_live_placement(parse_addresses(args.ps, "--ps"))
    elif args.checkpoint:
        from sniper.cluster import load_job

        job = load_job(Path(args.checkpoint).resolve())
        print_checkpoint_placement(job.placement, job.step)
    else:
        from sniper.data import load_workload

        print_placement(load_workload(args.workload), args.num_ps, args.policy, args.scale)
    return 0
