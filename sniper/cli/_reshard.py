"""``sniper reshard``: regroup one job's ps checkpoints for another number of ps."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sniper.cli._parsing import positive_int

if TYPE_CHECKING:
    from sniper.cli._parsing import Commands

__all__ = ["add_parser", "run"]


def add_parser(commands: Commands) -> None:
    """Add ``sniper reshard`` to ``commands``."""
    parser = commands.add_parser(
        "reshard",
        help="regroup the ps checkpoints of one job (one directory per ps) for --num-ps ps",
    )
    parser.add_argument("sources", nargs="+", help="each old ps's checkpoint directory")
    parser.add_argument("--num-ps", type=positive_int, required=True)
    parser.add_argument("--out", required=True, help="writes OUT/ps-0 .. OUT/ps-(N-1)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Write ``--num-ps`` checkpoints under ``--out`` and print the rows of each."""
    from pathlib import Path

    from sniper.cluster import reshard

    out = Path(args.out)
    targets = [out / f"ps-{index}" for index in range(args.num_ps)]
    rows = reshard([Path(source) for source in args.sources], targets)
    for target, count in zip(targets, rows, strict=True):
        print(f"{target}: {count:,} rows")
    return 0
